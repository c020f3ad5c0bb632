package openaihttp_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// serveOnce sends one request through the middleware around next, with the
// options given, and returns what the client got.
func serveOnce(t *testing.T, next http.Handler, method, path, body string, opts ...openaihttp.Option) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	openaihttp.NewHandler(next, opts...).ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w
}

// The model of a request reaches WithEngineFor decoded as Python's json
// decodes it: escapes, surrogate pairs, escaped keys, the last of
// duplicate keys.
func TestRequestModelAsClientsWriteIt(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"caf\u00e9-7b"}`, "café-7b"},
		{`{"model":"\ud83d\ude00-7b"}`, "😀-7b"},
		{`{"model":"a\"b\\c\/d\te"}`, "a\"b\\c/d\te"},
		{`{"model":"\ud83d-lone"}`, "\uFFFD-lone"},
		{`{"m\u006fdel":"escaped-key"}`, "escaped-key"},
		{`{"model":"first","messages":[],"model":"last"}`, "last"},
		{`{"model":"` + strings.Repeat("x", 300) + `"}`, ""}, // beyond the bytes a model name may have
	} {
		c := newRec(t)
		var got []string
		var mu sync.Mutex
		engineFor := openaihttp.WithEngineFor(func(m string) *instrument.Engine {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m)
			return c.e
		})
		serveOnce(t, jsonHandler(200, nonStreamResponse), http.MethodPost, "/v1/chat/completions", tc.body, engineFor,
			openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: model %q, want %q", tc.body, got, tc.want)
		}
	}
}

// n and max_tokens are read as vLLM's pydantic models read an int (lax
// mode): an integer, a float with no fraction, a string of digits; the last
// of duplicate keys wins; a value the server refuses is not recorded.
func TestRequestParamsAsClientsWriteThem(t *testing.T) {
	for _, tc := range []struct {
		body         string
		maxTokens, n float64 // the histograms' sums; 0 max_tokens: none recorded
	}{
		{`{"max_tokens":100.0,"n":2.0}`, 100, 2},
		{`{"max_tokens":1e2,"n":"3"}`, 100, 3},
		{`{"max_tokens":"64"}`, 64, 1},
		{`{"max_tokens":100.5,"n":2.5}`, 0, 1}, // refused by pydantic: not recorded
		{`{"max_tokens":-5,"n":-1}`, 0, 1},
		{`{"max_tokens":10,"max_tokens":20,"n":4,"n":null}`, 20, 1},
		{`{"max_completion_tokens":30}`, 30, 1},
	} {
		c := newRec(t)
		serveOnce(t, jsonHandler(200, nonStreamResponse), http.MethodPost, "/v1/chat/completions", tc.body,
			openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
		switch n := c.count("vllm:request_params_max_tokens"); {
		case tc.maxTokens == 0 && n != 0:
			t.Errorf("%s: max_tokens recorded %d times, want none", tc.body, n)
		case tc.maxTokens != 0:
			if mt := c.r.Histogram("vllm:request_params_max_tokens", c.labels()...); mt.Sum != tc.maxTokens || mt.Count != 1 {
				t.Errorf("%s: max_tokens sum %v count %d, want %v", tc.body, mt.Sum, mt.Count, tc.maxTokens)
			}
		}
		if n := c.r.Histogram("vllm:request_params_n", c.labels()...); n.Sum != tc.n {
			t.Errorf("%s: n sum %v, want %v", tc.body, n.Sum, tc.n)
		}
	}
}

// Ollama's options.num_predict is the max_tokens of /api/generate and
// /api/chat, read as Ollama reads it (a JSON number, truncated toward
// zero): 0, -1 (infinite) and -2 (fill the context) are none, as an absent
// max_tokens; a string or bool (refused by Ollama) none; one above
// stats.MaxRequestTokens is dropped and reported (ErrDropped). Top-level
// max_tokens and n, which Ollama ignores, are not read.
func TestOllamaNumPredict(t *testing.T) {
	t.Parallel()
	ollama := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, `{"response":"a","done":false}`+"\n"+
			`{"response":"","done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":1}`+"\n")
	})
	for _, tc := range []struct {
		body      string
		maxTokens float64 // the histogram's sum; 0: none recorded
		dropped   bool
	}{
		{`{"model":"m","options":{"num_predict":7}}`, 7, false},
		{`{"model":"m","options":{"temperature":0,"num_predict":7.9}}`, 7, false},
		{`{"model":"m","options":{"num_predict":1e2}}`, 100, false},
		{`{"model":"m","options":{"num_predict":-1}}`, 0, false},
		{`{"model":"m","options":{"num_predict":-2}}`, 0, false},
		{`{"model":"m","options":{"num_predict":0}}`, 0, false},
		{`{"model":"m","options":{"num_predict":0.5}}`, 0, false},
		{`{"model":"m","options":{"num_predict":"7"}}`, 0, false},
		{`{"model":"m","options":{"num_predict":true}}`, 0, false},
		{`{"model":"m","options":{"num_predict":null}}`, 0, false},
		{`{"model":"m","options":{"num_predict":5,"num_predict":9}}`, 9, false},
		{`{"model":"m","options":{"num_predict":5},"options":{"top_k":1}}`, 5, false}, // Go merges a repeated map
		{`{"model":"m","options":{"num_predict":5},"options":null}`, 0, false},
		{`{"model":"m","options":{"num_predict":1000000000}}`, 0, true},
		{`{"model":"m","options":{"num_predict":1e300}}`, 0, true},
		{`{"model":"m","max_tokens":7,"max_completion_tokens":8,"n":2}`, 0, false},
		{`{"model":"m","options":{"nested":{"num_predict":7}}}`, 0, false},
	} {
		for _, path := range []string{"/api/generate", "/api/chat"} {
			c := newRec(t)
			var dropped bool
			serveOnce(t, ollama, http.MethodPost, path, tc.body, openaihttp.WithEngine(c.e),
				openaihttp.WithErrorHandler(func(err error) {
					if dropped = errors.Is(err, openaihttp.ErrDropped); !dropped {
						t.Error(err)
					}
				}))
			switch n := c.count("vllm:request_params_max_tokens"); {
			case tc.maxTokens == 0 && n != 0:
				t.Errorf("%s %s: max_tokens recorded %d times, want none", path, tc.body, n)
			case tc.maxTokens != 0:
				if mt := c.r.Histogram("vllm:request_params_max_tokens", c.labels()...); mt.Sum != tc.maxTokens || mt.Count != 1 {
					t.Errorf("%s %s: max_tokens sum %v count %d, want %v", path, tc.body, mt.Sum, mt.Count, tc.maxTokens)
				}
			}
			if dropped != tc.dropped {
				t.Errorf("%s %s: dropped reported %v, want %v", path, tc.body, dropped, tc.dropped)
			}
			if n := c.r.Histogram("vllm:request_params_n", c.labels()...); n.Sum != 1 {
				t.Errorf("%s %s: n sum %v, want 1", path, tc.body, n.Sum)
			}
		}
	}
}

// An Ollama embeddings request is read for its model alone: its options
// (num_predict included) set no output limit, and it has no n or
// max_tokens; /api/embed's prompt_eval_count is its prompt.
func TestOllamaEmbedRequest(t *testing.T) {
	c := newRec(t)
	serveOnce(t, jsonHandler(200, `{"model":"qwen-7b","embeddings":[[0.5]],"total_duration":3,"load_duration":1,"prompt_eval_count":6}`),
		http.MethodPost, "/api/embed", `{"model":"qwen-7b","input":["a","b"],"options":{"num_predict":7},"max_tokens":5,"n":2}`,
		openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
	c.want("stop", 6, 0, 0)
	if n := c.count("vllm:request_params_max_tokens"); n != 0 {
		t.Errorf("max_tokens recorded %d times for an embeddings request", n)
	}
}

// "stream" is coerced as pydantic's lax bool does (vLLM streams
// "stream":"true"): with WithIncludeUsage a streaming request gets
// stream_options.include_usage; one that is not streaming is passed on
// unchanged.
func TestRequestStreamAsClientsWriteIt(t *testing.T) {
	for v, streams := range map[string]bool{
		`true`: true, `"true"`: true, `"True"`: true, `"1"`: true, `1`: true, `1.0`: true, `"yes"`: true,
		`"on"`: true, `"t"`: true, `"y"`: true,
		`false`: false, `"false"`: false, `"0"`: false, `0`: false, `"no"`: false, `"off"`: false,
		`"maybe"`: false, `2`: false, `null`: false,
	} {
		body := `{"model":"qwen-7b","stream":` + v + `}`
		got := sentWithIncludeUsage(t, body)
		var m struct {
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Fatalf("stream %s: the server got %q: %v", v, got, err)
		}
		if asked := m.StreamOptions != nil && m.StreamOptions.IncludeUsage; asked != streams {
			t.Errorf("stream %s: include_usage asked %v, want %v (the server got %s)", v, asked, streams, got)
		}
	}
}

// sentWithIncludeUsage returns the body a server gets of a chat
// completions request through a handler WithIncludeUsage.
func sentWithIncludeUsage(t *testing.T, body string) string {
	t.Helper()
	var got string
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		sseHandler(chunk("a"), finishChunk("stop"), done)(w, r)
	})
	c := newRec(t)
	serveOnce(t, next, http.MethodPost, "/v1/chat/completions", body, openaihttp.WithEngine(c.e), openaihttp.WithIncludeUsage(),
		openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
	return got
}

// WithIncludeUsage rewrites exactly the requests StreamsWithoutUsage
// reports (one reading of "stream" and include_usage, which
// infermetrics-proxy's rewrite uses too): streams, by pydantic's lax bool,
// whose include_usage is absent, null or false; one whose include_usage is
// no bool (answered 400 by vLLM) is left for the server to refuse.
func TestStreamsWithoutUsage(t *testing.T) {
	for body, want := range map[string]bool{
		`{"stream":true}`: true, `{"stream":"TRUE"}`: true, `{"stream":1}`: true, `{"stream":"y"}`: true,
		`{"stream":true,"stream_options":null}`:                      true,
		`{"stream":true,"stream_options":{"include_usage":null}}`:    true,
		`{"stream":true,"stream_options":{"include_usage":"off"}}`:   true,
		`{"stream":true,"stream_options":{"include_usage":0.0}}`:     true,
		`{"stream":1,"stream_options":{"include_usage":"1"}}`:        false,
		`{"stream":true,"stream_options":{"include_usage":"maybe"}}`: false,
		`{"stream":true,"stream_options":{"include_usage":2}}`:       false,
		`{"stream":true,"stream_options":{"include_usage":{}}}`:      false,
		`{"stream":"maybe"}`: false, `{"stream":0}`: false, `{"stream":null}`: false, `{}`: false, `not json`: false,
	} {
		if got := openaihttp.StreamsWithoutUsage([]byte(body)); got != want {
			t.Errorf("StreamsWithoutUsage(%s) = %v, want %v", body, got, want)
		}
		passed := sentWithIncludeUsage(t, body)
		if rewritten := passed != body; rewritten != want {
			t.Errorf("%s: WithIncludeUsage rewrote it %v (the server got %s), want %v", body, rewritten, passed, want)
		}
	}
}

// A request with an absurd max_tokens or n (answered 400, as vLLM does) or
// a response with an absurd usage count is recorded without the value,
// which is reported (ErrDropped); the requests after it are recorded whole.
// Before, max_tokens 9223372036854775000 overflowed the engine's running
// total and every later request was refused (ErrOverflow).
func TestAbsurdValuesDroppedForTheirRequestAlone(t *testing.T) {
	c := newRec(t)
	var mu sync.Mutex
	var errs []error
	onErr := openaihttp.WithErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })
	bad := []struct{ req, resp string }{
		{`{"model":"qwen-7b","max_tokens":9223372036854775000}`, `{"error":{"message":"max_tokens too large","code":400}}`},
		{`{"model":"qwen-7b","n":9223372036854775000}`, `{"error":{"message":"n too large","code":400}}`},
		{`{"model":"qwen-7b","max_tokens":1e300}`, `{"error":{"message":"max_tokens too large","code":400}}`},
		{chatBody, `{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9223372036854775000,"completion_tokens":1}}`},
	}
	for i, b := range bad {
		status := 400
		if i == len(bad)-1 {
			status = 200
		}
		serveOnce(t, jsonHandler(status, b.resp), http.MethodPost, "/v1/chat/completions", b.req, openaihttp.WithEngine(c.e), onErr)
	}
	if len(errs) != len(bad) {
		t.Fatalf("errors %v, want one per absurd value", errs)
	}
	for _, err := range errs {
		if !errors.Is(err, openaihttp.ErrDropped) {
			t.Errorf("error %v is not ErrDropped", err)
		}
	}
	errs = nil
	for range 5 {
		serveOnce(t, jsonHandler(200, nonStreamResponse), http.MethodPost, "/v1/chat/completions", chatBody, openaihttp.WithEngine(c.e), onErr)
	}
	if len(errs) != 0 {
		t.Errorf("normal requests reported %v", errs)
	}
	if got := c.success("length"); got != 5 {
		t.Errorf("request_success{length} = %v after the absurd requests, want 5", got)
	}
	if got := c.value("vllm:generation_tokens_total"); got != 5*32 {
		t.Errorf("generation_tokens = %v, want %d", got, 5*32)
	}
	if got := c.success("error"); got != 3 {
		t.Errorf("request_success{error} = %v, want the 3 refused requests", got)
	}
	if mt := c.r.Histogram("vllm:request_params_max_tokens", c.labels()...); mt.Sum != 6*32 {
		t.Errorf("max_tokens sum %v, want the 6 requests' 32 each", mt.Sum)
	}
}

// Paths other than the observed endpoints, and methods other than POST,
// pass through untouched: nothing is recorded, the bodies are the
// server's, the request body reaches the server unchanged.
func TestOtherPathsPassThrough(t *testing.T) {
	t.Parallel()
	models := `{"object":"list","data":[{"id":"qwen-7b","object":"model"}]}`
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/models"},
		{http.MethodPost, "/v1/models"},
		{http.MethodGet, "/v1/chat/completions"},
		{http.MethodPost, "/v1/responses/resp_1/cancel"},
		{http.MethodPost, "/v1/messages/count_tokens"},
		{http.MethodPost, "/tokenize"},
		{http.MethodGet, "/health"},
		{http.MethodGet, "/api/tags"},
		{http.MethodPost, "/api/show"},
	} {
		c := newRec(t)
		var got string
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got = string(b)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, models)
		})
		w := serveOnce(t, next, tc.method, tc.path, chatBody, openaihttp.WithEngine(c.e), openaihttp.WithIncludeUsage(),
			openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
		if w.Body.String() != models || got != chatBody {
			t.Errorf("%s %s: client got %q, server got %q", tc.method, tc.path, w.Body.String(), got)
		}
		for _, r := range []string{"stop", "length", "abort", "error", "repetition"} {
			if v := c.success(r); v != 0 {
				t.Errorf("%s %s: request_success{%s} = %v", tc.method, tc.path, r, v)
			}
		}
	}
}

const bom = "\xef\xbb\xbf"

// A request body that starts with a UTF-8 byte order mark is read as
// Python's json.loads reads bytes, as vLLM's server does: past one leading
// mark. Its model reaches WithEngineFor, its stream is seen, and with
// WithIncludeUsage the server gets it rewritten to ask for usage, without
// the mark (json.Marshal writes none, and RFC 8259 wants none sent). A mark
// after white space, or a second one, is not JSON to Python either: no
// model, passed on unchanged.
func TestRequestBodyWithBOM(t *testing.T) {
	for _, tc := range []struct {
		body, model string
		asked       bool
	}{
		{bom + streamBody, model, true},
		{bom + " \n" + streamBody, model, true},
		{" " + bom + streamBody, "", false},
		{bom + bom + streamBody, "", false},
	} {
		var got []string
		var mu sync.Mutex
		c := newRec(t)
		engineFor := openaihttp.WithEngineFor(func(m string) *instrument.Engine {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m)
			return c.e
		})
		var passed string
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			passed = string(b)
			sseHandler(chunk("a"), finishChunk("stop"), usageChunk(3, 1, 0), done)(w, r)
		})
		serveOnce(t, next, http.MethodPost, "/v1/chat/completions", tc.body, engineFor, openaihttp.WithIncludeUsage(),
			openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
		if len(got) != 1 || got[0] != tc.model {
			t.Errorf("%q: model %q, want %q", tc.body, got, tc.model)
		}
		if !tc.asked {
			if passed != tc.body {
				t.Errorf("%q: the server got %q, want it unchanged", tc.body, passed)
			}
			continue
		}
		var m struct {
			Model         string `json:"model"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if strings.HasPrefix(passed, bom) || json.Unmarshal([]byte(passed), &m) != nil || !m.StreamOptions.IncludeUsage || m.Model != model {
			t.Errorf("%q: the server got %q, want it asking for usage, with no mark", tc.body, passed)
		}
	}
	out, ok := openaihttp.AskUsage([]byte(bom + `{"stream":true}`))
	if want := `{"stream":true,"stream_options":{"include_usage":true}}`; !ok || string(out) != want {
		t.Errorf("AskUsage with a mark: %q %v, want %q", out, ok, want)
	}
}

