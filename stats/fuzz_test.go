package stats_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

var sentinels = []error{
	stats.ErrNegative, stats.ErrNotFinite, stats.ErrOutOfRange, stats.ErrOverflow,
	stats.ErrCachedExceedsPrompt, stats.ErrUnknownSource, stats.ErrUnknownFinishReason,
	stats.ErrUnknownSleepState, stats.ErrInvalidLabel, stats.ErrOutOfOrder, stats.ErrFinished,
}

func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func FuzzSplitPrompt(f *testing.F) {
	const maxInt, minInt = math.MaxInt64, math.MinInt64
	f.Add(int64(1000), int64(0), int64(1000))
	f.Add(int64(512), int64(512), int64(0))
	f.Add(int64(1000), int64(256), int64(512))
	f.Add(int64(0), int64(0), int64(0))
	f.Add(int64(-1), int64(0), int64(0))
	f.Add(int64(10), int64(-1), int64(0))
	f.Add(int64(10), int64(0), int64(-1))
	f.Add(int64(10), int64(6), int64(5))
	f.Add(int64(maxInt), int64(maxInt), int64(1))
	f.Add(int64(maxInt), int64(maxInt-1), int64(1))
	f.Add(int64(minInt), int64(minInt), int64(minInt))
	f.Fuzz(func(t *testing.T, prompt, local, external int64) {
		p, err := stats.SplitPrompt(prompt, local, external)
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("SplitPrompt(%d, %d, %d): error %v matches no sentinel", prompt, local, external, err)
			}
			if p != (stats.PromptTokens{}) {
				t.Fatalf("SplitPrompt(%d, %d, %d) = %+v with an error", prompt, local, external, p)
			}
			return
		}
		if p.Computed < 0 || p.LocalCacheHit < 0 || p.ExternalKVTransfer < 0 {
			t.Fatalf("SplitPrompt(%d, %d, %d) = %+v: negative count", prompt, local, external, p)
		}
		if p.Total() != prompt || p.Cached() != local+external || p.Computed != prompt-local-external {
			t.Fatalf("SplitPrompt(%d, %d, %d) = %+v: Total %d, Cached %d", prompt, local, external, p, p.Total(), p.Cached())
		}
		if p.LocalCacheHit != local || p.ExternalKVTransfer != external {
			t.Fatalf("SplitPrompt(%d, %d, %d) = %+v: cached sources moved", prompt, local, external, p)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("SplitPrompt(%d, %d, %d) = %+v: Validate: %v", prompt, local, external, p, err)
		}
	})
}

// Fuzz timeline operations: each event is 5 bytes, an op, a big-endian int16
// time delta in milliseconds (negative deltas make out-of-order events) and
// two int8 arguments.
const (
	opQueued byte = iota
	opScheduled
	opOutput
	opHugeOutput // Output of MaxInt64-a tokens
	opPreempted
	opFinish        // reason b%7: 5 and 6 are unknown
	opHugeScheduled // Scheduled with MaxInt64 local cached
	opOutput2
	opTokenized // Tokenized with a prompt length of a
	numOps
)

type fuzzEvent struct {
	op    byte
	delta int16
	a, b  int8
}

func encodeEvents(events ...fuzzEvent) []byte {
	var out []byte
	for _, e := range events {
		out = append(out, e.op)
		out = binary.BigEndian.AppendUint16(out, uint16(e.delta))
		out = append(out, byte(e.a), byte(e.b))
	}
	return out
}

