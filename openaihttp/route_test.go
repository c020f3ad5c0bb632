package openaihttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// providerPaths are the paths hosted providers and gateways serve the
// APIs on, as their clients send them: the API's final segments under
// each provider's base path.
var providerPaths = []struct {
	provider, path string
	endpoint       string // the fixtures' endpoint (testdata/manifest.json)
	deployment     string // the model the path names, for a body that names none
}{
	{"Azure OpenAI deployment", "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", "chat", "gpt-4o"},
	{"Azure OpenAI deployment, completions", "/openai/deployments/davinci-2/completions?api-version=2024-10-21", "completions", "davinci-2"},
	{"Azure OpenAI deployment, embeddings", "/openai/deployments/ada-2/embeddings?api-version=2024-10-21", "embeddings", "ada-2"},
	{"Azure OpenAI deployment, doubled slash", "//openai/deployments/test-openai/chat/completions?api-version=2023-07-01-preview", "chat", "test-openai"},
	{"Azure OpenAI v1", "/openai/v1/chat/completions", "chat", ""},
	{"Azure OpenAI v1, Responses", "/openai/v1/responses", "responses", ""},
	{"Azure AI Foundry models", "/models/chat/completions?api-version=2024-05-01-preview", "chat", ""},
	{"DeepSeek", "/chat/completions", "chat", ""},
	{"DeepSeek, Responses", "/responses", "responses", ""},
	{"Perplexity", "/chat/completions", "chat", ""},
	{"OpenRouter", "/api/v1/chat/completions", "chat", ""},
	{"Gemini OpenAI compatibility", "/v1beta/openai/chat/completions", "chat", ""},
	{"Gemini OpenAI compatibility, embeddings", "/v1beta/openai/embeddings", "embeddings", ""},
	{"Groq", "/openai/v1/chat/completions", "chat", ""},
	{"Z.ai", "/api/paas/v4/chat/completions", "chat", ""},
	{"Hugging Face router, provider path", "/novita/v3/openai/chat/completions", "chat", ""},
	{"LiteLLM", "/chat/completions/", "chat", ""},
	{"a gateway's own prefix", "/gateway/v1/chat/completions", "chat", ""},
}

// Each API is recorded wherever a provider's base URL puts it, streamed and
// not, through the handler and the transport; a path that names the
// deployment (Azure's) gives the model when the body names none.
func TestProviderPaths(t *testing.T) {
	t.Parallel()
	fixtures := map[string][]fixture{}
	for _, f := range loadFixtures(t) {
		if f.File == "vllm_chat_stream_usage_cached.sse" || f.File == "vllm_chat_json_usage.json" ||
			f.File == "vllm_completions_stream_usage.sse" || f.File == "vllm_completions_json_usage_cached.json" ||
			f.File == "vllm_responses_stream_usage_cached.sse" || f.File == "vllm_responses_json_usage.json" ||
			f.File == "vllm_embeddings_json_usage.json" {
			fixtures[f.Endpoint] = append(fixtures[f.Endpoint], f)
		}
	}
	for _, p := range providerPaths {
		if len(fixtures[p.endpoint]) == 0 {
			t.Fatalf("no fixture for %s", p.endpoint)
		}
		for _, f := range fixtures[p.endpoint] {
			body, err := os.ReadFile(filepath.Join("testdata", f.File))
			if err != nil {
				t.Fatal(err)
			}
			req := []byte(f.Request)
			wantModel, without := splitModel(t, req)
			if p.deployment != "" {
				req, wantModel = without, p.deployment
			}
			t.Run(p.provider+"/"+f.File, func(t *testing.T) {
				c, models := newModelRec(t)
				h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", f.contentType())
					w.WriteHeader(f.Status)
					writeSplit(w, body, 7)
				}), openaihttp.WithEngineFor(models.engine), openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, p.path, bytes.NewReader(req)))
				if !bytes.Equal(w.Body.Bytes(), body) {
					t.Fatal("the client did not get the body unchanged")
				}
				c.want(f.reason(), float64(orZero(f.Prompt)), float64(orZero(f.Completion)), float64(orZero(f.Cached)))
				chunks, gaps := f.chunks(t)
				wantStream(t, c, f, chunks, gaps)

				tr := openaihttp.NewTransport(replay{f.Status, f.contentType(), body}, openaihttp.WithEngineFor(models.engine),
					openaihttp.WithBackend("b", ""), openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
				out, _ := http.NewRequest(http.MethodPost, "https://provider.test"+p.path, bytes.NewReader(req))
				resp, err := tr.RoundTrip(out)
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := io.ReadAll(resp.Body); !bytes.Equal(got, body) {
					t.Fatal("the caller did not get the body unchanged")
				}
				_ = resp.Body.Close()
				_, respModel, _ := corpus.KindsOf(corpus.FixtureAPI(f.Endpoint), f.Status, body)
				if n := c.clientHist(instrument.NameGenAIClientOperationDuration, namedAs(withOperation(clientLabels("b", ""), f.operation()), respModel)...); n != 1 {
					t.Errorf("legs recorded %d, want 1", n)
				}
				if got := models.asked(); len(got) != 2 || got[0] != wantModel || got[1] != wantModel {
					t.Errorf("models asked for %q, want %q for the handler and the transport", got, wantModel)
				}
			})
		}
	}
}

