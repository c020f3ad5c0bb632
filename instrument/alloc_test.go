package instrument_test

import (
	"context"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// The Record methods run on every engine step: with a real SDK and the vLLM
// views they must not allocate.
func TestRecordDoesNotAllocate(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1), instrument.WithMaxModelLen(4096),
		instrument.WithKVConnector(), instrument.WithSpecDecoding(2))
	e := h.engine(1)
	ctx := t.Context()

	// A decode step of 256 requests, one of them emitting its first token,
	// with prompt tokens from every source and two finished requests.
	it := validIteration()
	it.GenerationTokens = 257
	it.ITL = make([]float64, 256)
	for i := range it.ITL {
		it.ITL[i] = 0.001 * float64(i%80)
	}
	errFinished := validFinished()
	errFinished.Reason = stats.FinishError
	it.Finished = []stats.FinishedRequest{validFinished(), errFinished}

	// Connector cache, speculative decoding on the pre-created positions, KV
	// transfers, evictions and an unchanged LoRA state.
	s := validScheduler() // LoRA state included: its attribute set is reused while unchanged
	f := validFinished()

	for _, c := range []struct {
		name   string
		record func() error
	}{
		{"RecordIteration", func() error { return e.RecordIteration(ctx, &it) }},
		{"RecordScheduler", func() error { return e.RecordScheduler(ctx, &s) }},
		{"RecordFinished", func() error { return e.RecordFinished(ctx, &f) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.record(); err != nil { // the first call may build state (a LoRA set)
				t.Fatal(err)
			}
			var err error
			allocs := testing.AllocsPerRun(100, func() { err = c.record() })
			if err != nil {
				t.Fatal(err)
			}
			if allocs != 0 {
				t.Errorf("%s allocates %v times per call, want 0", c.name, allocs)
			}
		})
	}
}

// With exemplars on (the SDK's trace-based default) and sampled spans, on
// the step's context or on every request's, a decode step (inter-token
// latencies only) allocates nothing. A step with first tokens or finished
// requests allocates once per sampled TTFT, e2e and TPOT measurement, and
// that is the SDK's: its exemplar path builds the slice of the attributes
// the stream's view drops (lazyFilteredAttributes.Dropped, called by
// filteredExemplarReservoir.Offer before any reservoir sees the
// measurement; views.IDOnlyExemplars then discards it), and vLLM's TTFT,
// e2e and TPOT families drop the GenAI attributes. docs/benchmarks.md
// measures it.
func TestRecordAllocationsWithSampledSpans(t *testing.T) {
	h := newHarness(t, instrument.WithMaxModelLen(4096))
	e := h.engine(0)
	decode := stats.Iteration{GenerationTokens: 256, ITL: make([]float64, 256), ITLContexts: make([]context.Context, 256)}
	for i := range decode.ITL {
		decode.ITL[i] = 0.001 * float64(i%80)
		decode.ITLContexts[i] = sampledContext(byte(i))
	}
	full := validIteration()
	full.TTFTContexts = []context.Context{sampledContext(1)}
	full.Finished[0].Context, full.Finished[1].Context = sampledContext(2), sampledContext(3)
	sdkAllocs := float64(len(full.TTFT) + 2*len(full.Finished)) // one per sampled TTFT, e2e and TPOT

	for _, c := range []struct {
		name string
		step context.Context
		it   *stats.Iteration
		max  float64
	}{
		{"decode step, sampled step span", sampledContext(9), &stats.Iteration{GenerationTokens: 256, ITL: decode.ITL}, 0},
		{"decode step, sampled requests", context.Background(), &decode, 0},
		{"first tokens and finishes, sampled requests", context.Background(), &full, sdkAllocs},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if err = e.RecordIteration(c.step, c.it); err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(100, func() { err = e.RecordIteration(c.step, c.it) })
			if err != nil {
				t.Fatal(err)
			}
			if allocs > c.max {
				t.Errorf("RecordIteration allocates %v times per step, want at most %v", allocs, c.max)
			}
		})
	}
}
