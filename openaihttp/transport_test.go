package openaihttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// client is an http.Client over the transport, recording on c.
func client(t *testing.T, c *rec, opts ...openaihttp.Option) *http.Client {
	return &http.Client{Transport: openaihttp.NewTransport(nil, append([]openaihttp.Option{openaihttp.WithEngine(c.e),
		openaihttp.WithErrorHandler(func(err error) { t.Errorf("recording: %v", err) })}, opts...)...)}
}

// clientLabels are the labels of a backend's client metrics, for a leg to
// /v1/chat/completions.
func clientLabels(backend, role string, extra ...string) []string {
	l := []string{"backend", backend, "backend.role", role, "gen_ai.operation.name", "chat",
		"gen_ai.provider.name", "self_hosted", "gen_ai.request.model", model, "model_name", model, "engine", "0"}
	if host, port, err := net.SplitHostPort(backend); err == nil { // a backend named host:port is a server's
		l = append(l, "server.address", host, "server.port", port)
	}
	return append(l, extra...)
}

// named adds to labels the gen_ai.response.model of the test's bodies
// that name one (chunk, nonStreamResponse: model).
func named(l []string) []string { return namedAs(l, model) }

// namedAs adds to labels gen_ai.response.model m, none when m is "".
func namedAs(l []string, m string) []string {
	if m == "" {
		return l
	}
	return append(l[:len(l):len(l)], "gen_ai.response.model", m)
}

// clientHist returns a histogram series' count, 0 before its first value.
func (c *rec) clientHist(family string, labels ...string) uint64 {
	c.t.Helper()
	for _, f := range c.r.Families() {
		if f == family {
			return c.r.Histogram(family, labels...).Count
		}
	}
	return 0
}

func TestTransportStreamed(t *testing.T) {
	c := newRec(t)
	up := httptest.NewServer(sseHandler(chunk("a"), chunk("b"), chunk("c"), finishChunk("stop"), usageChunk(30, 3, 0), done))
	defer up.Close()
	host := strings.TrimPrefix(up.URL, "http://")
	resp, err := client(t, c).Post(up.URL+"/v1/chat/completions", "application/json", strings.NewReader(streamBody))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); !strings.Contains(got, "[DONE]") {
		t.Errorf("caller got %q", got)
	}
	l := named(clientLabels(host, ""))
	h := c.r.Histogram(instrument.NameGenAIClientTokenUsage, append(l, "gen_ai.token.type", "input")...)
	if h.Count != 1 || h.Sum != 30 {
		t.Errorf("input tokens %+v", h)
	}
	if h := c.r.Histogram(instrument.NameGenAIClientTokenUsage, append(l, "gen_ai.token.type", "output")...); h.Sum != 3 {
		t.Errorf("output tokens %+v", h)
	}
	for family, want := range map[string]uint64{
		instrument.NameGenAIClientOperationDuration:  1,
		instrument.NameGenAIClientTimeToFirstChunk:   1,
		instrument.NameGenAIClientTimePerOutputChunk: 2,
	} {
		labels := l
		if family == instrument.NameGenAIClientTimePerOutputChunk {
			labels = clientLabels(host, "") // recorded as the chunks come: no response model
		}
		if n := c.clientHist(family, labels...); n != want {
			t.Errorf("%s count %d, want %d", family, n, want)
		}
	}
	// A leg is not a request of the front end: no vLLM family moves.
	if got := c.success("stop"); got != 0 {
		t.Errorf("request_success moved on a transport: %v", got)
	}
}

