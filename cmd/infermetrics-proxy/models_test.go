package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// stopUpstream answers every request with a chat completion of one token,
// finished (stop).
func stopUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	return up
}

// A model name that is not UTF-8 names a model no server serves and no
// series can carry: it is recorded as model_name="_overflow", beside the
// models past -max-models, not on -default-model's series, which stay the
// served model's; a request without a model, or whose model openaihttp
// does not read (longer than 256 bytes), is -default-model's. The refusal
// is logged at debug, not as -max-models being reached.
func TestModelNames(t *testing.T) {
	p := startProxy(t, nil, "-upstream", stopUpstream(t).URL, "-max-models", "8")
	for _, b := range []string{
		"{\"model\":\"\xff\"}",             // not UTF-8
		"{\"model\":\"qwen\xc3\"}",         // a UTF-8 sequence cut short
		"{\"model\":\"qwen\xed\xa0\x80\"}", // a surrogate's encoding
		`{"messages":[]}`,
		`{"model":"` + strings.Repeat("x", 300) + `"}`,
		`{"model":"qwen"}`,
	} {
		if code, _ := post(t, p.url("/v1/chat/completions"), []byte(b)); code != http.StatusOK {
			t.Fatalf("%q: %d", b, code)
		}
	}
	s := p.scrape(t)
	for model, want := range map[string]float64{OverflowModel: 3, "default": 2, "qwen": 1} {
		if v := mustValue(t, s, "vllm:request_success_total", "model_name", model, "finished_reason", "stop"); v != want {
			t.Errorf("model %s: %v requests, want %v", model, v, want)
		}
	}
	logs := p.logs.String()
	if n := strings.Count(logs, "model name refused"); n < 3 { // at each lookup: the handler's and the transport's
		t.Errorf("%d refusals logged, want one per name at least:\n%s", n, logs)
	}
	if strings.Contains(logs, "more models than -max-models") {
		t.Errorf("-max-models reported reached with 3 of 8 models:\n%s", logs)
	}
}