func FuzzTimeline(f *testing.F) {
	// P/D decode node: whole prompt from the connector, three outputs.
	f.Add(uint8(200), encodeEvents(
		fuzzEvent{opQueued, 10, 0, 0}, fuzzEvent{opScheduled, 40, 0, 100},
		fuzzEvent{opOutput, 200, 1, 0}, fuzzEvent{opOutput, 50, 1, 0}, fuzzEvent{opOutput2, 50, 3, 0},
		fuzzEvent{opFinish, 0, 0, 0},
	))
	// Preemptions before and after the first output.
	f.Add(uint8(100), encodeEvents(
		fuzzEvent{opQueued, 5, 0, 0}, fuzzEvent{opScheduled, 5, 0, 0}, fuzzEvent{opPreempted, 90, 0, 0},
		fuzzEvent{opScheduled, 200, 64, 0}, fuzzEvent{opOutput, 200, 1, 0}, fuzzEvent{opPreempted, 10, 0, 0},
		fuzzEvent{opScheduled, 10, 100, 1}, fuzzEvent{opOutput, 10, 2, 0}, fuzzEvent{opFinish, 10, 0, 1},
	))
	// Errors: out of order, bad counts, unknown reason, event after finish.
	f.Add(uint8(50), encodeEvents(
		fuzzEvent{opOutput, 1, 1, 0}, fuzzEvent{opQueued, 10, 0, 0}, fuzzEvent{opScheduled, -5, 0, 0},
		fuzzEvent{opScheduled, 10, 40, 20}, fuzzEvent{opScheduled, 0, -1, 0}, fuzzEvent{opScheduled, 0, 10, 10},
		fuzzEvent{opOutput, 10, 0, 0}, fuzzEvent{opOutput, 0, -3, 0}, fuzzEvent{opFinish, 0, 0, 6},
		fuzzEvent{opOutput, 10, 1, 0}, fuzzEvent{opFinish, 10, 0, 2}, fuzzEvent{opOutput, 10, 1, 0},
		fuzzEvent{opFinish, 10, 0, 0},
	))
	// Overflows of the generated tokens and of the cached tokens.
	f.Add(uint8(10), encodeEvents(
		fuzzEvent{opQueued, 0, 0, 0}, fuzzEvent{opHugeScheduled, 0, 0, 1}, fuzzEvent{opScheduled, 0, 0, 0},
		fuzzEvent{opHugeOutput, 100, 0, 0}, fuzzEvent{opOutput, 100, 1, 0}, fuzzEvent{opPreempted, 1, 0, 0},
		fuzzEvent{opHugeScheduled, 1, 0, 0}, fuzzEvent{opOutput, 1, 1, 0},
	))
	f.Add(uint8(0), []byte{})
	// A prompt length known after the arrival: refused events before it,
	// a refused second Tokenized, then the request runs.
	f.Add(uint8(0), encodeEvents(
		fuzzEvent{opQueued, 3, 0, 0}, fuzzEvent{opScheduled, 2, 0, 0}, fuzzEvent{opTokenized, 1, 0, 0},
		fuzzEvent{opTokenized, 4, 90, 0}, fuzzEvent{opTokenized, 1, 10, 0}, fuzzEvent{opScheduled, 5, 30, 0},
		fuzzEvent{opOutput, 40, 1, 0}, fuzzEvent{opOutput, 10, 2, 0}, fuzzEvent{opFinish, 5, 0, 0},
	))
	// Finished before its prompt length was known.
	f.Add(uint8(0), encodeEvents(fuzzEvent{opQueued, 3, 0, 0}, fuzzEvent{opFinish, 20, 0, 3}))

	f.Fuzz(func(t *testing.T, prompt uint8, data []byte) {
		// A prompt of 0 is not known yet: opTokenized sets promptLen.
		req := stats.Request{Arrival: t0, PromptTokens: int64(prompt)}
		promptLen := int64(prompt)
		tl := stats.NewTimeline(req)
		if err := tl.Err(); err != nil {
			t.Fatal(err)
		}
		// ref receives only the calls that succeeded on tl: if a failed call
		// changed tl, the two diverge.
		ref := stats.NewTimeline(req)
		if err := ref.Err(); err != nil {
			t.Fatal(err)
		}

		var (
			now, latest = t0, t0
			it          stats.Iteration
			firstOut    *stats.Output
			generated   int64
			finished    *stats.FinishedRequest
		)
		for ; len(data) >= 5; data = data[5:] {
			op := data[0] % numOps
			delta := int16(binary.BigEndian.Uint16(data[1:3]))
			a, b := int64(int8(data[3])), int64(int8(data[4]))
			now = now.Add(time.Duration(delta) * time.Millisecond)
			if now.After(latest) {
				latest = now
			}

			var call func(*stats.Timeline) (stats.Output, stats.FinishedRequest, error)
			var tokens int64
			switch op {
			case opQueued:
				call = func(x *stats.Timeline) (stats.Output, stats.FinishedRequest, error) {
					return stats.Output{}, stats.FinishedRequest{}, eventtest.Err(x.Refused, func() { x.Queued(now) })
				}
			case opScheduled, opHugeScheduled:
				local := a
				if op == opHugeScheduled {
					local = math.MaxInt64
				}
				call = func(x *stats.Timeline) (stats.Output, stats.FinishedRequest, error) {
					return stats.Output{}, stats.FinishedRequest{}, eventtest.Err(x.Refused, func() { x.Scheduled(now, local, b) })
				}
			case opOutput, opOutput2, opHugeOutput:
				tokens = a
				if op == opHugeOutput {
					tokens = math.MaxInt64 - int64(uint8(a))
				}
				call = func(x *stats.Timeline) (stats.Output, stats.FinishedRequest, error) {
					o, err := x.Output(now, tokens)
					return o, stats.FinishedRequest{}, err
				}
			case opPreempted:
				call = func(x *stats.Timeline) (stats.Output, stats.FinishedRequest, error) {
					return stats.Output{}, stats.FinishedRequest{}, x.Preempted(now)
				}
			case opTokenized:
				call = func(x *stats.Timeline) (stats.Output, stats.FinishedRequest, error) {
					return stats.Output{}, stats.FinishedRequest{}, eventtest.Err(x.Refused, func() { x.Tokenized(now, a) })
				}
			case opFinish:
				reason := stats.FinishReason(uint8(b) % 7)
				call = func(x *stats.Timeline) (stats.Output, stats.FinishedRequest, error) {
					fr, err := x.Finish(now, reason)
					return stats.Output{}, fr, err
				}
			}

			o, fr, err := call(tl)
			if err != nil {
				if !isSentinel(err) {
					t.Fatalf("op %d: error %v matches no sentinel", op, err)
				}
				if o != (stats.Output{}) || fr != (stats.FinishedRequest{}) {
					t.Fatalf("op %d: non-zero results %+v, %+v with error %v", op, o, fr, err)
				}
				if tl.Generated() != ref.Generated() || tl.Done() != ref.Done() {
					t.Fatalf("op %d: failed call changed the timeline: %v", op, err)
				}
				continue
			}
			refO, refF, refErr := call(ref)
			if refErr != nil || refO != o || refF != fr {
				t.Fatalf("op %d: timelines diverged: %+v %+v %v vs %+v %+v %v", op, o, fr, err, refO, refF, refErr)
			}

			switch op {
			case opTokenized:
				if promptLen != 0 || a < 1 {
					t.Fatalf("Tokenized(%d) accepted with the prompt length at %d", a, promptLen)
				}
				promptLen = a
			case opOutput, opOutput2, opHugeOutput:
				checkFuzzOutput(t, o, tokens, promptLen, firstOut != nil)
				if o.First {
					firstOut = &o
				}
				generated += tokens
				if tl.Generated() != generated {
					t.Fatalf("Generated() = %d, want %d", tl.Generated(), generated)
				}
				// AddOutput only appends to the slices: their lengths and
				// the counts are the iteration's state.
				type state struct {
					p           stats.PromptTokens
					gen         int64
					nTTFT, nITL int
				}
				before := state{it.PromptTokens, it.GenerationTokens, len(it.TTFT), len(it.ITL)}
				if err := it.AddOutput(o); err != nil {
					if !errors.Is(err, stats.ErrOverflow) {
						t.Fatalf("AddOutput(%+v): %v, want ErrOverflow", o, err)
					}
					if after := (state{it.PromptTokens, it.GenerationTokens, len(it.TTFT), len(it.ITL)}); after != before {
						t.Fatalf("failed AddOutput changed the iteration: %+v, was %+v", after, before)
					}
					it.Reset() // start the next step
				}
				checkFuzzIteration(t, &it)
			case opFinish:
				finished = &fr
				checkFuzzFinished(t, fr, promptLen, generated, firstOut)
			}
		}

		// Finish both the same way: a change that a failed call left in tl
		// shows as a difference here.
		end := latest.Add(time.Second)
		f1, err1 := tl.Finish(end, stats.FinishStop)
		f2, err2 := ref.Finish(end, stats.FinishStop)
		if f1 != f2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("final Finish differs: %+v, %v vs %+v, %v", f1, err1, f2, err2)
		}
		if finished != nil {
			if !errors.Is(err1, stats.ErrFinished) {
				t.Fatalf("Finish after Finish = %v, want ErrFinished", err1)
			}
			return
		}
		if err1 != nil {
			t.Fatalf("final Finish: %v", err1)
		}
		checkFuzzFinished(t, f1, promptLen, generated, firstOut)
	})
}

