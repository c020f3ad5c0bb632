package openaihttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// Injected delays of the P/D router below.
const (
	prefillDelay = 60 * time.Millisecond // the prefill backend before it answers
	handoffDelay = 40 * time.Millisecond // the router between the prefill leg's end and the decode leg
	decodeDelay  = 30 * time.Millisecond // the decode backend before its first chunk
)

// A P/D router built with NewHandler, NewTransport and ContextWithBackend,
// handler and transport on one Engine, in front of a prefill backend
// (non-streamed, max_tokens 1, no cache hit) and a streaming decode backend
// whose usage reports the prompt as cached (received from the prefill
// instance). The client request is counted once, its tokens from usage,
// its cached tokens the prefill leg's (none: the prompt computed, as
// local_compute); the three leg families are recorded once, with the values
// of the trace's legs and at least the injected delays.
func TestPDLegFamilies(t *testing.T) {
	c := newRec(t)
	prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(prefillDelay)
		jsonHandler(200, `{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"length"}],`+
			`"usage":{"prompt_tokens":100,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}`)(w, r)
	}))
	defer prefill.Close()
	decode := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(decodeDelay)
		sseHandler(chunk("a"), chunk("b"), chunk("c"), finishChunk("stop"), usageChunk(100, 3, 96), done)(w, r)
	}))
	defer decode.Close()
	cl := client(t, c)
	var trace *openaihttp.Trace
	s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ctx := r.Context()
		trace = openaihttp.TraceFrom(ctx)
		send := func(base, role, body string) *http.Response { return sendLeg(t, cl.Transport, ctx, base, role, body) }
		p := send(prefill.URL, instrument.RolePrefill, chatBody)
		if p == nil {
			return
		}
		_, _ = io.Copy(io.Discard, p.Body)
		_ = p.Body.Close()
		time.Sleep(handoffDelay)
		d := send(decode.URL, instrument.RoleDecode, string(body))
		if d == nil {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.Copy(flushWriter{w}, d.Body)
		_ = d.Body.Close()
	}))
	readAll(t, post(t, s.URL+"/v1/chat/completions", streamBody))
	s.wait()

	// The client request, once: tokens from the usage the router forwarded.
	c.want("stop", 100, 3, 0)
	for source, want := range map[string]float64{"external_kv_transfer": 0, "local_compute": 100, "local_cache_hit": 0} {
		if got := c.value("vllm:prompt_tokens_by_source_total", "source", source); got != want {
			t.Errorf("prompt tokens from %s on the router = %v, want %v", source, got, want)
		}
	}
	if h := c.r.Histogram("vllm:request_prompt_tokens", c.labels()...); h.Count != 1 || h.Sum != 100 {
		t.Errorf("vllm:request_prompt_tokens %+v, want one request of 100", h)
	}

	legs := trace.Legs()
	if len(legs) != 2 || !legs[0].Done || !legs[1].Done {
		t.Fatalf("legs %+v", legs)
	}
	want := map[string]struct {
		value float64
		delay time.Duration
	}{
		instrument.NamePDPrefillLegDuration:        {legs[0].Observed.E2ELatency, prefillDelay},
		instrument.NamePDHandoffDuration:           {legs[1].Start.Sub(legs[0].End()).Seconds(), handoffDelay},
		instrument.NamePDDecodeLegTimeToFirstChunk: {legs[1].Observed.TimeToFirstToken, decodeDelay},
	}
	var parts float64
	for family, w := range want {
		h := c.r.Histogram(family, c.labels()...)
		// The legs' own figures, at least the injected delay, and seconds
		// (not milliseconds: well below a minute).
		if h.Count != 1 || h.Sum != w.value || h.Sum < w.delay.Seconds() || h.Sum > 60 {
			t.Errorf("%s %+v, want one value %v >= %v", family, h, w.value, w.delay)
		}
		parts += h.Sum
	}
	// The client's time to first token covers prefill, handoff and the
	// decode leg's time to first chunk.
	ttft := c.r.Histogram("vllm:time_to_first_token_seconds", c.labels()...)
	if ttft.Count != 1 || ttft.Sum < parts {
		t.Errorf("client TTFT %+v, want one value >= %v (prefill + handoff + decode TTFT)", ttft, parts)
	}
}

// flushWriter flushes after each write, as a streaming router does.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.w.(http.Flusher).Flush()
	return n, err
}

// PD picks the first decode leg and the last prefill leg sent before it; a
// decode leg sent before the prefill leg ended (both at once) has no
// handoff; without both roles there is nothing to record.
func TestTracePD(t *testing.T) {
	c := newRec(t)
	up := httptest.NewServer(sseHandler(chunk("a"), finishChunk("stop"), usageChunk(8, 1, 0), done))
	defer up.Close()
	cl := client(t, c)
	ctx, tr := openaihttp.NewTrace(t.Context())
	send := func(role string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(openaihttp.ContextWithBackend(ctx, openaihttp.Backend{Name: role, Role: role}),
			http.MethodPost, up.URL+"/v1/completions", strings.NewReader(streamBody))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if _, ok := tr.PD(); ok {
		t.Error("an empty trace has P/D legs")
	}
	readAll(t, send(instrument.RolePrefill))
	if _, ok := tr.PD(); ok {
		t.Error("a prefill leg alone has P/D legs")
	}
	readAll(t, send(instrument.RolePrefill)) // a retried prefill: the last one counts
	readAll(t, send(instrument.RoleDecode))
	readAll(t, send(instrument.RoleDecode)) // a second decode leg: the first counts
	legs := tr.Legs()
	pd, ok := tr.PD()
	if !ok || pd.PrefillLatency != legs[1].Observed.E2ELatency || !pd.Handoff ||
		pd.HandoffGap != legs[2].Start.Sub(legs[1].End()).Seconds() ||
		!pd.DecodeFirstToken || pd.DecodeTimeToFirstToken != legs[2].Observed.TimeToFirstToken {
		t.Errorf("PD %+v %v, legs %+v", pd, ok, legs)
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = tr.PD() }); allocs != 0 {
		t.Errorf("PD allocates %v times", allocs)
	}

	// Both at once: the decode leg starts before the prefill leg ends.
	ctx, tr = openaihttp.NewTrace(t.Context())
	p := send(instrument.RolePrefill)
	readAll(t, send(instrument.RoleDecode))
	if _, ok := tr.PD(); ok {
		t.Error("P/D legs before the prefill leg ended")
	}
	readAll(t, p)
	if pd, ok := tr.PD(); !ok || pd.Handoff || pd.HandoffGap != 0 || !pd.DecodeFirstToken {
		t.Errorf("concurrent legs: PD %+v %v, want no handoff", pd, ok)
	}
}
