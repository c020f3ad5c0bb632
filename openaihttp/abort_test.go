package openaihttp_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// silentUpstream answers nothing until its request is canceled; received
// gets each request's arrival. With headers it first sends the header of
// an event stream.
func silentUpstream(t *testing.T, headers bool, received chan<- struct{}) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if headers {
			w.Header().Set("Content-Type", "text/event-stream")
			http.NewResponseController(w).Flush()
		}
		received <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(up.Close)
	return up
}

// reverseProxy is an httputil.ReverseProxy to up with its default error
// handler (502 to the client, whether or not it is still there).
func reverseProxy(up string) *httputil.ReverseProxy {
	u, _ := url.Parse(up)
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		ErrorLog: log.New(io.Discard, "", 0)}
}

// wantHTTP checks that the n requests the HTTP families counted were all
// counted on path with a status of class status.
func (c *rec) wantHTTP(path, status string, n uint64) {
	c.t.Helper()
	if got := c.r.Value("http_requests_total", "handler", path, "method", "POST", "status", status); got != float64(n) {
		c.t.Errorf("http_requests_total{handler=%q,status=%q} = %v, want %d", path, status, got, n)
	}
	if got := c.clientHist("http_request_duration_highr_seconds"); got != n {
		c.t.Errorf("%d requests in the HTTP families, want %d", got, n)
	}
	if got := c.value("vllm:num_requests_running"); got != 0 {
		c.t.Errorf("running after the end = %v", got)
	}
}

// A client that gives up before the upstream's response, through a plain
// httputil.ReverseProxy (whose error handler then writes 502 to nobody),
// is an abort, counted 2xx in the HTTP families as vLLM's API server
// counts it: non-streamed, streamed before the headers, and streamed after
// the headers but before the first token (the client presses stop).
func TestClientGaveUpIsAbort(t *testing.T) {
	for name, tc := range map[string]struct {
		body    string
		headers bool
	}{
		"not streamed":             {chatBody, false},
		"streamed, before headers": {streamBody, false},
		"streamed, before a token": {streamBody, true},
	} {
		t.Run(name, func(t *testing.T) {
			received := make(chan struct{}, 1)
			up := silentUpstream(t, tc.headers, received)
			c := newRec(t)
			s := serve(t, c, reverseProxy(up.URL), openaihttp.WithHTTPMetrics(c.e, func(r *http.Request) string { return r.URL.Path }))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(tc.body))
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				errc <- err
			}()
			<-received
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("client: %v, want its cancel", err)
			}
			s.wait()
			c.want("abort", 0, 0, 0)
			if got := c.success("error"); got != 0 {
				t.Errorf("request_success{error} = %v", got)
			}
			if n := c.count("vllm:time_to_first_token_seconds"); n != 0 {
				t.Errorf("TTFT count %d, want 0", n)
			}
			if n := c.count("vllm:e2e_request_latency_seconds"); n != 1 {
				t.Errorf("e2e count %d, want 1", n)
			}
			c.wantHTTP("/v1/chat/completions", "2xx", 1)
		})
	}
}

// An upstream that fails while its client waits is an error and a 502,
// which the client gets.
func TestUpstreamFailedIsError(t *testing.T) {
	for name, body := range map[string]string{"not streamed": chatBody, "streamed": streamBody} {
		t.Run(name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close() // no response at all
				}
			}))
			defer up.Close()
			c := newRec(t)
			s := serve(t, c, reverseProxy(up.URL), openaihttp.WithHTTPMetrics(c.e, func(r *http.Request) string { return r.URL.Path }))
			resp := post(t, s.URL+"/v1/chat/completions", body)
			readAll(t, resp)
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("client got %d, want 502", resp.StatusCode)
			}
			s.wait()
			c.want("error", 0, 0, 0)
			if got := c.success("abort"); got != 0 {
				t.Errorf("request_success{abort} = %v", got)
			}
			c.wantHTTP("/v1/chat/completions", "5xx", 1)
		})
	}
}

// A status written after the client left (here by a handler that waits for
// the cancel) never reached it: an abort, 2xx, on any path.
func TestStatusAfterClientLeft(t *testing.T) {
	c := newRec(t)
	received := make(chan struct{}, 2)
	s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // net/http notices a client leaving once the body is read
		received <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		http.Error(w, "upstream gone", http.StatusServiceUnavailable)
	}), openaihttp.WithHTTPMetrics(c.e, func(r *http.Request) string { return r.URL.Path }))
	for _, path := range []string{"/v1/chat/completions", "/v1/models"} {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+path, strings.NewReader(chatBody))
		go func() { <-received; cancel() }()
		if _, err := http.DefaultClient.Do(req); err == nil {
			t.Errorf("%s: the client got a response", path)
		}
	}
	s.wait()
	c.want("abort", 0, 0, 0)
	for _, path := range []string{"/v1/chat/completions", "/v1/models"} {
		if got := c.r.Value("http_requests_total", "handler", path, "method", "POST", "status", "2xx"); got != 1 {
			t.Errorf("%s: 2xx %v, want 1", path, got)
		}
	}
	if got := c.clientHist("http_request_duration_highr_seconds"); got != 2 {
		t.Errorf("%d requests in the HTTP families, want 2", got)
	}
}