// splitModel returns the model a request body names and the body without
// it, as Azure's clients send a deployment's.
func splitModel(t *testing.T, req []byte) (model string, without []byte) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req, &m); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(m["model"], &model)
	delete(m, "model")
	without, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return model, without
}

// modelEngines records every request on one Engine and notes the model
// each was asked for (WithEngineFor).
type modelEngines struct {
	e    *instrument.Engine
	mu   sync.Mutex
	seen []string
}

func newModelRec(t *testing.T) (*rec, *modelEngines) {
	c := newRec(t)
	return c, &modelEngines{e: c.e}
}

func (m *modelEngines) engine(model string) *instrument.Engine {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = append(m.seen, model)
	return m.e
}

func (m *modelEngines) asked() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.seen...)
}

// Paths that end like an API but are not one, and requests that are not
// POSTs, pass through unrecorded.
func TestPathsNotRecorded(t *testing.T) {
	t.Parallel()
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/v1/chat/completions"},
		{http.MethodGet, "/chat/completions"},
		{http.MethodPost, "/v1/models"},
		{http.MethodPost, "/v1/chat/completions/chatcmpl-123"},          // OpenAI: update a stored completion
		{http.MethodPost, "/v1/threads/thread_1/messages"},              // OpenAI Assistants, not Anthropic Messages
		{http.MethodPost, "/v1/messages/count_tokens"},                  // Anthropic: count tokens
		{http.MethodPost, "/v1/messages/batches"},                       // Anthropic: batches
		{http.MethodPost, "/v1/responses/resp_1/cancel"},                // OpenAI: cancel a background response
		{http.MethodPost, "/v1/responses/input_tokens"},                 // OpenAI: count input tokens
		{http.MethodPost, "/v1/chat"},                                   // not Ollama's /api/chat
		{http.MethodPost, "/v2/chat"},                                   // Cohere
		{http.MethodPost, "/chat"},                                      // a provider path ending in /chat
		{http.MethodPost, "/api/chatx"},                                 // not a segment
		{http.MethodPost, "/v1/chatcompletions"},                        // not a segment
		{http.MethodPost, "/v1/audio/speech"},                           // another API
		{http.MethodPost, "/openai/deployments/gpt-4o/audio/speech"},    // another Azure API
		{http.MethodPost, "/v1/embeddings/x"},                           // ends in another segment
		{http.MethodPost, "/tokenize"},                                  // vLLM's, not recorded
		{http.MethodPost, "/"},                                          // the root
		{http.MethodPost, "/openai/deployments/gpt-4o/chat"},            // not chat/completions
		{http.MethodPost, "/v1/completions/x/y"},                        // ends in another segment
		{http.MethodPut, "/openai/deployments/gpt-4o/chat/completions"}, // not a POST
	} {
		c := newRec(t)
		h := openaihttp.NewHandler(jsonHandler(200, nonStreamResponse), openaihttp.WithEngine(c.e))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(r.method, r.path, bytes.NewReader([]byte(chatBody))))
		if n := c.count("vllm:e2e_request_latency_seconds"); n != 0 {
			t.Errorf("%s %s recorded", r.method, r.path)
		}
	}
}