func checkFuzzOutput(t *testing.T, o stats.Output, tokens, prompt int64, hadFirst bool) {
	t.Helper()
	if o.GenerationTokens != tokens || tokens < 1 {
		t.Fatalf("output %+v for %d tokens", o, tokens)
	}
	for _, v := range [...]float64{o.TTFT, o.ITL} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > stats.MaxSeconds {
			t.Fatalf("output latency %v", v)
		}
	}
	if o.First == hadFirst {
		t.Fatalf("output First = %v after a first output: %v", o.First, hadFirst)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("output %+v: Validate: %v", o, err)
	}
	p := o.PromptTokens
	if !o.First {
		if p != (stats.PromptTokens{}) {
			t.Fatalf("later output carries prompt tokens %+v", p)
		}
		return
	}
	if p.Computed < 0 || p.LocalCacheHit < 0 || p.ExternalKVTransfer < 0 || p.Total() != prompt {
		t.Fatalf("first output's prompt split %+v does not sum to %d", p, prompt)
	}
}

func checkFuzzIteration(t *testing.T, it *stats.Iteration) {
	t.Helper()
	p := it.PromptTokens
	if p.Computed < 0 || p.LocalCacheHit < 0 || p.ExternalKVTransfer < 0 || it.GenerationTokens < 0 {
		t.Fatalf("iteration has a negative count: %+v", it)
	}
	if it.TokensDone() != p.Computed+it.GenerationTokens || it.TokensDone() < 0 {
		t.Fatalf("TokensDone() = %d, want %d + %d", it.TokensDone(), p.Computed, it.GenerationTokens)
	}
	if err := it.Validate(); err != nil {
		t.Fatalf("iteration Validate: %v", err)
	}
}

