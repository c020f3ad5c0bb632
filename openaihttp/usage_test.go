package openaihttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// Usage without completion_tokens, as OpenAI's API sends it for an empty
// completion ({"prompt_tokens":11,"total_tokens":11}), or with it null
// (vLLM's UsageInfo allows None; the last of duplicate keys wins, as in
// Python), counts its prompt tokens, with 0
// generation tokens; before, the whole usage was dropped. Not streamed,
// streamed, and from the Responses API (output_tokens).
func TestUsageWithoutCompletionTokens(t *testing.T) {
	for name, tc := range map[string]struct {
		path, body string
		next       http.Handler
	}{
		"json": {"/v1/chat/completions", chatBody, jsonHandler(200,
			`{"object":"chat.completion","choices":[{"index":0,"message":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"total_tokens":11}}`)},
		"json, null": {"/v1/completions", chatBody, jsonHandler(200,
			`{"object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":null,"total_tokens":11}}`)},
		"json, null after a count": {"/v1/chat/completions", chatBody, jsonHandler(200,
			`{"choices":[{"index":0,"message":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"completion_tokens":null}}`)},
		"stream": {"/v1/chat/completions", streamBody, sseHandler(finishChunk("stop"),
			`data: {"choices":[],"usage":{"prompt_tokens":11,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}}`+"\n\n", done)},
		"responses": {"/v1/responses", chatBody, jsonHandler(200,
			`{"object":"response","status":"completed","output":[],"usage":{"input_tokens":11,"total_tokens":11}}`)},
	} {
		t.Run(name, func(t *testing.T) {
			c := newRec(t)
			serveOnce(t, tc.next, http.MethodPost, tc.path, tc.body, openaihttp.WithEngine(c.e),
				openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
			c.want("stop", 11, 0, 0)
			if n := c.count("vllm:request_generation_tokens"); n != 1 {
				t.Errorf("request_generation_tokens count %d, want 1 (a 0)", n)
			}
		})
	}
}

// Usage whose cached tokens exceed its prompt, as xAI's grok served through
// Azure AI Foundry reports it (prompt_tokens without the cached part),
// counts its prompt tokens, all computed, and its generation tokens; the
// cached split is unknown for that response, which the Recorder counts
// (infermetrics.invalid_events, kind value_dropped) and reports, on both
// sides. Before, the whole usage was dropped silently: 0 generation tokens.
func TestUsageCachedAbovePrompt(t *testing.T) {
	testlog.StdLogger(t) // what the Recorder refuses goes to otel.Handle, which logs it: to the test's log
	const resp = `{"object":"chat.completion","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":10,"completion_tokens":213,"total_tokens":223,"prompt_tokens_details":{"cached_tokens":161}}}`
	dropped := func(c *rec) float64 {
		return c.value("infermetrics.invalid_events_total", "kind", "value_dropped")
	}
	c := newRec(t)
	serveOnce(t, jsonHandler(200, resp), http.MethodPost, "/v1/chat/completions", chatBody, openaihttp.WithEngine(c.e),
		openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
	c.want("stop", 10, 213, 0)
	if got := c.value("vllm:prompt_tokens_by_source_total", "source", "local_compute"); got != 10 {
		t.Errorf("local_compute = %v, want 10", got)
	}
	if got := dropped(c); got != 1 {
		t.Errorf("value_dropped = %v, want 1", got)
	}

	c = newRec(t)
	tr := openaihttp.NewTransport(replay{200, "application/json", []byte(resp)}, openaihttp.WithEngine(c.e),
		openaihttp.WithBackend("b", ""), openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
	req, _ := http.NewRequest(http.MethodPost, "http://b/v1/chat/completions", strings.NewReader(chatBody))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, res)
	out := c.r.Histogram(instrument.NameGenAIClientTokenUsage, clientLabels("b", "", "gen_ai.token.type", "output")...)
	if out.Sum != 213 {
		t.Errorf("the leg's output tokens %v, want 213", out.Sum)
	}
	if got := dropped(c); got != 1 {
		t.Errorf("the leg's value_dropped = %v, want 1", got)
	}
}

// A gateway (NewHandler, ReverseProxy, NewTransport on one Engine) sees a
// response whose cached tokens exceed its prompt twice, as the leg's and as
// the client request's: infermetrics.invalid_events{kind="value_dropped"}
// counts it once, and the Recorder reports it once, whether the handler
// takes the leg's reads (identity) or reads the body again (gzip), streamed
// or not; the response's other values are recorded on both sides. A
// response the scanner drops a value of (a count above
// stats.MaxRequestTokens) is reported once to the error handler the
// handler and the transport share. Before, value_dropped rose by 2 per
// response.
func TestDroppedOncePerProxiedResponse(t *testing.T) {
	const usage = `"usage":{"prompt_tokens":10,"completion_tokens":213,"total_tokens":223,"prompt_tokens_details":{"cached_tokens":161}}`
	const huge = `"usage":{"prompt_tokens":10,"completion_tokens":213,"total_tokens":223,"prompt_tokens_details":{"cached_tokens":999999999999}}`
	jsonBody := `{"object":"chat.completion","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],` + usage + `}`
	stream := chunk("x") + finishChunk("stop") + `data: {"choices":[],` + usage + "}\n\n" + done
	for name, tc := range map[string]struct {
		contentType, coding, body string
		dropped, reports          int // value_dropped, and what the shared error handler gets
	}{
		"json":                    {"application/json", "", jsonBody, 1, 0},
		"stream":                  {"text/event-stream", "", stream, 1, 0},
		"json, gzip":              {"application/json", "gzip", jsonBody, 1, 0},
		"stream, gzip":            {"text/event-stream", "gzip", stream, 1, 0},
		"scanner dropped":         {"application/json", "", strings.Replace(jsonBody, usage, huge, 1), 0, 1},
		"scanner dropped, stream": {"text/event-stream", "", strings.Replace(stream, usage, huge, 1), 0, 1},
		"scanner dropped, gzip":   {"application/json", "gzip", strings.Replace(jsonBody, usage, huge, 1), 0, 1},
	} {
		t.Run(name, func(t *testing.T) {
			var handled errs
			var reported errs
			c := newRec(t, instrument.WithErrorHandler(reported.handle))
			sent := []byte(tc.body)
			if tc.coding != "" {
				sent = encode(t, tc.coding, sent)
			}
			s, _ := proxied(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tc.contentType)
				if tc.coding != "" {
					w.Header().Set("Content-Encoding", tc.coding)
				}
				_, _ = w.Write(sent)
			}), handled.handle)
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(streamBody))
			req.Header.Set("Accept-Encoding", "gzip")
			resp, err := http.DefaultTransport.RoundTrip(req) // no decompression of its own
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			s.wait()
			if got := len(reported.get()); got != tc.dropped {
				t.Errorf("the Recorder reported %d drops, want %d: %v", got, tc.dropped, reported.get())
			}
			if got := len(handled.get()); got != tc.reports {
				t.Errorf("the error handler got %d reports, want %d: %v", got, tc.reports, handled.get())
			}
			if tc.dropped == 0 {
				return
			}
			if got := c.value("infermetrics.invalid_events_total", "kind", "value_dropped"); got != float64(tc.dropped) {
				t.Errorf("value_dropped = %v, want %d", got, tc.dropped)
			}
			c.want("stop", 10, 213, 0)
			if got := c.value("vllm:prompt_tokens_by_source_total", "source", "local_compute"); got != 10 {
				t.Errorf("local_compute = %v, want 10", got)
			}
			l := clientLabels("up", "decode", "gen_ai.token.type", "output")
			if strings.Contains(tc.body, `"model"`) {
				l = named(l)
			}
			out := c.r.Histogram(instrument.NameGenAIClientTokenUsage, l...)
			if out.Sum != 213 {
				t.Errorf("the leg's output tokens %v, want 213", out.Sum)
			}
		})
	}
}

