package openaihttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// serve runs next behind the middleware on a test server and waits for
// each request's recording (the handler ends after the client got the
// response).
type served struct {
	*httptest.Server
	wg sync.WaitGroup
}

func serve(t *testing.T, c *rec, next http.Handler, opts ...openaihttp.Option) *served {
	t.Helper()
	s := &served{}
	h := openaihttp.NewHandler(next, append([]openaihttp.Option{openaihttp.WithEngine(c.e),
		openaihttp.WithErrorHandler(func(err error) { t.Errorf("recording: %v", err) })}, opts...)...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.wg.Add(1)
		defer s.wg.Done()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// wait waits for the handlers to end: the server closes its connections.
func (s *served) wait() { s.Close(); s.wg.Wait() }

func TestHandlerStreamed(t *testing.T) {
	c := newRec(t)
	s := serve(t, c, sseHandler(chunk("Hel"), chunk("lo"), chunk(""), chunk(" world"), finishChunk("stop"), usageChunk(20, 3, 16), done))
	got := readAll(t, post(t, s.URL+"/v1/chat/completions", streamBody))
	s.wait()
	if !strings.Contains(got, "[DONE]") || !strings.Contains(got, `"content":"Hel"`) {
		t.Errorf("the client got %q", got)
	}
	c.want("stop", 20, 3, 16)
	if got := c.value("vllm:prompt_tokens_by_source_total", "source", "local_cache_hit"); got != 16 {
		t.Errorf("local_cache_hit = %v, want 16", got)
	}
	// Three content chunks (the empty one carries none): one TTFT, two gaps.
	if n := c.count("vllm:time_to_first_token_seconds"); n != 1 {
		t.Errorf("TTFT count %d, want 1", n)
	}
	if n := c.count("vllm:inter_token_latency_seconds"); n != 2 {
		t.Errorf("ITL count %d, want 2", n)
	}
	if n := c.count("vllm:request_time_per_output_token_seconds"); n != 1 {
		t.Errorf("TPOT count %d, want 1", n)
	}
	if n := c.count("vllm:request_params_max_tokens"); n != 1 {
		t.Errorf("max_tokens count %d, want 1", n)
	}
	if got := c.value("vllm:num_requests_running"); got != 0 {
		t.Errorf("running after the end = %v", got)
	}
	if n := c.count("vllm:iteration_tokens_total"); n != 0 {
		t.Errorf("iteration tokens recorded by a front end: %d", n)
	}
}

func TestHandlerNonStreamed(t *testing.T) {
	c := newRec(t)
	s := serve(t, c, jsonHandler(200, nonStreamResponse))
	if got := readAll(t, post(t, s.URL+"/v1/chat/completions", chatBody)); got != nonStreamResponse {
		t.Errorf("the client got %q", got)
	}
	s.wait()
	c.want("length", 12, 32, 8)
	if n := c.count("vllm:time_to_first_token_seconds"); n != 0 {
		t.Errorf("TTFT recorded for a response not streamed: %d", n)
	}
	if n := c.count("vllm:e2e_request_latency_seconds"); n != 1 {
		t.Errorf("e2e count %d", n)
	}
}

func TestHandlerFailures(t *testing.T) {
	testlog.StdLogger(t) // what the Recorder refuses goes to otel.Handle, which logs it: to the test's log
	for name, tc := range map[string]struct {
		handler                    http.Handler
		body                       string
		reason                     string
		prompt, generation, cached float64
	}{
		"upstream 500":         {jsonHandler(500, `{"error":{"message":"boom"}}`), chatBody, "error", 0, 0, 0},
		"400":                  {jsonHandler(400, `{"error":{"message":"bad","type":"BadRequestError"}}`), chatBody, "error", 0, 0, 0},
		"truncated stream":     {sseHandler(chunk("a"), chunk("b")), streamBody, "error", 0, 0, 0},
		"[DONE] without usage": {sseHandler(chunk("a"), finishChunk("length"), done), streamBody, "length", 0, 0, 0},
		"error event in stream": {sseHandler(chunk("a"), `data: {"error":{"message":"engine died","code":500}}`+"\n\n"),
			streamBody, "error", 0, 0, 0},
		"malformed usage": {jsonHandler(200, `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":"ten","completion_tokens":1}}`),
			chatBody, "stop", 0, 0, 0},
		"cached above prompt": {jsonHandler(200, `{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":5}}}`),
			chatBody, "stop", 1, 1, 0},
		"null details": {jsonHandler(200, `{"choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"prompt_tokens_details":null}}`),
			chatBody, "stop", 7, 1, 0},
		"non-JSON body": {http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>502 Bad Gateway</html>")
		}), chatBody, "error", 0, 0, 0},
		"tool calls": {sseHandler(`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}`+"\n\n",
			finishChunk("tool_calls"), usageChunk(5, 9, 0), done), streamBody, "stop", 5, 9, 0},
		"CRLF and split lines": {sseHandler("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n",
			"data: {\"choices\":[{\"finish_reason\":\"st", "op\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\r\n\r\n",
			"data: [DONE]\r\n\r\n"), streamBody, "stop", 4, 1, 0},
		"n=2, one choice at its limit": {sseHandler(`data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"}]}`+"\n\n",
			`data: {"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}]}`+"\n\n", done), streamBody, "length", 0, 0, 0},
		"wrote nothing": {http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), chatBody, "error", 0, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			c := newRec(t)
			s := serve(t, c, tc.handler)
			readAll(t, post(t, s.URL+"/v1/chat/completions", tc.body))
			s.wait()
			c.want(tc.reason, tc.prompt, tc.generation, tc.cached)
		})
	}
}

