package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// silentUpstream answers nothing (with headers, only the header of an event
// stream) until its request is canceled; it reports each request's arrival
// on received and its cancel on canceled.
func silentUpstream(t *testing.T, headers bool) (up *httptest.Server, received, canceled chan struct{}) {
	received, canceled = make(chan struct{}, 1), make(chan struct{}, 1)
	up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if headers {
			w.Header().Set("Content-Type", "text/event-stream")
			http.NewResponseController(w).Flush()
		}
		received <- struct{}{}
		<-r.Context().Done()
		canceled <- struct{}{}
	}))
	t.Cleanup(up.Close)
	return up, received, canceled
}

// wantEnd waits until the proxy recorded model's one request as reason,
// and path's one request in the HTTP families with status class status,
// with nothing else recorded for either and nothing left running.
func wantEnd(t *testing.T, p *testProxy, model, reason, path, status string) {
	t.Helper()
	waitFor(t, func() (bool, string) {
		s := p.scrape(t)
		r, _ := value(s, "vllm:request_success_total", "model_name", model, "finished_reason", reason)
		all, _ := value(s, "vllm:request_success_total", "model_name", model)
		h, _ := value(s, "http_requests_total", "handler", path, "status", status)
		allH, _ := value(s, "http_requests_total", "handler", path)
		running, _ := value(s, "vllm:num_requests_running", "model_name", model)
		e2e, _ := value(s, "vllm:e2e_request_latency_seconds_count", "model_name", model)
		ttft, _ := value(s, "vllm:time_to_first_token_seconds_count", "model_name", model)
		return r == 1 && all == 1 && h == 1 && allH == 1 && running == 0 && e2e == 1 && ttft == 0,
			fmt.Sprintf("%s: %v of %v, http %s: %v of %v, running %v, e2e %v, TTFT %v\n%s", reason, r, all, status, h, allH, running, e2e, ttft,
				grep(s, "request"))
	})
}

// A client that gives up before the upstream answers (not streamed, or
// streamed before any header) or before the first token of a stream is an
// abort, counted 2xx in the HTTP families as vLLM's API server counts it;
// the upstream's request is canceled, and the proxy logs it at debug, not
// as an upstream failure.
func TestClientGaveUp(t *testing.T) {
	for name, tc := range map[string]struct {
		body    string
		headers bool
	}{
		"not streamed":             {`{"model":"m","messages":[]}`, false},
		"streamed, before headers": {`{"model":"m","stream":true,"messages":[]}`, false},
		"streamed, before a token": {`{"model":"m","stream":true,"messages":[]}`, true},
	} {
		t.Run(name, func(t *testing.T) {
			up, received, canceled := silentUpstream(t, tc.headers)
			p := startProxy(t, nil, "-upstream", up.URL)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(tc.body))
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
			<-canceled
			wantEnd(t, p, "m", "abort", "/v1/chat/completions", "2xx")
			if v, _ := value(p.scrape(t), "gen_ai_client_operation_duration_seconds_count", "gen_ai_request_model", "m"); v != 1 {
				t.Errorf("upstream legs %v, want 1\n%s", v, grep(p.scrape(t), "gen_ai_client"))
			}
			if logs := p.logs.String(); strings.Contains(logs, "level=WARN") {
				t.Errorf("a client leaving was logged as a warning:\n%s", logs)
			}
		})
	}
}

// An upstream that fails while its client waits is an error, and the
// client gets 502.
func TestUpstreamFailed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close() // no response at all
		}
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	if code, _ := post(t, p.url("/v1/chat/completions"), []byte(`{"model":"m","stream":true}`)); code != http.StatusBadGateway {
		t.Errorf("client got %d, want 502", code)
	}
	wantEnd(t, p, "m", "error", "/v1/chat/completions", "5xx")
	if !strings.Contains(p.logs.String(), "level=WARN msg=upstream") {
		t.Errorf("the upstream's failure was not logged as a warning:\n%s", p.logs)
	}
}

// A request not answered yet at the drain deadline (a silent upstream) is
// cut and recorded as an abort, 2xx in the HTTP families, and flushed.
func TestDrainDeadlineCutsSilent(t *testing.T) {
	otlp := startOTLP(t)
	up, received, _ := silentUpstream(t, false)
	p := startProxy(t, nil, "-upstream", up.URL, "-shutdown-timeout", "50ms")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(p.url("/v1/chat/completions"), "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the client got %d", resp.StatusCode)
		}
		errc <- err
	}()
	<-received
	p.cancel()
	if err := <-errc; err == nil || strings.Contains(err.Error(), "the client got") {
		t.Errorf("client: %v, want its connection cut", err)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, c := range []struct {
		name  string
		attrs []string
		want  float64
	}{
		{"vllm:request_success", []string{"model_name", "m", "finished_reason", "abort"}, 1},
		{"vllm:request_success", []string{"model_name", "m", "finished_reason", "error"}, 0},
		{"http_requests", []string{"handler", "/v1/chat/completions", "status", "2xx"}, 1},
		{"http_requests", []string{"handler", "/v1/chat/completions", "status", "5xx"}, 0},
	} {
		if v, _ := otlp.counter(c.name, c.attrs...); v != c.want {
			t.Errorf("flushed %s%v = %v, want %v\n%s", c.name, c.attrs, v, c.want, p.logs)
		}
	}
}
