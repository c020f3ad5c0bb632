package openaihttp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// fixture is one entry of testdata/manifest.json (see testdata/README.md).
type fixture struct {
	File          string          `json:"file"`
	Endpoint      string          `json:"endpoint"`
	Path          string          `json:"path"`
	Stream        bool            `json:"stream"`
	Status        int             `json:"status"`
	Request       json.RawMessage `json:"request"`
	ContentChunks json.RawMessage `json:"content_chunks"` // a number, or one per choice
	Prompt        *int64          `json:"prompt_tokens"`
	Completion    *int64          `json:"completion_tokens"`
	Cached        *int64          `json:"cached_tokens"`
	Prefill       *float64        `json:"prefill_seconds"`
	Decode        *float64        `json:"decode_seconds"`
	Outcome       string          `json:"outcome"`
}

// chunks returns the total of content_chunks over choices and the
// inter-chunk times they make: each choice's own, its chunks - 1.
func (f fixture) chunks(t *testing.T) (chunks, gaps uint64) {
	var per []uint64
	if err := json.Unmarshal(f.ContentChunks, &per); err != nil {
		per = []uint64{0}
		if err := json.Unmarshal(f.ContentChunks, &per[0]); err != nil {
			t.Fatalf("%s: content_chunks %s", f.File, f.ContentChunks)
		}
	}
	for _, v := range per {
		chunks += v
		gaps += max(v, 1) - 1
	}
	return chunks, gaps
}

// reason is the finished_reason recorded for the fixture. The manifest's
// abort (no choice finished) on a stream that ended while its client was
// still reading is an error here: the server, not the client, cut it.
func (f fixture) reason() string {
	if f.Outcome == "abort" {
		return "error"
	}
	return f.Outcome
}

// errorType is the error.type of a failed fixture, stated by hand from its
// status and body: context_length_exceeded for the context length refusals
// of vLLM ("This model's maximum context length is ..."), SGLang ("longer
// than the model's context length") and llama.cpp
// (exceed_context_size_error); server_error for vLLM's InternalServerError,
// SGLang's SERVICE_UNAVAILABLE and llama.cpp's server_error stream errors
// and a 500 that is not JSON; invalid_request for Ollama's
// invalid_request_error; not_found for Ollama's 404; _OTHER for a stream
// cut without an error and for Ollama's stream error, which names no
// class.
func (f fixture) errorType() string {
	switch f.File {
	case "vllm_chat_json_nousage_error400.json", "sglang_chat_json_nousage_error400.json", "llamacpp_chat_json_nousage_error400.json":
		return "context_length_exceeded"
	case "vllm_chat_stream_usage_error_midstream.sse", "vllm_chat_json_nousage_error500_nonjson.txt",
		"sglang_chat_stream_usage_error_midstream.sse", "llamacpp_chat_stream_usage_error_midstream.sse":
		return "server_error"
	case "ollama_chat_json_nousage_error400.json":
		return "invalid_request"
	case "ollama_apiembed_json_nousage_error404.json":
		return "not_found"
	}
	return "_OTHER"
}

// operation is the gen_ai.operation.name the fixture's endpoint records.
func (f fixture) operation() string {
	switch f.Endpoint {
	case "completions", "apigenerate":
		return "text_completion"
	case "embeddings", "apiembed", "apiembeddings":
		return "embeddings"
	case "rerank", "score":
		return "pooling"
	}
	return "chat"
}

// withOperation sets gen_ai.operation.name in a label list.
func withOperation(l []string, op string) []string {
	for i := 0; i+1 < len(l); i += 2 {
		if l[i] == "gen_ai.operation.name" {
			l[i+1] = op
		}
	}
	return l
}

func (f fixture) contentType() string {
	switch filepath.Ext(f.File) {
	case ".sse":
		return "text/event-stream"
	case ".json":
		return "application/json"
	case ".ndjson":
		return "application/x-ndjson"
	}
	return "text/plain; charset=utf-8"
}

func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	if err := json.Unmarshal(b, &fs); err != nil {
		t.Fatal(err)
	}
	if len(fs) == 0 {
		t.Fatal("no fixtures")
	}
	return fs
}

// writeSplit writes body in pieces of size bytes (all at once for 0),
// flushing after each, as a server streams it.
func writeSplit(w http.ResponseWriter, body []byte, size int) {
	if size <= 0 {
		size = len(body)
	}
	for len(body) > 0 {
		n := min(size, len(body))
		_, _ = w.Write(body[:n])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		body = body[n:]
	}
}