// A client that goes away mid-stream is an abort; the handler sees its
// context canceled.
func TestHandlerClientDisconnect(t *testing.T) {
	c := newRec(t)
	sent := make(chan struct{})
	s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, chunk("a"))
		w.(http.Flusher).Flush()
		close(sent)
		<-r.Context().Done()
		_, _ = io.WriteString(w, chunk("b"))
	}))
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-sent
	buf := make([]byte, 10)
	_, _ = resp.Body.Read(buf)
	cancel()
	_ = resp.Body.Close()
	s.wait()
	c.want("abort", 0, 0, 0)
	if n := c.count("vllm:time_to_first_token_seconds"); n != 1 {
		t.Errorf("TTFT count %d, want 1", n)
	}
}

// Other paths and methods pass through unrecorded.
func TestHandlerPassThrough(t *testing.T) {
	c := newRec(t)
	s := serve(t, c, jsonHandler(200, `{"data":[]}`))
	readAll(t, post(t, s.URL+"/v1/audio/speech", chatBody))
	resp, err := http.Get(s.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	s.wait()
	for _, r := range []string{"stop", "length", "abort", "error", "repetition"} {
		if got := c.success(r); got != 0 {
			t.Errorf("request_success{%s} = %v for requests not observed", r, got)
		}
	}
}

// The request body reaches the handler unchanged, beyond the bytes read
// too; with WithIncludeUsage a streaming request asks for usage.
func TestHandlerRequestBody(t *testing.T) {
	long := `{"model":"qwen-7b","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 200<<10) + `"}]}`
	for name, tc := range map[string]struct {
		body  string
		opts  []openaihttp.Option
		check func(t *testing.T, got string)
	}{
		"unchanged": {streamBody, nil, func(t *testing.T, got string) {
			if got != streamBody {
				t.Errorf("body %q", got)
			}
		}},
		"long unchanged": {long, []openaihttp.Option{openaihttp.WithIncludeUsage()}, func(t *testing.T, got string) {
			if got != long {
				t.Errorf("a body beyond the bytes read changed (%d bytes, want %d)", len(got), len(long))
			}
		}},
		"include usage": {streamBody, []openaihttp.Option{openaihttp.WithIncludeUsage()}, func(t *testing.T, got string) {
			if !strings.Contains(got, `"stream_options":{"include_usage":true}`) || !strings.Contains(got, `"max_tokens":32`) {
				t.Errorf("body %q", got)
			}
		}},
		"not streaming": {chatBody, []openaihttp.Option{openaihttp.WithIncludeUsage()}, func(t *testing.T, got string) {
			if got != chatBody {
				t.Errorf("a request not streamed changed: %q", got)
			}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			c := newRec(t)
			var got string
			var length int64
			s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got, length = string(b), r.ContentLength
				sseHandler(finishChunk("stop"), done)(w, r)
			}), tc.opts...)
			readAll(t, post(t, s.URL+"/v1/chat/completions", tc.body))
			s.wait()
			tc.check(t, got)
			if length != int64(len(got)) {
				t.Errorf("Content-Length %d for a body of %d bytes", length, len(got))
			}
		})
	}
}

// The ResponseWriter keeps Flush, and Unwrap for ResponseController.
func TestHandlerResponseWriter(t *testing.T) {
	c := newRec(t)
	var flusher, deadline bool
	s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, flusher = w.(http.Flusher)
		deadline = http.NewResponseController(w).SetWriteDeadline(time.Time{}) == nil
		jsonHandler(200, nonStreamResponse)(w, r)
	}))
	readAll(t, post(t, s.URL+"/v1/completions", chatBody))
	s.wait()
	if !flusher || !deadline {
		t.Errorf("Flusher %v, ResponseController reaches the connection %v", flusher, deadline)
	}
}

// A handler that panics is an error, and the panic goes on.
func TestHandlerPanic(t *testing.T) {
	c := newRec(t)
	h := openaihttp.NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }),
		openaihttp.WithEngine(c.e))
	defer func() {
		if v := recover(); !errors.Is(v.(error), http.ErrAbortHandler) {
			t.Errorf("recovered %v", v)
		}
		c.want("error", 0, 0, 0)
	}()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody)))
}