func checkFuzzFinished(t *testing.T, f stats.FinishedRequest, prompt, generated int64, first *stats.Output) {
	t.Helper()
	if err := f.Validate(); err != nil {
		t.Fatalf("finished %+v: Validate: %v", f, err)
	}
	if f.PromptTokens != prompt || f.GenerationTokens != generated || f.N != 1 || f.MaxGenerationTokens != generated || f.ParentPending {
		t.Fatalf("finished %+v, want prompt %d, generation %d, N 1", f, prompt, generated)
	}
	if first != nil && f.PrefillComputedTokens != first.PromptTokens.Computed {
		t.Fatalf("finished PrefillComputedTokens = %d, first output computed %d", f.PrefillComputedTokens, first.PromptTokens.Computed)
	}
	if !near(f.InferenceTime, f.PrefillTime+f.DecodeTime) {
		t.Fatalf("inference %v != prefill %v + decode %v", f.InferenceTime, f.PrefillTime, f.DecodeTime)
	}
	if f.E2ELatency+1e-9 < f.QueueTime+f.InferenceTime {
		t.Fatalf("E2E %v < queue %v + inference %v", f.E2ELatency, f.QueueTime, f.InferenceTime)
	}
	if generated <= 1 && f.TimePerOutputToken != 0 {
		t.Fatalf("TPOT = %v with %d tokens", f.TimePerOutputToken, generated)
	}
}
