package instrument_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// Events ops of FuzzEvents: each input event is 4 bytes, an op, a request
// (of four, two of them children of one n = 2 request), a time delta in
// milliseconds (negative: an event earlier than the one before) and an
// argument.
const (
	evOpQueued byte = iota
	evOpTokenized
	evOpScheduled
	evOpOutput
	evOpPreempt
	evOpFinish // reason arg%7: 5 and 6 are unknown
	evOpFlush
	evOpHugeOutput // MaxInt64 tokens
	numEvOps
)

// FuzzEvents drives Events with any sequence of events, in and out of
// order, with any arguments: nothing panics, and whatever was refused or
// dropped, the recorded totals keep THE RULE (iteration tokens = computed
// prompt tokens + generation tokens; prompt tokens = the sum over sources)
// and the generation tokens are the Timelines' own.
func FuzzEvents(f *testing.F) {
	f.Add([]byte{
		evOpQueued, 0, 1, 0, evOpTokenized, 0, 2, 100, evOpScheduled, 0, 3, 20, evOpOutput, 0, 10, 1,
		evOpFlush, 0, 0, 0, evOpOutput, 0, 10, 2, evOpFinish, 0, 1, 0,
	})
	f.Add([]byte{
		evOpTokenized, 2, 1, 40, evOpTokenized, 3, 1, 40, evOpScheduled, 2, 1, 0, evOpFinish, 3, 1, 3,
		evOpOutput, 2, 5, 1, evOpPreempt, 2, 1, 0, evOpScheduled, 2, 1, 30, evOpOutput, 2, 1, 3, evOpFinish, 2, 1, 1,
	})
	f.Add([]byte{
		evOpScheduled, 1, 1, 64, evOpHugeOutput, 1, 1, 0, evOpFlush, 0, 0, 0, evOpHugeOutput, 1, 1, 0, evOpOutput, 1, 1, 1,
		evOpTokenized, 2, 1, 40, evOpScheduled, 2, 1, 40, evOpHugeOutput, 2, 1, 0, evOpFlush, 0, 0, 0,
	})
	f.Add([]byte{
		evOpOutput, 1, 1, 1, evOpScheduled, 1, 0xf0, 0, evOpHugeOutput, 1, 1, 0, evOpHugeOutput, 1, 1, 0,
		evOpFinish, 1, 0x80, 6, evOpFinish, 1, 1, 2, evOpOutput, 1, 1, 1, evOpTokenized, 1, 1, 0,
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHarness(t, instrument.WithEventWindow(instrument.MaxEventWindow))
		ev := h.engine(0).Events()
		children := stats.NewTimelines(stats.Request{Arrival: t0, N: 2})
		tls := []*stats.Timeline{
			stats.NewTimeline(stats.Request{Arrival: t0}),
			stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 64}),
			children[0], children[1],
		}
		now := t0
		for ; len(data) >= 4; data = data[4:] {
			tl := tls[int(data[1])%len(tls)]
			now = now.Add(time.Duration(int8(data[2])) * time.Millisecond)
			arg := int64(int8(data[3]))
			switch data[0] % numEvOps {
			case evOpQueued:
				ev.Queued(tl, now)
			case evOpTokenized:
				ev.Tokenized(tl, now, arg)
			case evOpScheduled:
				ev.Scheduled(tl, now, arg, int64(data[1]>>4))
			case evOpOutput:
				ev.Output(tl, now, arg)
			case evOpHugeOutput:
				ev.Output(tl, now, math.MaxInt64)
			case evOpPreempt:
				ev.Preempt(tl, now)
			case evOpFinish:
				ev.Finish(tl, now, stats.FinishReason(uint8(arg)%7))
			case evOpFlush:
				ev.Flush()
			}
		}
		ev.Flush()
		// Refusals are expected and must not break the totals; a window
		// refused whole (a total past MaxInt64) loses outputs its
		// Timelines made, as a refused step does.
		overflow := errors.Is(h.refused(), stats.ErrOverflow)

		s := h.collect()
		var generated int64
		for _, tl := range tls {
			generated += tl.Generated()
		}
		gen := s.get(t, "vllm:generation_tokens", engineLabels("0")...).value
		computed := s.get(t, "vllm:prompt_tokens_by_source", engineLabels("0", "source", "local_compute")...).value
		var bySource float64
		for _, src := range stats.Sources() {
			bySource += s.get(t, "vllm:prompt_tokens_by_source", engineLabels("0", "source", src.String())...).value
		}
		if total := s.get(t, "vllm:prompt_tokens", engineLabels("0")...).value; total != bySource {
			t.Fatalf("prompt tokens %v, over sources %v", total, bySource)
		}
		if gen != float64(generated) && !overflow {
			t.Fatalf("generation tokens %v, the Timelines generated %d", gen, generated)
		}
		if it, ok := s[series("vllm:iteration_tokens_total", engineLabels("0")...)]; ok && it.sum != computed+gen {
			t.Fatalf("iteration tokens sum %v, want local_compute %v + generation %v", it.sum, computed, gen)
		} else if !ok && gen != 0 {
			t.Fatalf("%v generation tokens without an iteration tokens observation", gen)
		}
	})
}
