package openaihttp

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
)

// Why a request failed, from what upstreams answer: each error body (as
// the upstream's code or its recorded responses write it), behind the
// handler and through the transport, written whole, byte by byte and
// gzip-encoded, gives its error.type. The providers' types and codes name
// the cause when the status cannot (a 400 that is a context length
// refusal, vLLM's admission 503, a model not found in a 400); a 429 is the
// provider's rate limit with its error document, a server in between's
// without one or when Envoy marks it; the status says the rest.
func TestErrorBodies(t *testing.T) {
	t.Parallel()
	const chat, messages, ollama = "/v1/chat/completions", "/v1/messages", "/api/chat"
	for _, c := range []struct {
		name   string
		path   string
		status int
		header http.Header
		body   string
		want   stats.ErrorType
	}{
		// OpenAI (testdata/corpus, and its API's documented errors).
		{"OpenAI context length", chat, 400, nil, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, stats.ErrorContextLengthExceeded},
		{"OpenAI rate limit", chat, 429, nil, `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM)","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, stats.ErrorRateLimited},
		{"OpenAI quota", chat, 429, nil, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, stats.ErrorRateLimited},
		{"OpenAI bad key", chat, 401, nil, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, stats.ErrorAuthentication},
		{"OpenAI model not found in a 400", "/v1/responses", 400, nil, `{"error":{"message":"The requested model 'x' does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`, stats.ErrorNotFound},
		{"OpenAI overloaded 503", chat, 503, nil, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`, stats.ErrorOverloaded},
		// Anthropic's error types.
		{"Anthropic rate limit", messages, 429, nil, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, stats.ErrorRateLimited},
		{"Anthropic overloaded 529", messages, 529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, stats.ErrorOverloaded},
		{"Anthropic prompt too long", messages, 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`, stats.ErrorContextLengthExceeded},
		{"Anthropic permission", messages, 403, nil, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, stats.ErrorPermission},
		{"Anthropic api_error", messages, 500, nil, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, stats.ErrorServerError},
		{"Anthropic request too large", messages, 413, nil, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, stats.ErrorInvalidRequest},
		// vLLM's ErrorResponse: its context length refusal and its
		// admission refusals (see admissionPhrases), and the older form
		// with the fields at the root.
		{"vLLM context length", chat, 400, nil, `{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).","type":"BadRequestError","param":null,"code":400}}`, stats.ErrorContextLengthExceeded},
		{"vLLM decoder prompt", chat, 400, nil, `{"error":{"message":"The decoder prompt (length 9000) is longer than the maximum model length of 8192.","type":"BadRequestError","param":null,"code":400}}`, stats.ErrorContextLengthExceeded},
		{"vLLM queue full", chat, 503, nil, `{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`, stats.ErrorAdmissionRejected},
		{"vLLM prefill backlog", chat, 503, nil, `{"error":{"message":"The engine has reached its prefill token backlog limit. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`, stats.ErrorAdmissionRejected},
		{"vLLM other 503", chat, 503, nil, `{"error":{"message":"The model is sleeping.","type":"Service Unavailable","param":null,"code":503}}`, stats.ErrorServerError},
		{"vLLM older ErrorResponse", chat, 404, nil, `{"object":"error","message":"The model 'x' does not exist.","type":"NotFoundError","param":null,"code":404}`, stats.ErrorNotFound},
		// Azure OpenAI.
		{"Azure rate limit", chat, 429, nil, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation have exceeded token rate limit of your current tier."}}`, stats.ErrorRateLimited},
		{"Azure deployment not found", chat, 404, nil, `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist."}}`, stats.ErrorNotFound},
		// Gemini's OpenAI-compatible endpoint answers an array.
		{"Gemini resource exhausted", chat, 429, nil, `[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]`, stats.ErrorRateLimited},
		// Ollama's {"error": "..."}.
		{"Ollama not found", ollama, 404, nil, `{"error":"model \"llama9\" not found, try pulling it first"}`, stats.ErrorNotFound},
		{"Ollama queue full", ollama, 503, nil, `{"error":"server busy, please try again.  maximum pending requests exceeded"}`, stats.ErrorOverloaded},
		// A 429 from a server in between: no provider error document, or
		// marked by Envoy.
		{"429 empty", chat, 429, nil, ``, stats.ErrorGatewayRateLimited},
		{"429 text", chat, 429, nil, "Too Many Requests\n", stats.ErrorGatewayRateLimited},
		{"429 Kong", chat, 429, nil, `{"message":"API rate limit exceeded"}`, stats.ErrorGatewayRateLimited},
		{"429 Envoy marked", chat, 429, http.Header{"X-Envoy-Ratelimited": {"true"}}, `{"error":{"message":"x","type":"requests","code":"rate_limit_exceeded"}}`, stats.ErrorGatewayRateLimited},
		// The status alone.
		{"504", chat, 504, nil, `upstream request timeout`, stats.ErrorTimeout},
		{"408", chat, 408, nil, ``, stats.ErrorTimeout},
		{"422 FastAPI", chat, 422, nil, `{"detail":[{"loc":["body","messages"],"msg":"field required","type":"missing"}]}`, stats.ErrorInvalidRequest},
		{"502 HTML", chat, 502, nil, `<html><body>Bad Gateway</body></html>`, stats.ErrorServerError},
		{"418", chat, 418, nil, ``, stats.ErrorOther},
		{"a class past the bound", chat, 400, nil, strings.Repeat(" ", maxErrorBody) + `{"error":{"code":"context_length_exceeded"}}`, stats.ErrorInvalidRequest},
		// A message is read to maxValue bytes, whole in one read or not.
		{"a phrase past the message's bound", chat, 400, nil, `{"error":{"message":"` + strings.Repeat("x", maxValue) +
			` maximum context length is 4096 tokens"}}`, stats.ErrorInvalidRequest},
		{"ollama phrase past the bound", ollama, 500, nil, `{"error":"` + strings.Repeat("x", maxValue) + ` server busy, please try again"}`, stats.ErrorServerError},
	} {
		for _, enc := range []string{"identity", "gzip"} {
			body := []byte(c.body)
			h := http.Header{"Content-Type": {"application/json"}}
			for k, v := range c.header {
				h[k] = v
			}
			if enc == "gzip" {
				var b bytes.Buffer
				zw := gzip.NewWriter(&b)
				_, _ = zw.Write(body)
				_ = zw.Close()
				body = b.Bytes()
				h.Set("Content-Encoding", "gzip")
			}
			x := &corpus.Entry{ID: c.name, Method: http.MethodPost, Path: c.path, Status: c.status, Response: body,
				Pieces: []int{len(body)}, Request: []byte(`{"model":"m"}`)}
			e := noopEngine(t)
			for _, split := range []corpus.Split{corpus.Realistic, corpus.Bytes} {
				if split == corpus.Bytes && len(body) > 4096 {
					continue
				}
				for side, got := range map[string]stats.ObservedRequest{
					"handler":   observeHandlerWith(t, e, x, split, h),
					"transport": observeTransportWith(t, e, x, split, h),
				} {
					if got.Reason != stats.FinishError || got.ErrorType != c.want {
						t.Errorf("%s, %s, %s, %s split: %s, %q; want error, %q", c.name, enc, side, split, got.Reason, got.ErrorType, c.want)
					}
				}
			}
		}
	}
}

// A body in an encoding the handler and transport do not decode (br) says
// nothing of why it failed: the status does, as for a body of no error
// document. Before, such a failure was _OTHER, and a brotli 401 no
// authentication failure.
func TestOpaqueBodyErrorType(t *testing.T) {
	t.Parallel()
	e := noopEngine(t)
	for _, c := range []struct {
		status int
		want   stats.ErrorType
	}{
		{401, stats.ErrorAuthentication}, {429, stats.ErrorGatewayRateLimited}, {500, stats.ErrorServerError},
		{504, stats.ErrorTimeout}, {200, stats.ErrorNone},
	} {
		opaque := &corpus.Entry{ID: "br", Method: http.MethodPost, Path: "/v1/chat/completions", Status: c.status,
			Response: []byte("\x1b\x03\x00\xf8"), Pieces: []int{4}, Request: []byte(`{"model":"m"}`)}
		h := http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"br"}}
		for side, got := range map[string]stats.ObservedRequest{
			"handler":   observeHandlerWith(t, e, opaque, corpus.Realistic, h),
			"transport": observeTransportWith(t, e, opaque, corpus.Realistic, h),
		} {
			if got.ErrorType != c.want {
				t.Errorf("%d, %s: error.type %q, want %q", c.status, side, got.ErrorType, c.want)
			}
		}
	}
}

// Errors in a stream whose status was 200 (an event that reports one) name
// their class as an error body does; one that names none is _OTHER.
func TestStreamErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, path, body string
		want             stats.ErrorType
	}{
		{"Anthropic overloaded event", "/v1/messages",
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
			stats.ErrorOverloaded},
		{"vLLM stream error", "/v1/chat/completions",
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n" +
				"data: {\"error\": {\"message\": \"The engine core died unexpectedly.\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n",
			stats.ErrorServerError},
		{"Responses API error event", "/v1/responses",
			"event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached\",\"param\":null}\n\n",
			stats.ErrorRateLimited},
		{"Responses API failed", "/v1/responses",
			"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"model\":\"o4\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The model failed.\"}}}\n\n",
			stats.ErrorServerError},
		{"an error naming no class", "/v1/chat/completions",
			"data: {\"choices\":[],\"error\":{\"code\":400,\"message\":\"Token limit reached\"}}\n\n",
			stats.ErrorOther},
	} {
		x := &corpus.Entry{ID: c.name, Method: http.MethodPost, Path: c.path, Status: 200, Response: []byte(c.body),
			Pieces: []int{len(c.body)}, Request: []byte(`{"model":"m","stream":true}`),
			ResponseHeaders: map[string]string{"content-type": "text/event-stream"}}
		e := noopEngine(t)
		for side, got := range map[string]stats.ObservedRequest{
			"handler":   observeHandler(t, e, x, corpus.Bytes),
			"transport": observeTransport(t, e, x, corpus.Bytes),
		} {
			if got.Reason != stats.FinishError || got.ErrorType != c.want {
				t.Errorf("%s, %s: %s, %q; want error, %q", c.name, side, got.Reason, got.ErrorType, c.want)
			}
		}
	}
}

