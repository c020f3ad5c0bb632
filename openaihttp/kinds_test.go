package openaihttp

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// noopEngine is an Engine on a MeterProvider that records nothing: the
// handler and the transport observe for it what they observe for any.
func noopEngine(t testing.TB) *instrument.Engine {
	t.Helper()
	// What it reports (a detail dropped for its request: OpenRouter's
	// reasoning tokens above its completion tokens) is kept, not logged:
	// these tests read what the handler observed (withObserved).
	var reported testutil.Errors
	return newEngine(t, reported.Option())
}

// withObserved has the handler give f each request it records.
func withObserved(f func(*stats.ObservedRequest)) Option {
	return optionFunc(func(c *config) { c.observed = f })
}

// Every token kind of the recorded provider traffic (testdata/corpus), as
// each API reports it, streamed and not: each recording, replayed behind
// NewHandler and through NewTransport in realistic and random pieces,
// gives the kinds (stats.ObservedRequest.Details: cache reads, cache
// writes, reasoning, audio and image tokens) and the response model its
// JSON says, read by the test with encoding/json (corpus.Entry.Kinds), not
// by the scanner; a response without usage gives no kind. The test logs how
// many recordings report each kind, and how many a non-zero count.
func TestCorpusTokenKinds(t *testing.T) {
	t.Parallel()
	all, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	es := sample.UnderRace(all, (*corpus.Entry).Kind)
	e := noopEngine(t)
	var reported, nonZero [stats.NumTokenKinds]int
	models := 0
	for i := range es {
		x := &es[i]
		want, model, err := x.Kinds()
		if err != nil {
			t.Errorf("%s: %v", x.ID, err)
			continue
		}
		if x.Expect.PromptTokens == nil {
			want = stats.TokenUsage{} // no usage: no kind
		}
		for _, k := range stats.TokenKinds() {
			if n, ok := want.Get(k); ok {
				reported[k]++
				if n > 0 {
					nonZero[k]++
				}
			}
		}
		if model != "" {
			models++
		}
		for _, split := range []corpus.Split{corpus.Realistic, corpus.Random} {
			for side, got := range map[string]stats.ObservedRequest{
				"handler":   observeHandler(t, e, x, split),
				"transport": observeTransport(t, e, x, split),
			} {
				if got.Details != want {
					t.Errorf("%s, %s, %s split: details %v, want %v", x.ID, side, split, kinds(got.Details), kinds(want))
				}
				if got.ResponseModel != model {
					t.Errorf("%s, %s, %s split: response model %q, want %q", x.ID, side, split, got.ResponseModel, model)
				}
				if got.ErrorType != x.ErrorType() {
					t.Errorf("%s, %s, %s split: error.type %q, want %q", x.ID, side, split, got.ErrorType, x.ErrorType())
				}
			}
		}
	}
	for _, k := range stats.TokenKinds() {
		t.Logf("%-12s reported by %3d of %d recordings, non-zero in %3d", k, reported[k], len(es), nonZero[k])
	}
	t.Logf("response model named by %d of %d", models, len(es))
	if !sample.Race && (nonZero[stats.TokenReasoning] == 0 || nonZero[stats.TokenCacheRead] == 0 || nonZero[stats.TokenCacheWrite] == 0) {
		t.Error("the corpus has no reasoning, cache read or cache write count: the test checks nothing of them")
	}
}