// A P/D router whose prefill and decode responses both report cached
// tokens above the prompt counts 2 in value_dropped: the prefill leg's
// response, and the decode leg's, which the client request's response
// passes on (its own bytes first or not) and is not counted again.
func TestDroppedOncePerPDResponse(t *testing.T) {
	for name, preface := range map[string]string{"passed on": "", "with bytes of its own": ": router\n\n"} {
		t.Run(name, func(t *testing.T) {
			testlog.StdLogger(t)
			c := newRec(t)
			prefill := httptest.NewServer(jsonHandler(200, `{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"length"}],`+
				`"usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":161}}}`))
			defer prefill.Close()
			decode := httptest.NewServer(sseHandler(chunk("a"), finishChunk("stop"), usageChunk(10, 3, 161), done))
			defer decode.Close()
			cl := client(t, c)
			s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				ctx := r.Context()
				p := sendLeg(t, cl.Transport, ctx, prefill.URL, instrument.RolePrefill, chatBody)
				if p == nil {
					return
				}
				_, _ = io.Copy(io.Discard, p.Body)
				_ = p.Body.Close()
				d := sendLeg(t, cl.Transport, ctx, decode.URL, instrument.RoleDecode, string(body))
				if d == nil {
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, preface)
				_, _ = io.Copy(flushWriter{w}, d.Body)
				_ = d.Body.Close()
			}))
			readAll(t, post(t, s.URL+"/v1/chat/completions", streamBody))
			s.wait()
			c.want("stop", 10, 3, 0)
			if got := c.value("infermetrics.invalid_events_total", "kind", "value_dropped"); got != 2 {
				t.Errorf("value_dropped = %v for 2 responses, want 2", got)
			}
		})
	}
}
