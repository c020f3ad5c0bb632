package instrument_test

import (
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