// A response body that starts with a UTF-8 byte order mark is observed
// past it, in whatever writes it comes: a JSON document, as Python's
// json.loads reads bytes (an OpenAI client's response.json()); an event
// stream, whose standard drops one leading mark; Ollama's NDJSON. Bytes
// that only begin like a mark are not skipped.
func TestResponseBodyWithBOM(t *testing.T) {
	ndjson := `{"message":{"content":"a"},"done":false}` + "\n" +
		`{"message":{"content":""},"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":1}` + "\n"
	for _, tc := range []struct {
		path, ct, body, reason string
		first                  uint64 // TTFT values: the stream's first chunk observed
	}{
		{"/v1/chat/completions", "application/json", bom + nonStreamResponse, "length", 0},
		{"/v1/chat/completions", "text/event-stream", bom + chunk("a") + finishChunk("stop") + usageChunk(3, 1, 0) + done, "stop", 1},
		{"/api/chat", "application/x-ndjson", bom + ndjson, "stop", 1},
		{"/v1/chat/completions", "application/json", "\xef\xbb" + nonStreamResponse, "error", 0},
	} {
		for split := 1; split <= 4; split++ {
			c := newRec(t)
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ct)
				for p := tc.body; len(p) > 0; {
					n := min(split, len(p))
					_, _ = io.WriteString(w, p[:n])
					p = p[n:]
				}
			})
			w := serveOnce(t, next, http.MethodPost, tc.path, `{"model":"qwen-7b"}`, openaihttp.WithEngine(c.e),
				openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
			if w.Body.String() != tc.body {
				t.Errorf("the client got %q, want %q", w.Body.String(), tc.body)
			}
			if got := c.success(tc.reason); got != 1 {
				t.Errorf("%s %q split %d: request_success{%s} = %v, want 1", tc.ct, tc.body[:8], split, tc.reason, got)
			}
			if got := c.count("vllm:time_to_first_token_seconds"); got != tc.first {
				t.Errorf("%s %q split %d: %d TTFT values, want %d", tc.ct, tc.body[:8], split, got, tc.first)
			}
		}
	}
}