// mustRoute is NewRoute for a pattern known good.
func mustRoute(t *testing.T, pattern, api string) openaihttp.Route {
	t.Helper()
	r, err := openaihttp.NewRoute(pattern, api)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// WithRoutes maps other paths to an API, before the package's own rules: a
// wildcard named model or deployment gives the model of a body that names
// none, and a route of API none keeps a path from being recorded.
func TestRoutes(t *testing.T) {
	routes := []openaihttp.Route{
		mustRoute(t, "/serving/{model}/generate", "chat"),
		mustRoute(t, "/ai/run/{model...}", "chat"),
		mustRoute(t, "/{tenant...}/invoke", "completions"),
		mustRoute(t, "/survey/responses", "none"),
		mustRoute(t, "/v1/chat/completions", "completions"), // before the package's own
	}
	for _, c := range []struct {
		path, body string
		recorded   bool
		op, model  string
	}{
		{"/serving/llama-3/generate", `{"messages":[]}`, true, "chat", "llama-3"},
		{"/serving/llama-3/generate/", `{"model":"named","messages":[]}`, true, "chat", "named"},
		{"/ai/run/@cf/meta/llama-3", `{}`, true, "chat", "@cf/meta/llama-3"},
		{"/ai/run", `{}`, true, "chat", ""}, // {name...} matches no segment too
		{"/ai/walk/x", `{}`, false, "", ""},
		{"/acme/team/invoke", `{"prompt":"x"}`, true, "text_completion", ""},
		{"/invoke", `{"prompt":"x"}`, true, "text_completion", ""},
		{"/survey/responses", `{}`, false, "", ""},
		{"/v1/chat/completions", chatBody, true, "text_completion", model},
		{"/serving/a/b/generate", `{}`, false, "", ""},
	} {
		c0, models := newModelRec(t)
		tr := openaihttp.NewTransport(replay{200, "application/json", []byte(nonStreamResponse)}, openaihttp.WithEngineFor(models.engine),
			openaihttp.WithBackend("b", ""), openaihttp.WithRoutes(routes...))
		req, _ := http.NewRequest(http.MethodPost, "http://b"+c.path, bytes.NewReader([]byte(c.body)))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if !c.recorded {
			if got := models.asked(); len(got) != 0 {
				t.Errorf("%s recorded (models %q)", c.path, got)
			}
			continue
		}
		if n := c0.clientHist(instrument.NameGenAIClientOperationDuration, named(withOperation(clientLabels("b", ""), c.op))...); n != 1 {
			t.Errorf("%s: %s legs %d, want 1", c.path, c.op, n)
		}
		if got := models.asked(); len(got) != 1 || got[0] != c.model {
			t.Errorf("%s: model %q, want %q", c.path, got, c.model)
		}
		if !openaihttp.TakesStreamOptions(req, routes...) {
			t.Errorf("%s: TakesStreamOptions false for a %s route", c.path, c.op)
		}
	}
	for path, want := range map[string]bool{"/survey/chat/completions": true, "/survey/responses": false, "/acme/invoke": true} {
		if got := openaihttp.TakesStreamOptions(httptest.NewRequest(http.MethodPost, path, nil), routes...); got != want {
			t.Errorf("TakesStreamOptions(%s) = %v, want %v", path, got, want)
		}
	}
}

// NewRoute refuses patterns it cannot match as written and APIs it does not
// know, and names the APIs it knows.
func TestNewRouteErrors(t *testing.T) {
	for _, c := range []struct{ pattern, api string }{
		{"", "chat"},
		{"v1/chat", "chat"},
		{"/v1/chat?x=1", "chat"},
		{"/{}", "chat"},
		{"/{...}", "chat"},
		{"/x{model}", "chat"},
		{"/{model}x", "chat"},
		{"/{1a}", "chat"},
		{"/{a-b}", "chat"},
		{"/{a}/{a}", "chat"},
		{"/{a...}/{b...}", "chat"},
		{"/{deployment}/{model}", "chat"},
		{"/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q", "chat"},
		{"/v1/chat", "chatx"},
		{"/v1/chat", ""},
	} {
		if _, err := openaihttp.NewRoute(c.pattern, c.api); err == nil {
			t.Errorf("NewRoute(%q, %q) accepted", c.pattern, c.api)
		}
	}
	_, err := openaihttp.NewRoute("/v1/chat", "chatx")
	for _, api := range openaihttp.APIs() {
		if err == nil || !strings.Contains(err.Error(), api) {
			t.Errorf("the error %v does not name %s", err, api)
		}
		if _, err := openaihttp.NewRoute("/x", api); err != nil {
			t.Errorf("NewRoute with API %s: %v", api, err)
		}
	}
	r := mustRoute(t, "/a/{b}/{c...}", "pooling")
	if r.Pattern() != "/a/{b}/{c...}" || r.API() != "pooling" {
		t.Errorf("route %q %q", r.Pattern(), r.API())
	}
}

// The handler label of the HTTP families is the pattern of the route a
// path matches, for any method, and none for a path that matches none:
// what a client put in a path (an ID, a key, a deployment) is no label.
func TestRouteLabels(t *testing.T) {
	t.Parallel()
	routes := []openaihttp.Route{mustRoute(t, "/serving/{model}/generate", "chat"), mustRoute(t, "/v1/models", "none")}
	for _, c := range []struct{ method, path, label string }{
		{http.MethodPost, "/v1/chat/completions", "/v1/chat/completions"},
		{http.MethodGet, "/v1/chat/completions", "/v1/chat/completions"},
		{http.MethodPost, "/chat/completions", "/chat/completions"},
		{http.MethodPost, "/v1/completions", "/v1/completions"},
		{http.MethodPost, "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", "/openai/deployments/{deployment}/chat/completions"},
		{http.MethodPost, "/gw/openai/deployments/gpt-4o/embeddings", "/{prefix...}/openai/deployments/{deployment}/embeddings"},
		{http.MethodPost, "/openai/v1/responses", "/openai/v1/responses"},
		{http.MethodPost, "/models/chat/completions", "/models/chat/completions"},
		{http.MethodPost, "/api/v1/chat/completions", "/api/v1/chat/completions"},
		{http.MethodPost, "/v1beta/openai/chat/completions", "/v1beta/openai/chat/completions"},
		{http.MethodPost, "/api/paas/v4/chat/completions", "/api/paas/v4/chat/completions"},
		{http.MethodPost, "/v1/messages", "/v1/messages"},
		{http.MethodPost, "/api/chat", "/api/chat"},
		{http.MethodPost, "/api/embed", "/api/embed"},
		{http.MethodPost, "/api/embeddings", "/api/embeddings"},
		{http.MethodPost, "/ollama/api/embeddings", "/{prefix...}/api/embeddings"},
		{http.MethodPost, "/v1/embeddings", "/v1/embeddings"},
		{http.MethodPost, "/rerank", "/rerank"},
		{http.MethodPost, "/v2/rerank", "/{prefix...}/rerank"},
		{http.MethodPost, "/together/v1/chat/completions", "/{prefix...}/v1/chat/completions"},          // Hugging Face router
		{http.MethodPost, "/novita/v3/openai/chat/completions", "/{prefix...}/openai/chat/completions"}, // Hugging Face router
		{http.MethodPost, "/api/v2/cortex/v1/chat/completions", "/{prefix...}/v1/chat/completions"},     // Snowflake
		{http.MethodPost, "/openai/deployments/d/completions", "/openai/deployments/{deployment}/completions"},
		{http.MethodPost, "/api/v1/responses", "/api/v1/responses"},
		{http.MethodPost, "/responses", "/responses"},
		{http.MethodPost, strings.Repeat("/a", 40) + "/v1/chat/completions", "/{prefix...}/v1/chat/completions"},
		{http.MethodPost, "/sk-secret-key/v1/chat/completions", "/{prefix...}/v1/chat/completions"},
		{http.MethodPost, "/tenant-42/chat/completions", "/{prefix...}/chat/completions"},
		{http.MethodPost, "/serving/llama-3/generate", "/serving/{model}/generate"},
		{http.MethodGet, "/v1/models", "/v1/models"},
		{http.MethodGet, "/v1/chat/completions/chatcmpl-123", "none"},
		{http.MethodGet, "/v1/files/file-abc", "none"},
		{http.MethodGet, "/", "none"},
	} {
		e := newRec(t)
		h := openaihttp.NewHandler(jsonHandler(200, nonStreamResponse), openaihttp.WithEngine(e.e),
			openaihttp.WithHTTPMetrics(e.e, nil), openaihttp.WithRoutes(routes...))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(c.method, c.path, bytes.NewReader([]byte(chatBody))))
		if got := e.r.Value("http_requests_total", "handler", c.label, "method", c.method, "status", "2xx"); got != 1 {
			t.Errorf("%s %s: no request under handler %q", c.method, c.path, c.label)
		}
	}
}
