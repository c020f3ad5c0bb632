package openaihttp_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/stats"
)

// loadCorpus returns the replay corpus (testdata/corpus/README.md).
func loadCorpus(t *testing.T) []corpus.Entry {
	t.Helper()
	es, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) < 500 {
		t.Fatalf("%d corpus entries", len(es))
	}
	return es
}

// splits are the ways an entry is written: realistic pieces and random
// small ones always, one byte at a time for the first entry of each kind
// (slow under -race: once per kind).
func splits(e *corpus.Entry, seen map[string]bool) []corpus.Split {
	kind := e.Kind()
	if seen[kind] || len(e.Response) > 32<<10 {
		return []corpus.Split{corpus.Realistic, corpus.Random}
	}
	seen[kind] = true
	return []corpus.Split{corpus.Realistic, corpus.Random, corpus.Bytes}
}

// Real provider traffic (OpenAI, Azure, Anthropic, Mistral, DeepSeek,
// OpenRouter, Groq and more: chat, completions, embeddings, Responses,
// Messages), replayed behind NewHandler and through NewTransport in
// realistic pieces and odd byte splits: the client gets exactly the
// recorded bytes (gzip included), and the package records the recording's
// finish reason, usage, cached tokens and content chunks, as each API
// defines them (computed by testdata/corpus/convert.py), on the path each
// provider serves it on (DeepSeek's /chat/completions, Azure's
// /openai/deployments/{deployment}/..., Gemini's /v1beta/openai/...). A
// path the package does not observe (none in the corpus today) passes
// through unrecorded.
//
// Under the race detector a fixed part of the corpus is replayed (package
// sample: the first entry of each provider, API, framing, encoding and
// status class, and every sample.Every-th), the whole of it without: the
// replay runs on the test's goroutine (the handler behind an
// httptest.ResponseRecorder, the transport over a RoundTripper in
// memory), where the race detector has nothing to find, but for the
// decoder of a gzip body, whose goroutine the sample's gzip entries of
// each kind run.
//
// Both sides replay an entry once per split on one Recorder, whose figures
// are then the expected ones times the splits; when they are not, each
// side and split is replayed alone on a Recorder of its own to name the
// failing ones (a Recorder per replay would make the test several times
// slower).
func TestCorpus(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	all := loadCorpus(t)
	es := sample.UnderRace(all, (*corpus.Entry).Kind)
	t.Logf("%d of %d entries replayed (race detector: %v)", len(es), len(all), sample.Race)
	for _, e := range es {
		ss := splits(&e, seen)
		t.Run(e.ID, func(t *testing.T) {
			// The handler records the vllm families, the transport the
			// GenAI client ones: one Recorder serves both.
			l := &lenient{TB: t}
			c := newRec(l, onlyDrops(t))
			for _, split := range ss {
				replayHandler(t, c, &e, split)
				replayTransport(t, c, &e, split)
			}
			k := float64(len(ss))
			if s := c.snapshot(); len(append(append(checkServer(s, &e, k), checkClient(s, &e, k)...), l.take()...)) == 0 {
				return
			}
			for _, side := range []struct {
				name   string
				replay func(*testing.T, *rec, *corpus.Entry, corpus.Split)
				check  func(*rec, *corpus.Entry, float64) []string
			}{{"handler", replayHandler, checkServer}, {"transport", replayTransport, checkClient}} {
				for _, split := range ss {
					c := newRec(l, onlyDrops(t))
					side.replay(t, c, &e, split)
					for _, p := range append(side.check(c.snapshot(), &e, 1), l.take()...) {
						t.Errorf("%s, %s split: %s%s", side.name, split, p, e.Explain())
					}
				}
			}
		})
	}
}

// replayHandler serves an entry's response behind NewHandler, written as
// split says, and checks that the client got it unchanged.
func replayHandler(t *testing.T, c *rec, e *corpus.Entry, split corpus.Split) {
	t.Helper()
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range e.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(e.Status)
		for _, p := range e.Writes(split) {
			_, _ = w.Write(p)
			w.(http.Flusher).Flush()
		}
	}), openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(func(err error) { t.Errorf("%s split: recording: %v", split, err) }))
	req := httptest.NewRequest(e.Method, "http://"+e.Provider+".test"+e.Path, bytes.NewReader(e.Request))
	req.Header = e.RequestHeader()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != e.Status || !bytes.Equal(w.Body.Bytes(), e.Response) {
		t.Errorf("%s split: the client got %d and %d bytes, the server sent %d and %d", split, w.Code, w.Body.Len(), e.Status, len(e.Response))
	}
}

// replayTransport answers an entry's response through NewTransport, each
// Read of the body getting at most one piece of split, and checks that the
// caller got it unchanged.
func replayTransport(t *testing.T, c *rec, e *corpus.Entry, split corpus.Split) {
	t.Helper()
	tr := openaihttp.NewTransport(pieces{e, split}, openaihttp.WithEngine(c.e), openaihttp.WithBackend("b", ""),
		openaihttp.WithErrorHandler(func(err error) { t.Errorf("%s split: recording: %v", split, err) }))
	req, err := http.NewRequest(e.Method, "http://"+e.Provider+".test"+e.Path, bytes.NewReader(e.Request))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = e.RequestHeader()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != e.Status || !bytes.Equal(got, e.Response) {
		t.Errorf("%s split: the caller got %d and %d bytes (%v), the server sent %d and %d", split, resp.StatusCode, len(got), err, e.Status, len(e.Response))
	}
}

var finishReasons = []string{"stop", "length", "abort", "error", "repetition"}

