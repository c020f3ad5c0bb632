package instrument_test

import (
	"context"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// allocHarnesses are the harnesses the allocation tests run on: vLLM's
// views alone, and with views.Semconv and the GenAI server metrics on.
var allocHarnesses = []struct {
	name  string
	build func(testing.TB, ...instrument.Option) *harness
}{
	{"VLLM", newHarness},
	{"VLLM+Semconv", newSemconvHarness},
}

// The Record methods run on every engine step: with a real SDK and the vLLM
// views, with or without the GenAI server metrics, they must not allocate.
func TestRecordDoesNotAllocate(t *testing.T) {
	for _, hb := range allocHarnesses {
		t.Run(hb.name, func(t *testing.T) {
			h := hb.build(t, instrument.WithEngines(0, 1), instrument.WithMaxModelLen(4096),
				instrument.WithKVConnector(), instrument.WithSpecDecoding(2))
			e := h.engine(1)
			ctx := t.Context()

			// A decode step of 256 requests, one of them emitting its first
			// token, with prompt tokens from every source and two finished
			// requests, one failed.
			it := validIteration()
			it.GenerationTokens = 257
			it.ITL = make([]float64, 256)
			for i := range it.ITL {
				it.ITL[i] = 0.001 * float64(i%80)
			}
			errFinished := validFinished()
			errFinished.Reason = stats.FinishError
			it.Finished = []stats.FinishedRequest{validFinished(), errFinished}

			// Connector cache, speculative decoding on the pre-created
			// positions, KV transfers, evictions and an unchanged LoRA state.
			s := validScheduler() // LoRA state included: its attribute set is reused while unchanged
			f := validFinished()
			r := observed()
			limited := stats.ObservedRequest{Operation: stats.OperationChat, Reason: stats.FinishError, ErrorType: stats.ErrorRateLimited, E2ELatency: 0.1}
			named := observed()
			named.ResponseModel = "llama-3.1-8b-2026-01"

			for _, c := range []struct {
				name   string
				record func() error
			}{
				{"RecordIteration", func() error { c := it; e.RecordIteration(ctx, &c); return h.refused() }},
				{"RecordScheduler", func() error { e.RecordScheduler(ctx, &s); return h.refused() }},
				{"RecordFinished", func() error { e.RecordFinished(ctx, &f); return h.refused() }},
				{"RecordRequest", func() error { e.RecordRequest(ctx, &r); return h.refused() }},
				{"RecordRequest rate limited", func() error { e.RecordRequest(ctx, &limited); return h.refused() }},
				{"RecordRequest response model", func() error { e.RecordRequest(ctx, &named); return h.refused() }},
			} {
				t.Run(c.name, func(t *testing.T) { checkNoAllocs(t, c.record) })
			}
		})
	}
}

// With exemplars on (the SDK's trace-based default) and sampled spans, on
// the step's context or on every request's, no step allocates: no stream
// the views export filters the attributes of a latency measurement, so the
// SDK's exemplar path (filteredExemplarReservoir.Offer) builds no slice of
// dropped attributes (lazyFilteredAttributes.Dropped). It did while vLLM's
// TTFT, e2e and TPOT carried the GenAI attributes for views.Semconv, which
// views.VLLM dropped: once per sampled TTFT, e2e and TPOT measurement.
func TestRecordAllocationsWithSampledSpans(t *testing.T) {
	for _, hb := range allocHarnesses {
		for _, priority := range []bool{false, true} {
			name := hb.name
			opts := []instrument.Option{instrument.WithMaxModelLen(4096)}
			if priority {
				name += ", priority scheduling"
				opts = append(opts, instrument.WithPriorityScheduling())
			}
			t.Run(name, func(t *testing.T) { testSampledSpans(t, hb.build(t, opts...)) })
		}
	}
}

func testSampledSpans(t *testing.T, h *harness) {
	e := h.engine(0)
	decode := stats.Iteration{GenerationTokens: 256, ITL: make([]float64, 256), ITLContexts: make([]context.Context, 256)}
	for i := range decode.ITL {
		decode.ITL[i] = 0.001 * float64(i%80)
		decode.ITLContexts[i] = sampledContext(byte(i))
	}
	full := validIteration()
	full.TTFTContexts = []context.Context{sampledContext(1)}
	full.Finished[0].Context, full.Finished[1].Context = sampledContext(2), sampledContext(3)
	full.Finished[1].Reason = stats.FinishError
	finished := validFinished()
	r := observed()
	step := sampledContext(9)
	short := stats.Iteration{GenerationTokens: 256, ITL: decode.ITL}
	firsts := stats.Iteration{TTFT: full.TTFT, Finished: []stats.FinishedRequest{validFinished()}}

	for _, c := range []struct {
		name   string
		record func() error
	}{
		{"decode step, sampled step span", func() error { c := short; e.RecordIteration(step, &c); return h.refused() }},
		{"decode step, sampled requests", func() error { c := decode; e.RecordIteration(context.Background(), &c); return h.refused() }},
		{"first tokens and finishes, sampled requests", func() error { c := full; e.RecordIteration(context.Background(), &c); return h.refused() }},
		{"first tokens and finishes, sampled step span", func() error { c := firsts; e.RecordIteration(step, &c); return h.refused() }},
		{"RecordFinished, sampled span", func() error { e.RecordFinished(step, &finished); return h.refused() }},
		{"RecordRequest, sampled span", func() error { e.RecordRequest(step, &r); return h.refused() }},
	} {
		t.Run(c.name, func(t *testing.T) { checkNoAllocs(t, c.record) })
	}
}

// checkNoAllocs fails the test unless record, after a first call (which may
// build state, a LoRA set), allocates nothing and returns no error.
func checkNoAllocs(t *testing.T, record func() error) {
	t.Helper()
	if err := record(); err != nil {
		t.Fatal(err)
	}
	var err error
	allocs := testing.AllocsPerRun(100, func() { err = record() })
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("allocates %v times per call, want 0", allocs)
	}
}
