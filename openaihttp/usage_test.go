package openaihttp_test

import (
	"net/http"
	"testing"

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
