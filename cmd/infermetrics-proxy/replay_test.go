package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/stats"
)

// corpusBatch is the number of entries one proxy serves between scrapes,
// each under a model of its own: a bounded scrape to read.
const corpusBatch = 60

// corpusUpstream serves the entry named by the request's X-Corpus-Entry,
// in its realistic pieces; with usage, a streamed entry asked for
// include_usage gets a usage chunk made up for it (synthUsage) before its
// [DONE].
type corpusUpstream struct {
	*httptest.Server
	entries []corpus.Entry
	mu      sync.Mutex
	asked   map[int]bool // entry: its request asked for include_usage
}

func newCorpusUpstream(t *testing.T, es []corpus.Entry) *corpusUpstream {
	u := &corpusUpstream{entries: es, asked: map[int]bool{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.Header.Get("X-Corpus-Entry"))
		if err != nil || i < 0 || i >= len(es) {
			http.Error(w, "no entry", http.StatusBadRequest)
			return
		}
		e := &es[i]
		var req struct {
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		asked := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		u.mu.Lock()
		u.asked[i] = asked
		u.mu.Unlock()
		for k, v := range e.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(e.Status)
		writes := e.Writes(corpus.Realistic)
		if asked && !e.UsageAsked && e.Expect.PromptTokens == nil {
			writes = withSynthUsage(t, e)
		}
		for _, p := range writes {
			if _, err := w.Write(p); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// synthUsage is the usage chunk the upstream adds for a request the proxy
// rewrote to ask for it, to a recording without usage (Mistral's streams
// carry it unasked); its numbers are made up.
func synthUsage(e *corpus.Entry) (prompt, completion int) { return 7, 3 + e.Expect.ContentChunks }

// withSynthUsage returns an entry's stream with a usage chunk before its
// final [DONE] (at its end without one), gzip-encoded again, one flush per
// event, when the entry is.
func withSynthUsage(t *testing.T, e *corpus.Entry) [][]byte {
	events := e.Writes(corpus.Realistic)
	if e.Encoding == "gzip" {
		events = splitEvents(body(t, e))
	}
	prompt, completion := synthUsage(e)
	usage := fmt.Appendf(nil, `data: {"id":"synth","object":"chat.completion.chunk","created":0,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
		prompt, completion, prompt+completion)
	at := len(events)
	if at > 0 && bytes.HasPrefix(events[at-1], []byte("data: [DONE]")) {
		at--
	}
	events = append(events[:at:at], append([][]byte{usage}, events[at:]...)...)
	if e.Encoding != "gzip" {
		return events
	}
	var out [][]byte
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for i, ev := range events {
		_, _ = zw.Write(ev)
		if i == len(events)-1 {
			_ = zw.Close()
		} else {
			_ = zw.Flush()
		}
		out = append(out, bytes.Clone(buf.Bytes()))
		buf.Reset()
	}
	return out
}

// splitEvents cuts a decoded SSE stream after each blank line.
func splitEvents(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i+2])
		b = b[i+2:]
	}
	return out
}

// body is an entry's Body, failing the test when it cannot be decoded.
func body(t *testing.T, e *corpus.Entry) []byte {
	t.Helper()
	b, err := e.Body()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// corpusClient sends and receives bodies as they are: no transparent gzip.
var corpusClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// send posts entry i's request, under model, to the proxy and returns the
// status and body the client got.
func send(t *testing.T, p *testProxy, es []corpus.Entry, i int, model string) (int, []byte) {
	t.Helper()
	e := &es[i]
	req, err := http.NewRequest(e.Method, p.url(e.Path), bytes.NewReader(e.WithModel(model)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = e.RequestHeader()
	req.Header.Set("X-Corpus-Entry", strconv.Itoa(i))
	resp, err := corpusClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", e.ID, err)
	}
	return resp.StatusCode, b
}

// byModel splits a scrape into each model's lines, to read one model's
// series apart from the others'.
func byModel(scrape string) map[string]string {
	lines := map[string]*strings.Builder{}
	for _, l := range strings.Split(scrape, "\n") {
		if _, rest, ok := strings.Cut(l, `model_name="`); ok {
			m, _, _ := strings.Cut(rest, `"`)
			if lines[m] == nil {
				lines[m] = &strings.Builder{}
			}
			lines[m].WriteString(l + "\n")
		}
	}
	out := map[string]string{}
	for m, b := range lines {
		out[m] = b.String()
	}
	return out
}

// batches groups entry indices for one proxy each: an entry whose request
// names no model alone (it is recorded under the default model or its
// Azure deployment, which other entries share), the others corpusBatch at
// a time.
func batches(es []corpus.Entry, keep func(*corpus.Entry) bool) [][]int {
	var out [][]int
	var cur []int
	for i := range es {
		if !keep(&es[i]) {
			continue
		}
		if !strings.HasPrefix(corpusModel(&es[i]), "corpus-") {
			out = append(out, []int{i})
			continue
		}
		if cur = append(cur, i); len(cur) == corpusBatch {
			out, cur = append(out, cur), nil
		}
	}
	return append(out, cur)
}

// corpusModel is the model an entry is sent and recorded under: its own,
// or, for a request that names none within the bytes the proxy reads, the
// deployment an Azure OpenAI path names, else the proxy's default model.
func corpusModel(e *corpus.Entry) string {
	if len(e.ModelSpan) != 2 || e.ModelSpan[1] > openaihttp.DefaultMaxRequestBody {
		if _, rest, ok := strings.Cut(e.Path, "/openai/deployments/"); ok {
			d, _, _ := strings.Cut(rest, "/")
			return d
		}
		return "default"
	}
	return "corpus-" + e.ID
}

// The replay corpus (openaihttp/testdata/corpus) through the proxy: each
// recording of real provider traffic reaches the client exactly as the
// upstream sent it (gzip included), and the proxy records its finish
// reason, tokens and time to first token as the recording's API defines
// them, on the path each provider serves it on, an Azure deployment's
// under its deployment's name when the body names no model; a path the
// proxy's openaihttp does not observe (none in the corpus today) passes
// through unrecorded.
//
// Under the race detector, the part of the corpus package sample keeps
// (the first entry of each provider, API, framing, encoding and status
// class, and every sample.Every-th), the whole of it without: each entry
// takes the same goroutines (the client's, the proxy's and the upstream's
// connections, a gzip body's decoder), which the kinds of the part all
// take; what an entry's bytes change is read on one of them.
func TestCorpusThroughProxy(t *testing.T) {
	t.Parallel()
	all, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	es := sample.UnderRace(all, (*corpus.Entry).Kind)
	t.Logf("%d of %d entries replayed (race detector: %v)", len(es), len(all), sample.Race)
	up := newCorpusUpstream(t, es)
	for _, batch := range batches(es, func(*corpus.Entry) bool { return true }) {
		p := startProxy(t, nil, "-upstream", up.URL, "-max-models", strconv.Itoa(corpusBatch+1))
		for _, i := range batch {
			e := &es[i]
			code, got := send(t, p, es, i, corpusModel(e))
			if code != e.Status || !bytes.Equal(got, e.Response) {
				t.Errorf("%s: the client got %d and %d bytes, the upstream sent %d and %d", e.ID, code, len(got), e.Status, len(e.Response))
			}
		}
		scrape := p.scrape(t)
		models := byModel(scrape)
		for _, i := range batch {
			e := &es[i]
			wantProxyRecorded(t, e, models[corpusModel(e)], e.Expect.PromptTokens, e.Expect.GenerationTokens, e.Expect.CachedTokens)
			wantKindsRecorded(t, e, models[corpusModel(e)], scrape)
		}
		_ = p.stop(t)
	}
}

// wantKindsRecorded checks that an entry's token kinds, as its JSON
// reports them (corpus.Entry.Kinds), were recorded with its request: no
// request refused for them, and a value dropped once, by the handler or by
// the leg it passed on, when its cached count exceeds its prompt or a kind
// exceeds the tokens it is a part of (OpenRouter's reasoning_tokens 11 of
// 10 completion tokens), else none.
func wantKindsRecorded(t *testing.T, e *corpus.Entry, s, scrape string) {
	t.Helper()
	if !e.Observed {
		return
	}
	for _, kind := range []string{"observed_request", "client_request"} {
		if v, _ := value(s, "infermetrics_invalid_events_total", "kind", kind); v != 0 {
			t.Errorf("%s: %v %s refused, want none", e.ID, v, kind)
		}
	}
	u, _, err := e.Kinds()
	if err != nil {
		t.Fatalf("%s: %v", e.ID, err)
	}
	var want float64
	if x := e.Expect; x.PromptTokens != nil && detailAboveWhole(u, *x.PromptTokens, *x.GenerationTokens) {
		want = 1
	}
	if v, _ := value(s, "infermetrics_invalid_events_total", "kind", "value_dropped"); v != want {
		t.Errorf("%s: value_dropped = %v, want %v (kinds %v)", e.ID, v, want, u)
	}
	if typ := e.ErrorType(); typ != stats.ErrorNone {
		for _, family := range []string{"gen_ai_server_request_duration_seconds_count", "gen_ai_client_operation_duration_seconds_count"} {
			if v, _ := value(scrape, family, "gen_ai_request_model", corpusModel(e), "error_type", typ.String()); v != 1 {
				t.Errorf("%s: %s{error_type=%q} = %v, want 1", e.ID, family, typ, v)
			}
		}
	}
}

// detailAboveWhole reports a usage that cannot be: cached tokens above the
// prompt, cache writes above the prompt tokens not cached, reasoning or
// audio output above the generation, audio input above the prompt, image
// tokens above what the audio ones leave.
func detailAboveWhole(u stats.TokenUsage, prompt, generation int64) bool {
	get := func(k stats.TokenKind) int64 { n, _ := u.Get(k); return n }
	cached := get(stats.TokenCacheRead)
	if cached > prompt {
		return true
	}
	return get(stats.TokenCacheWrite) > prompt-cached || get(stats.TokenReasoning) > generation ||
		get(stats.TokenInputAudio) > prompt || get(stats.TokenInputImage) > prompt-min(get(stats.TokenInputAudio), prompt) ||
		get(stats.TokenOutputAudio) > generation || get(stats.TokenOutputImage) > generation-min(get(stats.TokenOutputAudio), generation)
}

// With -include-usage, a streamed chat or completions recording whose
// client did not ask for usage: the upstream is asked, its usage chunk
// (made up) is recorded, and the client gets the recorded stream without
// it (decoded alike when gzip-encoded).
func TestCorpusIncludeUsage(t *testing.T) {
	t.Parallel()
	es, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	up := newCorpusUpstream(t, es)
	keep := func(e *corpus.Entry) bool {
		return e.Observed && e.Streamed && e.StreamAsked && !e.UsageAsked && e.Status < 400 && e.Expect.Finish != "error" &&
			(e.API == "chat" || e.API == "completions")
	}
	n := 0
	for _, batch := range batches(es, keep) {
		p := startProxy(t, nil, "-upstream", up.URL, "-include-usage", "-max-models", strconv.Itoa(corpusBatch+1))
		for _, i := range batch {
			n++
			e := &es[i]
			code, got := send(t, p, es, i, corpusModel(e))
			up.mu.Lock()
			asked := up.asked[i]
			up.mu.Unlock()
			if !asked {
				t.Errorf("%s: the upstream was not asked for usage", e.ID)
			}
			want := e.Response
			if e.Encoding == "gzip" {
				got, want = gunzipOrNot(got), body(t, e)
			}
			if e.Expect.PromptTokens != nil {
				// The recording carries a usage chunk its client did not
				// ask for (dd-trace-py's hand-edited cassettes): stripped.
				want = withoutUsageEvents(want)
			}
			if code != e.Status || !bytes.Equal(got, want) {
				t.Errorf("%s: the client got %d and %d bytes, want the recorded %d and %d bytes%s", e.ID, code, len(got), e.Status, len(want), e.Explain())
			}
		}
		models := byModel(p.scrape(t))
		for _, i := range batch {
			e := &es[i]
			if e.Expect.PromptTokens != nil {
				wantProxyRecorded(t, e, models[corpusModel(e)], e.Expect.PromptTokens, e.Expect.GenerationTokens, e.Expect.CachedTokens)
				continue
			}
			prompt, completion := synthUsage(e)
			p64, c64 := int64(prompt), int64(completion)
			wantProxyRecorded(t, e, models[corpusModel(e)], &p64, &c64, nil)
		}
		_ = p.stop(t)
	}
	if n < 20 {
		t.Errorf("%d corpus entries for -include-usage", n)
	}
}

// gunzipOrNot decodes gzip bytes, and returns others as they are.
// withoutUsageEvents returns an event stream without its events whose
// data has empty choices and a usage.
func withoutUsageEvents(b []byte) []byte {
	var out []byte
	for ev := range strings.SplitAfterSeq(string(b), "\n\n") {
		if !(strings.Contains(ev, `"choices":[]`) && strings.Contains(ev, `"usage"`)) {
			out = append(out, ev...)
		}
	}
	return out
}

func gunzipOrNot(b []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return b
	}
	d, err := io.ReadAll(zr)
	if err != nil {
		return b
	}
	return d
}

// wantProxyRecorded checks a model's lines of a scrape against an entry.
func wantProxyRecorded(t *testing.T, e *corpus.Entry, s string, prompt, generation, cached *int64) {
	t.Helper()
	var total float64
	for _, r := range []string{"stop", "length", "abort", "error", "repetition"} {
		v, _ := value(s, "vllm:request_success_total", "finished_reason", r)
		total += v
	}
	if !e.Observed {
		if total != 0 {
			t.Errorf("%s: %s is not observed, yet %v requests were recorded", e.ID, e.Path, total)
		}
		return
	}
	x := e.Expect
	if v, _ := value(s, "vllm:request_success_total", "finished_reason", x.Finish); v != 1 || total != 1 {
		t.Errorf("%s: request_success_total{finished_reason=%q} = %v of %v, want 1 of 1%s", e.ID, x.Finish, v, total, e.Explain())
	}
	for _, w := range []struct {
		family string
		want   *int64
	}{{"vllm:prompt_tokens_total", prompt}, {"vllm:generation_tokens_total", generation}, {"vllm:prompt_tokens_cached_total", cached}} {
		var want float64
		if w.want != nil {
			want = float64(*w.want)
		}
		if v, _ := value(s, w.family); v != want {
			t.Errorf("%s: %s = %v, want %v%s", e.ID, w.family, v, want, e.Explain())
		}
	}
	var first float64
	if e.Streamed && x.ContentChunks > 0 {
		first = 1
	}
	if v, _ := value(s, "vllm:time_to_first_token_seconds_count"); v != first {
		t.Errorf("%s: TTFT count %v, want %v%s", e.ID, v, first, e.Explain())
	}
}