// Every recorded response format (OpenAI-compatible chat and completions,
// the Responses API, Anthropic Messages, embeddings and pooling, Ollama's
// native API) replays through the middleware and the transport, sent to
// its path, whole and split in small writes, and records the manifest's
// figures: the finish reason, the usage tokens (none without usage), the
// cached tokens, the server-reported prefill and decode times, and one TTFT
// and each choice's content chunks - 1 inter-chunk latencies for a stream.
//
// Under the race detector the fixtures package sample keeps are replayed
// (the first of each path, content type and status class, and every
// sample.Every-th), all of them without: the replay runs on the test's
// goroutine (the handler behind an httptest.ResponseRecorder, the
// transport over a RoundTripper in memory), where the race detector has
// nothing to find, and with every fixture took 5.7 s of CPU under it.
func TestFixtures(t *testing.T) {
	t.Parallel()
	all := loadFixtures(t)
	fs := sample.UnderRace(all, func(f *fixture) string { return fmt.Sprint(f.Path, " ", f.contentType(), " ", f.Status/100) })
	t.Logf("%d of %d fixtures replayed (race detector: %v)", len(fs), len(all), sample.Race)
	for _, f := range fs {
		body, err := os.ReadFile(filepath.Join("testdata", f.File))
		if err != nil {
			t.Fatal(err)
		}
		chunks, gaps := f.chunks(t)
		for _, split := range []int{0, 7} {
			t.Run(f.File+"/handler/split"+string(rune('0'+split)), func(t *testing.T) {
				c := newRec(t)
				h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", f.contentType())
					w.WriteHeader(f.Status)
					writeSplit(w, body, split)
				}), openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, f.Path, bytes.NewReader(f.Request)))
				if !bytes.Equal(w.Body.Bytes(), body) {
					t.Fatal("the client did not get the body unchanged")
				}
				c.want(f.reason(), float64(orZero(f.Prompt)), float64(orZero(f.Completion)), float64(orZero(f.Cached)))
				wantStream(t, c, f, chunks, gaps)
				wantServerTimes(t, c, f)
			})
			t.Run(f.File+"/transport/split"+string(rune('0'+split)), func(t *testing.T) {
				c := newRec(t)
				tr := openaihttp.NewTransport(replay{f.Status, f.contentType(), body}, openaihttp.WithEngine(c.e),
					openaihttp.WithBackend("b", ""), openaihttp.WithErrorHandler(func(err error) { t.Error(err) }))
				req, _ := http.NewRequest(http.MethodPost, "http://b"+f.Path, bytes.NewReader(f.Request))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				var got []byte
				if split == 0 {
					got, _ = io.ReadAll(resp.Body)
				} else {
					buf := make([]byte, split)
					for {
						n, err := resp.Body.Read(buf)
						got = append(got, buf[:n]...)
						if err != nil {
							break
						}
					}
				}
				_ = resp.Body.Close()
				if !bytes.Equal(got, body) {
					t.Fatal("the caller did not get the body unchanged")
				}
				_, respModel, _ := corpus.KindsOf(corpus.FixtureAPI(f.Endpoint), f.Status, body) // gen_ai.response.model
				l := namedAs(withOperation(clientLabels("b", ""), f.operation()), respModel)
				if f.reason() == "error" {
					l = append(l, "error.type", f.errorType())
				}
				if n := c.clientHist(instrument.NameGenAIClientOperationDuration, l...); n != 1 {
					t.Errorf("duration count %d with %v", n, l)
				}
				in := namedAs(withOperation(clientLabels("b", "", "gen_ai.token.type", "input"), f.operation()), respModel)
				if f.Prompt == nil {
					if n := c.clientHist(instrument.NameGenAIClientTokenUsage, in...); n != 0 {
						t.Errorf("token usage recorded without usage")
					}
				} else if h := c.r.Histogram(instrument.NameGenAIClientTokenUsage, in...); h.Sum != float64(*f.Prompt) {
					t.Errorf("input tokens %v, want %d", h.Sum, *f.Prompt)
				}
				first := min(chunks, 1)
				plain := withOperation(clientLabels("b", ""), f.operation()) // the chunk gaps carry no response model
				if n := c.clientHist(instrument.NameGenAIClientTimeToFirstChunk, namedAs(plain, respModel)...); n != first {
					t.Errorf("time to first chunk count %d, want %d", n, first)
				}
				if n := c.clientHist(instrument.NameGenAIClientTimePerOutputChunk, plain...); n != gaps {
					t.Errorf("time per output chunk count %d, want %d", n, gaps)
				}
			})
		}
	}
}

func wantStream(t *testing.T, c *rec, f fixture, chunks, gaps uint64) {
	t.Helper()
	if n, first := c.count("vllm:time_to_first_token_seconds"), min(chunks, 1); n != first {
		t.Errorf("TTFT count %d, want %d", n, first)
	}
	if n := c.count("vllm:inter_token_latency_seconds"); n != gaps {
		t.Errorf("inter-chunk latency count %d, want %d", n, gaps)
	}
	if !f.Stream && chunks != 0 {
		t.Errorf("a body not streamed has %d chunks in the manifest", chunks)
	}
	if n := c.count("vllm:request_generation_tokens"); (n == 1) != (f.Completion != nil) {
		t.Errorf("request_generation_tokens count %d with usage %v", n, f.Completion != nil)
	}
}

// wantServerTimes checks the prefill and decode times a server reported
// (Ollama, llama.cpp): one value each, the manifest's, or none.
func wantServerTimes(t *testing.T, c *rec, f fixture) {
	t.Helper()
	for _, w := range []struct {
		family string
		want   *float64
	}{{"vllm:request_prefill_time_seconds", f.Prefill}, {"vllm:request_decode_time_seconds", f.Decode}} {
		n := c.count(w.family)
		if w.want == nil {
			if n != 0 {
				t.Errorf("%s count %d without server times", w.family, n)
			}
			continue
		}
		if h := c.r.Histogram(w.family, c.labels()...); n != 1 || math.Abs(h.Sum-*w.want) > 1e-9 {
			t.Errorf("%s count %d sum %v, want 1 and %v", w.family, n, h.Sum, *w.want)
		}
	}
}

func orZero(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// replay is a RoundTripper answering a recorded response.
type replay struct {
	status int
	ct     string
	body   []byte
}

func (r replay) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	return &http.Response{StatusCode: r.status, Header: http.Header{"Content-Type": {r.ct}},
		Body: io.NopCloser(bytes.NewReader(r.body)), Request: req}, nil
}