func TestTransportEnds(t *testing.T) {
	for name, tc := range map[string]struct {
		handler http.Handler
		body    string
		read    func(*http.Response)
		errType string // error.type, none when ""
		named   bool   // the response names the model
	}{
		"non-streamed read whole": {jsonHandler(200, nonStreamResponse), chatBody, func(r *http.Response) { _, _ = io.ReadAll(r.Body) }, "", true},
		"closed early":            {sseHandler(chunk("a"), chunk("b"), finishChunk("stop"), done), streamBody, func(r *http.Response) {}, "client_canceled", false},
		"upstream 500":            {jsonHandler(500, `{"error":"x"}`), chatBody, func(r *http.Response) { _, _ = io.ReadAll(r.Body) }, "server_error", false},
		"truncated":               {sseHandler(chunk("a")), streamBody, func(r *http.Response) { _, _ = io.ReadAll(r.Body) }, "_OTHER", true},
	} {
		t.Run(name, func(t *testing.T) {
			c := newRec(t)
			up := httptest.NewServer(tc.handler)
			defer up.Close()
			resp, err := client(t, c, openaihttp.WithBackend("decode-0", instrument.RoleDecode)).
				Post(up.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			tc.read(resp)
			_ = resp.Body.Close()
			l := clientLabels("decode-0", "decode")
			if tc.errType != "" {
				l = append(l, "error.type", tc.errType)
			}
			if tc.named {
				l = named(l)
			}
			if n := c.clientHist(instrument.NameGenAIClientOperationDuration, l...); n != 1 {
				t.Errorf("duration count %d, want 1", n)
			}
		})
	}
}

// Closing a streamed body early is an abort, recorded in the trace.
func TestTransportTraceAndAbort(t *testing.T) {
	c := newRec(t)
	up := httptest.NewServer(sseHandler(chunk("a"), chunk("b"), finishChunk("stop"), usageChunk(3, 2, 0), done))
	defer up.Close()
	ctx, trace := openaihttp.NewTrace(t.Context())
	req, _ := http.NewRequestWithContext(openaihttp.ContextWithBackend(ctx, openaihttp.Backend{Name: "p0", Role: instrument.RolePrefill}),
		http.MethodPost, up.URL+"/v1/completions", strings.NewReader(streamBody))
	resp, err := client(t, c).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	legs := trace.Legs()
	if len(legs) != 1 || !legs[0].Done || legs[0].Backend.Name != "p0" || legs[0].Observed.Reason.String() != "abort" {
		t.Fatalf("legs %+v", legs)
	}
	if trace.KVTransferred() {
		t.Error("a prefill leg alone counts as a KV transfer")
	}
}

// A transport error is a failed leg (upstream_unreachable: no response
// came); a canceled context an aborted one (client_canceled).
func TestTransportErrors(t *testing.T) {
	c := newRec(t)
	cl := client(t, c, openaihttp.WithBackend("gone", ""))
	_, err := cl.Post("http://127.0.0.1:1/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err == nil {
		t.Fatal("no error from a closed port")
	}
	if n := c.clientHist(instrument.NameGenAIClientOperationDuration, clientLabels("gone", "", "error.type", "upstream_unreachable")...); n != 1 {
		t.Errorf("failed legs %d, want 1", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1/v1/chat/completions", strings.NewReader(chatBody))
	if _, err := cl.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if n := c.clientHist(instrument.NameGenAIClientOperationDuration, clientLabels("gone", "", "error.type", "client_canceled")...); n != 1 {
		t.Errorf("aborted legs %d, want 1", n)
	}
}

// sendLeg sends a router's leg to the backend at base in a role (backend
// name role-0) through rt, with the client request's context; nil after an
// error.
func sendLeg(t *testing.T, rt http.RoundTripper, ctx context.Context, base, role, body string) *http.Response {
	req, _ := http.NewRequestWithContext(openaihttp.ContextWithBackend(ctx, openaihttp.Backend{Name: role + "-0", Role: role}),
		http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Error(err)
		return nil
	}
	return resp
}

// A P/D router: NewHandler in front, a prefill and a decode leg through the
// transport. The router's request is counted once, with the prefill leg's
// cached tokens as local cache hits (not the decode leg's, which count the
// KV transferred: see TestRouterCachedTokensEitherDecode), and each leg per
// backend.
func TestRouterLegs(t *testing.T) {
	router, backends := newRec(t), newRec(t)
	prefill := httptest.NewServer(jsonHandler(200, `{"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":100,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":10}}}`))
	defer prefill.Close()
	decode := httptest.NewServer(sseHandler(chunk("a"), chunk("b"), finishChunk("stop"), usageChunk(100, 2, 100), done))
	defer decode.Close()
	tr := openaihttp.NewTransport(nil, openaihttp.WithEngine(backends.e))
	var legs []openaihttp.Leg
	s := serve(t, router, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ctx := r.Context()
		send := func(base, role, body string) *http.Response { return sendLeg(t, tr, ctx, base, role, body) }
		p := send(prefill.URL, instrument.RolePrefill, chatBody)
		_, _ = io.Copy(io.Discard, p.Body)
		_ = p.Body.Close()
		d := send(decode.URL, instrument.RoleDecode, string(body))
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.Copy(w, d.Body)
		_ = d.Body.Close()
		legs = openaihttp.TraceFrom(ctx).Legs()
	}))
	readAll(t, post(t, s.URL+"/v1/chat/completions", streamBody))
	s.wait()
	router.want("stop", 100, 2, 10)
	for source, want := range map[string]float64{"local_cache_hit": 10, "local_compute": 90, "external_kv_transfer": 0} {
		if got := router.value("vllm:prompt_tokens_by_source_total", "source", source); got != want {
			t.Errorf("%s on the router = %v, want %v", source, got, want)
		}
	}
	if len(legs) != 2 || legs[0].Backend.Role != "prefill" || legs[1].Backend.Role != "decode" || !legs[0].Done || !legs[1].Done {
		t.Fatalf("legs %+v", legs)
	}
	if gap := legs[1].Start.Sub(legs[0].End()); gap < 0 {
		t.Errorf("handoff gap %v < 0", gap)
	}
	// The prefill response names no model, the decode stream's chunks do.
	if n := backends.clientHist(instrument.NameGenAIClientOperationDuration, clientLabels("prefill-0", "prefill")...); n != 1 {
		t.Errorf("prefill legs %d, want 1", n)
	}
	if n := backends.clientHist(instrument.NameGenAIClientOperationDuration, named(clientLabels("decode-0", "decode"))...); n != 1 {
		t.Errorf("decode legs %d, want 1", n)
	}
	if n := backends.clientHist(instrument.NameGenAIClientTimeToFirstChunk, named(clientLabels("decode-0", "decode"))...); n != 1 {
		t.Errorf("decode time to first chunk count %d", n)
	}
}

// A gateway that retries: its handler records once, at the client
// request's end, how many legs the transport sent for it
// (infermetrics.gateway.request.attempts): 3 for two refusals and a
// success, 1 for a reverse proxy's single leg, nothing for a handler that
// sent none.
func TestGatewayAttempts(t *testing.T) {
	c, backends := newRec(t), newRec(t)
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1)%3 != 0 {
			http.Error(w, `{"error":{"message":"busy","type":"server_error"}}`, http.StatusServiceUnavailable)
			return
		}
		jsonHandler(200, nonStreamResponse).ServeHTTP(w, r)
	}))
	defer up.Close()
	tr := openaihttp.NewTransport(nil, openaihttp.WithEngine(backends.e))
	retrying := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		for {
			resp := sendLeg(t, tr, r.Context(), up.URL, "", string(body))
			if resp == nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				_, _ = w.Write(b)
				return
			}
		}
	}))
	readAll(t, post(t, retrying.URL+"/v1/chat/completions", chatBody))
	h := c.r.Histogram(instrument.NameGatewayRequestAttempts, c.labels()...)
	if h.Count != 1 || h.Sum != 3 {
		t.Errorf("attempts: count %d sum %v, want one request of 3", h.Count, h.Sum)
	}

	c2 := newRec(t)
	target, _ := url.Parse(up.URL)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, Transport: tr}
	calls.Store(2) // the next call succeeds
	readAll(t, post(t, serve(t, c2, proxy).URL+"/v1/chat/completions", chatBody))
	if h := c2.r.Histogram(instrument.NameGatewayRequestAttempts, c2.labels()...); h.Count != 1 || h.Sum != 1 {
		t.Errorf("reverse proxy attempts: count %d sum %v, want one request of 1", h.Count, h.Sum)
	}

	c3 := newRec(t)
	readAll(t, post(t, serve(t, c3, jsonHandler(200, nonStreamResponse)).URL+"/v1/chat/completions", chatBody))
	if n := c3.count(instrument.NameGatewayRequestAttempts); n != 0 {
		t.Errorf("a handler without legs recorded %d attempts", n)
	}
}

