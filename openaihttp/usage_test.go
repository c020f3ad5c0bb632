package openaihttp_test

import (
	"net/http"
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