// checkServer returns how what the handler recorded for k replays of an
// entry differs from the expectation (c a snapshot: one collection read
// for every check).
func checkServer(c *rec, e *corpus.Entry, k float64) []string {
	var bad []string
	differs := func(what string, got, want float64) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s = %v, want %v", what, got, want))
		}
	}
	var total float64
	for _, r := range finishReasons {
		total += c.success(r)
	}
	if !e.Observed {
		differs("requests recorded on a path not observed", total, 0)
		return bad
	}
	x := e.Expect
	differs("requests", total, k)
	differs("request_success{"+x.Finish+"}", c.success(x.Finish), k)
	prompt, gen, cached := float64(orZero(x.PromptTokens)), float64(orZero(x.GenerationTokens)), float64(orZero(x.CachedTokens))
	differs("prompt tokens", c.value("vllm:prompt_tokens_total"), k*prompt)
	differs("generation tokens", c.value("vllm:generation_tokens_total"), k*gen)
	differs("cached tokens", c.value("vllm:prompt_tokens_cached_total"), k*cached)
	differs("local_compute tokens", c.value("vllm:prompt_tokens_by_source_total", "source", "local_compute"), k*(prompt-cached))
	differs("local_cache_hit tokens", c.value("vllm:prompt_tokens_by_source_total", "source", "local_cache_hit"), k*cached)
	var usage float64
	if x.PromptTokens != nil {
		usage = k
	}
	differs("request_prompt_tokens count", float64(c.count("vllm:request_prompt_tokens")), usage)
	var first float64
	if e.Streamed && x.ContentChunks > 0 {
		first = k
	}
	differs("TTFT count", float64(c.count("vllm:time_to_first_token_seconds")), first)
	// The gaps between content chunks: asserted for one choice (with
	// several, issue 25's defect 4 decides what they are).
	if e.Streamed && len(x.ChunksPerChoice) <= 1 {
		differs("inter-chunk latency count", float64(c.count("vllm:inter_token_latency_seconds")), k*float64(max(x.ContentChunks-1, 0)))
	}
	return bad
}

// checkClient returns how what the transport recorded for k replays of an
// entry (the GenAI client metrics of its legs) differs from the
// expectation.
func checkClient(c *rec, e *corpus.Entry, k float64) []string {
	var bad []string
	differs := func(what string, got, want float64) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s = %v, want %v", what, got, want))
		}
	}
	op := e.Operation()
	_, respModel, _ := e.Kinds() // gen_ai.response.model, as its JSON names it
	l := namedAs(withOperation(clientLabels("b", ""), op), respModel)
	if !e.Observed {
		differs("legs recorded on a path not observed", float64(c.clientHist(instrument.NameGenAIClientOperationDuration, l...)), 0)
		return bad
	}
	x := e.Expect
	var ok, failed float64
	if x.Finish == "error" {
		failed = k
	} else {
		ok = k
	}
	if ok > 0 {
		differs("operation durations", float64(c.clientHist(instrument.NameGenAIClientOperationDuration, l...)), ok)
	} else {
		differs("operation durations with error.type "+e.ErrorType().String(),
			float64(c.clientHist(instrument.NameGenAIClientOperationDuration, append(l, "error.type", e.ErrorType().String())...)), failed)
	}
	for _, w := range []struct {
		kind string
		want *int64
	}{{"input", x.PromptTokens}, {"output", x.GenerationTokens}} {
		tl := namedAs(withOperation(clientLabels("b", "", "gen_ai.token.type", w.kind), op), respModel)
		if w.want == nil {
			differs(w.kind+" token values without usage", float64(c.clientHist(instrument.NameGenAIClientTokenUsage, tl...)), 0)
			continue
		}
		h := c.r.Histogram(instrument.NameGenAIClientTokenUsage, tl...)
		differs(w.kind+" token values", float64(h.Count), k)
		differs(w.kind+" tokens", h.Sum, k*float64(*w.want))
	}
	var first float64
	if e.Streamed && x.ContentChunks > 0 {
		first = k
	}
	differs("time to first chunk count", float64(c.clientHist(instrument.NameGenAIClientTimeToFirstChunk, l...)), first)
	return bad
}

// lenient is a testing.TB on which a failed look-up of package testutil
// (a family or series that is not there) is a message to collect, not a
// failure: a check of several replays at once collects them, and on any
// replays each split alone to name the failing one.
type lenient struct {
	testing.TB
	msgs []string
}

func (l *lenient) Fatalf(format string, args ...any) {
	l.msgs = append(l.msgs, fmt.Sprintf(format, args...))
}
func (l *lenient) Errorf(format string, args ...any) { l.Fatalf(format, args...) }

// take returns the messages collected since the last take.
func (l *lenient) take() []string {
	m := l.msgs
	l.msgs = nil
	return m
}

// onlyDrops is the Recorder's error handler of a corpus replay: it takes
// the values an entry's usage reports out of bounds (a detail above its
// whole, cached tokens above the prompt), which the Recorder drops for
// its request and reports, and fails the test on anything else.
func onlyDrops(t *testing.T) instrument.Option {
	return instrument.WithErrorHandler(func(err error) {
		if !errors.Is(err, stats.ErrDetailExceedsTotal) && !errors.Is(err, stats.ErrCachedExceedsPrompt) {
			t.Errorf("the Recorder reported: %v", err)
		}
	})
}

// pieces is a RoundTripper answering an entry's response, each Read of its
// body returning at most one of the entry's writes.
type pieces struct {
	e     *corpus.Entry
	split corpus.Split
}

func (p pieces) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	return &http.Response{StatusCode: p.e.Status, Header: p.e.Header(), Request: req,
		Body: io.NopCloser(p.e.Reader(p.split))}, nil
}