// A leg's default backend is its URL's host:port, the port its scheme
// implies when it names none, whose host and port the client metrics
// carry as server.address and server.port; a backend named otherwise
// (WithBackend) has neither.
func TestTransportServerAddress(t *testing.T) {
	for _, c := range []struct {
		url, backend, address, port string
		opts                        []openaihttp.Option
	}{
		{"https://api.example.test/v1/chat/completions", "api.example.test:443", "api.example.test", "443", nil},
		{"http://10.0.0.3/v1/chat/completions", "10.0.0.3:80", "10.0.0.3", "80", nil},
		{"http://[::1]:8000/v1/chat/completions", "[::1]:8000", "::1", "8000", nil},
		{"http://10.0.0.3:8000/v1/chat/completions", "decode-0", "", "", []openaihttp.Option{openaihttp.WithBackend("decode-0", "")}},
	} {
		r := newRec(t)
		base := roundTripper(func(req *http.Request) (*http.Response, error) {
			_, _ = io.Copy(io.Discard, req.Body)
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(nonStreamResponse)), Request: req}, nil
		})
		tr := openaihttp.NewTransport(base, append(c.opts, openaihttp.WithEngine(r.e))...)
		req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(`{"model":"qwen-7b","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		l := []string{"backend", c.backend, "backend.role", "", "gen_ai.operation.name", "chat", "gen_ai.provider.name", "self_hosted",
			"gen_ai.request.model", model, "gen_ai.response.model", model, "model_name", model, "engine", "0"}
		if c.address != "" {
			l = append(l, "server.address", c.address, "server.port", c.port)
		}
		if h := r.r.Histogram(instrument.NameGenAIClientOperationDuration, l...); h.Count != 1 {
			t.Errorf("%s: no leg of %v", c.url, l)
		}
	}
}
