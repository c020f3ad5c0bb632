package openaihttp_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/testutil"
)

// The long tests that set no global (OpenTelemetry's, the standard
// logger's, the environment) and count no allocations call t.Parallel: Go
// runs them together once the package's other tests are done, on every core.

const model = "qwen-7b"

// rec is a Recorder read by a testutil.Reader.
type rec struct {
	t testing.TB
	r *testutil.Reader
	e *instrument.Engine
}

func newRec(t testing.TB, opts ...instrument.Option) *rec {
	t.Helper()
	r := testutil.New(t)
	recorder, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(r.Provider()),
		instrument.WithModelName(model)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = recorder.Close() })
	e, err := recorder.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	return &rec{t: t, r: r, e: e}
}

// snapshot returns c reading what its Recorder holds now (testutil's
// Snapshot), for many checks of one collection.
func (c *rec) snapshot() *rec { return &rec{t: c.t, r: c.r.Snapshot(), e: c.e} }

func (c *rec) labels(extra ...string) []string {
	return append([]string{"model_name", model, "engine", "0"}, extra...)
}

func (c *rec) value(family string, extra ...string) float64 {
	c.t.Helper()
	return c.r.Value(family, c.labels(extra...)...)
}

// count returns a histogram's count on engine 0, 0 before its first value.
func (c *rec) count(family string, extra ...string) uint64 {
	c.t.Helper()
	return c.clientHist(family, c.labels(extra...)...)
}

// success returns vllm:request_success_total by reason.
func (c *rec) success(reason string) float64 {
	c.t.Helper()
	return c.value("vllm:request_success_total", "finished_reason", reason)
}

// want checks the finish reason counted and the token counters.
func (c *rec) want(reason string, prompt, generation, cached float64) {
	c.t.Helper()
	if got := c.success(reason); got != 1 {
		c.t.Errorf("request_success{%s} = %v, want 1", reason, got)
	}
	if got := c.value("vllm:prompt_tokens_total"); got != prompt {
		c.t.Errorf("prompt_tokens = %v, want %v", got, prompt)
	}
	if got := c.value("vllm:generation_tokens_total"); got != generation {
		c.t.Errorf("generation_tokens = %v, want %v", got, generation)
	}
	if got := c.value("vllm:prompt_tokens_cached_total"); got != cached {
		c.t.Errorf("prompt_tokens_cached = %v, want %v", got, cached)
	}
}

// chunk is an SSE event of a chat completion chunk with content.
func chunk(content string) string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","model":%q,"choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", model, content)
}

func finishChunk(reason string) string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":%q}]}`+"\n\n", reason)
}

func usageChunk(prompt, completion, cached int) string {
	return fmt.Sprintf(`data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n",
		prompt, completion, prompt+completion, cached)
}

const done = "data: [DONE]\n\n"

// sseHandler writes events, flushing after each.
func sseHandler(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			_, _ = io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	}
}

// jsonHandler answers a status and a JSON body.
func jsonHandler(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

const chatBody = `{"model":"qwen-7b","messages":[{"role":"user","content":"hi"}],"max_tokens":32}`
const streamBody = `{"model":"qwen-7b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":32}`

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const nonStreamResponse = `{"id":"x","object":"chat.completion","model":"qwen-7b","choices":[{"index":0,"message":{"role":"assistant","content":"Hello \"there\" \\ friend"},"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":32,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":8}}}`