// observeHandlerWith is observeHandler with the response header h.
func observeHandlerWith(t *testing.T, e *instrument.Engine, x *corpus.Entry, split corpus.Split, h http.Header) stats.ObservedRequest {
	t.Helper()
	var got stats.ObservedRequest
	hd := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(x.Status)
		for _, p := range x.Writes(split) {
			_, _ = w.Write(p)
		}
	}), WithEngine(e), withObserved(func(o *stats.ObservedRequest) { got = *o }))
	req := httptest.NewRequest(x.Method, "http://up.test"+x.Path, bytes.NewReader(x.Request))
	hd.ServeHTTP(httptest.NewRecorder(), req)
	return got
}

// observeTransportWith is observeTransport with the response header h.
func observeTransportWith(t *testing.T, e *instrument.Engine, x *corpus.Entry, split corpus.Split, h http.Header) stats.ObservedRequest {
	t.Helper()
	return legOf(t, NewTransport(roundTrip(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: x.Status, Header: h.Clone(), Request: r, Body: io.NopCloser(x.Reader(split))}, nil
	}), WithEngine(e)), x.Path, x.Request, nil)
}

// legOf sends a request through tr with a Trace, reads the response whole
// (when one came) and returns the leg the trace holds.
func legOf(t *testing.T, tr http.RoundTripper, path string, body []byte, ctx context.Context) stats.ObservedRequest {
	t.Helper()
	if ctx == nil {
		ctx = t.Context()
	}
	ctx, trace := NewTrace(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://up.test"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := tr.RoundTrip(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	legs := trace.Legs()
	if len(legs) != 1 || !legs[0].Done {
		t.Fatalf("legs %+v, want one done", legs)
	}
	return legs[0].Observed
}

// What ended a leg with no response, or cut one, is why it failed: a
// connection refused or reset before a response is upstream_unreachable, a
// response header timeout or a context deadline a timeout, a canceled
// context client_canceled. Behind the handler, a reverse proxy's 502 over
// such a leg says the same; a client that goes away is client_canceled.
func TestErrorCauses(t *testing.T) {
	t.Parallel()
	e := noopEngine(t)
	body := []byte(`{"model":"m","messages":[]}`)
	refused := closedAddr(t)
	reset := resetServer(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read to the end of the body: net/http then watches the connection,
		// and a client that hangs up ends the request's context (else the
		// handler would wait its 10 s, and the server's Close with it).
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(slow.Close)
	timeoutTransport := &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	t.Cleanup(timeoutTransport.CloseIdleConnections)
	expired, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	t.Cleanup(cancel)
	canceled, cancel2 := context.WithCancel(t.Context())
	cancel2()

	for _, c := range []struct {
		name string
		base http.RoundTripper
		url  string
		ctx  context.Context
		want stats.ErrorType
	}{
		{"connection refused", http.DefaultTransport, refused, nil, stats.ErrorUpstreamUnreachable},
		{"reset before a response", http.DefaultTransport, reset, nil, stats.ErrorUpstreamUnreachable},
		{"response header timeout", timeoutTransport, slow.URL, nil, stats.ErrorTimeout},
		{"context deadline", http.DefaultTransport, slow.URL, expired, stats.ErrorTimeout},
		{"context canceled", http.DefaultTransport, slow.URL, canceled, stats.ErrorClientCanceled},
	} {
		tr := NewTransport(redirect(c.base, c.url), WithEngine(e))
		if got := legOf(t, tr, "/v1/chat/completions", body, c.ctx); got.ErrorType != c.want {
			t.Errorf("transport, %s: %s, %q; want %q", c.name, got.Reason, got.ErrorType, c.want)
		}
		if c.ctx != nil {
			continue
		}
		// Behind the handler: an httputil.ReverseProxy with the transport,
		// whose error handler writes 502 and no body.
		target, _ := url.Parse(c.url)
		proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, Transport: NewTransport(c.base, WithEngine(e)),
			ErrorLog: log.New(testlog.Writer{T: t}, "", 0)} // its "proxy error" lines to the test's log
		var got stats.ObservedRequest
		h := NewHandler(proxy, WithEngine(e), withObserved(func(o *stats.ObservedRequest) { got = *o }))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "http://gw.test/v1/chat/completions", bytes.NewReader(body)))
		if got.Reason != stats.FinishError || got.ErrorType != c.want {
			t.Errorf("handler, %s: %s, %q; want error, %q", c.name, got.Reason, got.ErrorType, c.want)
		}
	}

	// A client that goes away.
	var got stats.ObservedRequest
	h := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}), WithEngine(e), withObserved(func(o *stats.ObservedRequest) { got = *o }))
	req := httptest.NewRequestWithContext(canceled, http.MethodPost, "http://gw.test/v1/chat/completions", bytes.NewReader(body))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.Reason != stats.FinishAbort || got.ErrorType != stats.ErrorClientCanceled {
		t.Errorf("client gone: %s, %q; want abort, client_canceled", got.Reason, got.ErrorType)
	}
}

// redirect sends every request to base's host through rt.
func redirect(rt http.RoundTripper, base string) http.RoundTripper {
	u, _ := url.Parse(base)
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = u.Scheme, u.Host
		return rt.RoundTrip(r)
	})
}

// closedAddr returns the URL of a port nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

// resetServer returns the URL of a server that reads a request and closes
// the connection without answering.
func resetServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a clean close
			}
			_ = c.Close()
		}
	}()
	return "http://" + l.Addr().String()
}