// The hand-written fixtures of each server (testdata, from vLLM's, SGLang's,
// llama.cpp's and Ollama's code) give the kinds and the response model
// their JSON says, as the corpus does (TestCorpusTokenKinds): the cached
// tokens of vLLM's chat, completions, Responses and Anthropic Messages,
// SGLang's, llama.cpp's cache_n without a cached count, none from Ollama.
func TestFixtureTokenKinds(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("testdata", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fixtures []struct {
		File     string `json:"file"`
		Endpoint string `json:"endpoint"`
		Path     string `json:"path"`
		Status   int    `json:"status"`
		Prompt   *int64 `json:"prompt_tokens"`
	}
	if err := json.Unmarshal(b, &fixtures); err != nil {
		t.Fatal(err)
	}
	e := noopEngine(t)
	var withKinds int
	for _, f := range fixtures {
		body, err := os.ReadFile(filepath.Join("testdata", f.File))
		if err != nil {
			t.Fatal(err)
		}
		x := fixtureEntry(f.File, f.Endpoint, f.Path, f.Status, body)
		want, model, err := x.Kinds()
		if f.Prompt == nil {
			want, err = stats.TokenUsage{}, nil // no usage, or a malformed one: no kind
		}
		if err != nil {
			t.Fatalf("%s: %v", f.File, err)
		}
		if want.Known != 0 {
			withKinds++
		}
		for _, split := range []corpus.Split{corpus.Realistic, corpus.Random} {
			for side, got := range map[string]stats.ObservedRequest{
				"handler":   observeHandler(t, e, x, split),
				"transport": observeTransport(t, e, x, split),
			} {
				if got.Details != want || got.ResponseModel != model {
					t.Errorf("%s, %s, %s split: details %v and model %q, want %v and %q", f.File, side, split,
						kinds(got.Details), got.ResponseModel, kinds(want), model)
				}
			}
		}
	}
	if withKinds < 10 {
		t.Errorf("%d fixtures report a kind", withKinds)
	}
}

// fixtureEntry makes a corpus entry of a fixture, to replay and read as
// the corpus's are: its API as corpus.KindsOf names it, its Content-Type
// from its file's extension, its body in one piece.
func fixtureEntry(file, endpoint, path string, status int, body []byte) *corpus.Entry {
	api := corpus.FixtureAPI(endpoint)
	ct := map[string]string{".sse": "text/event-stream", ".ndjson": "application/x-ndjson",
		".json": "application/json", ".txt": "text/plain"}[filepath.Ext(file)]
	return &corpus.Entry{ID: strings.TrimSuffix(file, filepath.Ext(file)), API: api, Method: http.MethodPost, Path: path,
		Status: status, ResponseHeaders: map[string]string{"content-type": ct}, Encoding: "identity",
		Pieces: []int{len(body)}, Response: body, Request: []byte(`{"model":"m"}`)}
}

// kinds formats a TokenUsage's reported kinds.
func kinds(u stats.TokenUsage) map[string]int64 {
	m := map[string]int64{}
	for _, k := range stats.TokenKinds() {
		if n, ok := u.Get(k); ok {
			m[k.String()] = n
		}
	}
	return m
}

// observeHandler serves an entry behind NewHandler and returns what it
// recorded.
func observeHandler(t *testing.T, e *instrument.Engine, x *corpus.Entry, split corpus.Split) stats.ObservedRequest {
	t.Helper()
	return observeHandlerWith(t, e, x, split, x.Header())
}

// observeTransport answers an entry through NewTransport, each Read of the
// body one of its pieces, and returns what the leg recorded.
func observeTransport(t *testing.T, e *instrument.Engine, x *corpus.Entry, split corpus.Split) stats.ObservedRequest {
	t.Helper()
	return observeTransportWith(t, e, x, split, x.Header())
}

// Each API's token kinds, streamed and not, as written by hand: what each
// field says, a kind its usage does not report (or reports null) not set,
// a detail that is no count making the usage unknown (no kind), and
// Mistral's num_cached_tokens, then llama.cpp's timings.cache_n, as the
// cache reads of a usage without the details' cached count.
func TestTokenKindsByAPI(t *testing.T) {
	t.Parallel()
	type kv = map[string]int64
	for _, c := range []struct {
		name, path, ct, body string
		want                 kv
		model                string
	}{
		{"chat, every detail", "/v1/chat/completions", "application/json",
			`{"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":50,` +
				`"prompt_tokens_details":{"cached_tokens":40,"cache_write_tokens":20,"audio_tokens":5,"image_tokens":7},` +
				`"completion_tokens_details":{"reasoning_tokens":30,"audio_tokens":2,"image_tokens":3,"accepted_prediction_tokens":9}}}`,
			kv{"cache_read": 40, "cache_write": 20, "input_audio": 5, "input_image": 7, "reasoning": 30, "output_audio": 2, "output_image": 3}, "gpt-4o-2024-08-06"},
		{"chat stream, details null", "/v1/chat/completions", "text/event-stream",
			"data: {\"model\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\n\n" +
				"data: {\"model\":\"b\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: {\"model\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"prompt_tokens_details\":null,\"completion_tokens_details\":{\"reasoning_tokens\":null,\"audio_tokens\":0}}}\n\ndata: [DONE]\n\n",
			kv{"output_audio": 0}, "a"},
		{"chat, a detail no count", "/v1/chat/completions", "application/json",
			`{"model":"m","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":"1"}}}`,
			kv{}, "m"},
		{"llama.cpp, cache_n", "/v1/chat/completions", "application/json",
			`{"model":"l","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":2},"timings":{"cache_n":32,"prompt_ms":1,"predicted_ms":2}}`,
			kv{"cache_read": 32}, "l"},
		{"Mistral, num_cached_tokens", "/v1/chat/completions", "application/json",
			`{"model":"mistral-small-latest","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":64,"total_tokens":70,"completion_tokens":6,"num_cached_tokens":32}}`,
			kv{"cache_read": 32}, "mistral-small-latest"},
		{"num_cached_tokens after the details", "/v1/chat/completions", "application/json",
			`{"model":"m","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":64,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":10},"num_cached_tokens":32}}`,
			kv{"cache_read": 10}, "m"},
		{"num_cached_tokens before the details", "/v1/chat/completions", "application/json",
			`{"model":"m","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"num_cached_tokens":32,"prompt_tokens":64,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":10}}}`,
			kv{"cache_read": 10}, "m"},
		{"num_cached_tokens, details' count null", "/v1/chat/completions", "application/json",
			`{"model":"m","choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":64,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":null},"num_cached_tokens":5}}`,
			kv{"cache_read": 5}, "m"},
		{"Responses API stream", "/v1/responses", "text/event-stream",
			"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"o4-mini\",\"status\":\"in_progress\",\"usage\":null}}\n\n" +
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"o4-mini\",\"status\":\"completed\",\"usage\":{\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":9,\"output_tokens_details\":{\"reasoning_tokens\":8}}}}\n\n",
			kv{"cache_read": 0, "reasoning": 8}, "o4-mini"},
		{"Anthropic stream", "/v1/messages", "text/event-stream",
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":40,\"output_tokens_details\":{\"thinking_tokens\":12}}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			kv{"cache_read": 0, "cache_write": 100, "reasoning": 12}, "claude-x"},
		{"Ollama", "/api/chat", "application/x-ndjson",
			`{"model":"llama3","message":{"content":"x"},"done":false}` + "\n" +
				`{"model":"llama3","message":{"content":""},"done":true,"done_reason":"stop","prompt_eval_count":9,"eval_count":2}` + "\n",
			kv{}, "llama3"},
	} {
		api := map[string]string{"/v1/chat/completions": "chat", "/v1/responses": "responses", "/v1/messages": "messages", "/api/chat": "ollama_apichat"}[c.path]
		x := &corpus.Entry{ID: c.name, API: api, Method: http.MethodPost, Path: c.path, Status: 200,
			ResponseHeaders: map[string]string{"content-type": c.ct}, Encoding: "identity",
			Pieces: []int{len(c.body)}, Response: []byte(c.body), Request: []byte(`{"model":"m"}`)}
		e := noopEngine(t)
		for _, split := range []corpus.Split{corpus.Realistic, corpus.Bytes} {
			for side, got := range map[string]stats.ObservedRequest{
				"handler":   observeHandler(t, e, x, split),
				"transport": observeTransport(t, e, x, split),
			} {
				if g := kinds(got.Details); len(g) != len(c.want) || got.ResponseModel != c.model {
					t.Errorf("%s, %s, %s split: details %v and model %q, want %v and %q", c.name, side, split, g, got.ResponseModel, c.want, c.model)
				} else {
					for k, v := range c.want {
						if g[k] != v {
							t.Errorf("%s, %s, %s split: %s = %d, want %d", c.name, side, split, k, g[k], v)
						}
					}
				}
			}
		}
	}
}
