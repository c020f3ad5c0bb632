package stats_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

// first is the first output of a request with the given prompt split.
func first(computed, localHit, external int64, tokens int64, ttft float64) stats.Output {
	return stats.Output{
		First:            true,
		PromptTokens:     stats.PromptTokens{Computed: computed, LocalCacheHit: localHit, ExternalKVTransfer: external},
		GenerationTokens: tokens,
		TTFT:             ttft,
	}
}

// decode is a later output of a request.
func decode(tokens int64, itl float64) stats.Output {
	return stats.Output{GenerationTokens: tokens, ITL: itl}
}

// TestIterationTokensDoneTheRule is THE RULE (vLLM PR #43346):
// vllm:iteration_tokens_total observes computed prompt tokens + generation
// tokens. On a P/D decode node, 3 requests arrive with their whole prompt's KV
// transferred (500 + 700 + 300 tokens) and emit their first token while 10
// running requests emit one token each. The node computed no prompt token, so
// the step did 0 + 13 = 13 tokens of work, not 1500 + 13; the prompt total
// (vllm:prompt_tokens) still counts all 1500, under external_kv_transfer.
func TestIterationTokensDoneTheRule(t *testing.T) {
	var it stats.Iteration
	outs := []stats.Output{
		first(0, 0, 500, 1, 0.2),
		first(0, 0, 700, 1, 0.3),
		first(0, 0, 300, 1, 0.1),
	}
	for range 10 {
		outs = append(outs, decode(1, 0.02))
	}
	for _, o := range outs {
		if err := it.AddOutput(o); err != nil {
			t.Fatal(err)
		}
	}
	if got := it.TokensDone(); got != 13 {
		t.Errorf("TokensDone() = %d, want 13 (0 computed + 13 generated)", got)
	}
	if want := (stats.PromptTokens{ExternalKVTransfer: 1500}); it.PromptTokens != want {
		t.Errorf("PromptTokens = %+v, want %+v", it.PromptTokens, want)
	}
	if got := it.PromptTokens.Total(); got != 1500 {
		t.Errorf("PromptTokens.Total() = %d, want 1500", got)
	}
	if it.GenerationTokens != 13 {
		t.Errorf("GenerationTokens = %d, want 13", it.GenerationTokens)
	}
	if !slices.Equal(it.TTFT, []float64{0.2, 0.3, 0.1}) {
		t.Errorf("TTFT = %v, want [0.2 0.3 0.1]", it.TTFT)
	}
	if len(it.ITL) != 10 {
		t.Errorf("len(ITL) = %d, want 10", len(it.ITL))
	}
	if err := it.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

// TestIterationPrefillStep: two requests finish prefill with partial cache
// hits (1000 with 600 cached, 2000 with 1024 cached) while five decode, one of
// them with a 3-token speculative output.
func TestIterationPrefillStep(t *testing.T) {
	var it stats.Iteration
	outs := []stats.Output{
		first(400, 600, 0, 1, 0.5),
		first(976, 1024, 0, 1, 0.75),
		decode(1, 0.05), decode(1, 0.05), decode(1, 0.05), decode(1, 0.05),
		decode(3, 0.1),
	}
	for _, o := range outs {
		if err := it.AddOutput(o); err != nil {
			t.Fatal(err)
		}
	}
	want := stats.PromptTokens{Computed: 1376, LocalCacheHit: 1624}
	if it.PromptTokens != want {
		t.Errorf("PromptTokens = %+v, want %+v", it.PromptTokens, want)
	}
	if it.PromptTokens.Total() != 3000 || it.PromptTokens.Cached() != 1624 {
		t.Errorf("Total, Cached = %d, %d; want 3000, 1624", it.PromptTokens.Total(), it.PromptTokens.Cached())
	}
	if it.GenerationTokens != 9 { // 1 + 1 + 4x1 + 3
		t.Errorf("GenerationTokens = %d, want 9", it.GenerationTokens)
	}
	if got := it.TokensDone(); got != 1385 { // 1376 computed + 9 generated
		t.Errorf("TokensDone() = %d, want 1385", got)
	}
	if !slices.Equal(it.TTFT, []float64{0.5, 0.75}) {
		t.Errorf("TTFT = %v, want [0.5 0.75]", it.TTFT)
	}
	// One ITL per decode output: the 3-token output is one sample.
	if !slices.Equal(it.ITL, []float64{0.05, 0.05, 0.05, 0.05, 0.1}) {
		t.Errorf("ITL = %v, want [0.05 0.05 0.05 0.05 0.1]", it.ITL)
	}
}

// snapshot copies an iteration deeply, to compare it after a failed call.
func snapshot(it stats.Iteration) stats.Iteration {
	it.TTFT = slices.Clone(it.TTFT)
	it.ITL = slices.Clone(it.ITL)
	it.Finished = slices.Clone(it.Finished)
	return it
}

func TestIterationAddOutputErrors(t *testing.T) {
	const maxInt = math.MaxInt64
	tests := []struct {
		name     string
		start    []stats.Output // added first, must succeed
		bad      stats.Output
		sentinel error
		mention  string
	}{
		{
			name:     "prompt tokens on a non-first output",
			start:    []stats.Output{first(10, 0, 0, 1, 0.1)},
			bad:      stats.Output{PromptTokens: stats.PromptTokens{Computed: 5}, GenerationTokens: 1, ITL: 0.1},
			sentinel: stats.ErrOutOfOrder, mention: "PromptTokens",
		},
		{
			name:     "negative prompt tokens",
			bad:      first(-1, 0, 0, 1, 0.1),
			sentinel: stats.ErrNegative, mention: "PromptTokens.Computed = -1",
		},
		{
			name:     "negative generation tokens",
			bad:      decode(-2, 0.1),
			sentinel: stats.ErrNegative, mention: "GenerationTokens = -2",
		},
		{
			name:     "NaN latency",
			bad:      decode(1, math.NaN()),
			sentinel: stats.ErrNotFinite, mention: "ITL = NaN",
		},
		{
			name:     "negative latency",
			bad:      decode(1, -0.5),
			sentinel: stats.ErrNegative, mention: "ITL = -0.5",
		},
		{
			name:     "generation tokens overflow",
			start:    []stats.Output{decode(maxInt-1, 0.1)},
			bad:      decode(2, 0.1),
			sentinel: stats.ErrOverflow, mention: "GenerationTokens",
		},
		{
			name:     "prompt tokens overflow",
			start:    []stats.Output{first(0, maxInt-1, 0, 1, 0.1)},
			bad:      first(0, 2, 0, 1, 0.1),
			sentinel: stats.ErrOverflow, mention: "PromptTokens.LocalCacheHit",
		},
		{
			// Computed maxInt-2 plus generated 1 fits; 2 more tokens do not.
			name:     "TokensDone overflows",
			start:    []stats.Output{first(maxInt-2, 0, 0, 1, 0.1)},
			bad:      decode(2, 0.1),
			sentinel: stats.ErrOverflow, mention: "TokensDone",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var it stats.Iteration
			for _, o := range tt.start {
				if err := it.AddOutput(o); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(it)
			wantErr(t, it.AddOutput(tt.bad), tt.sentinel, tt.mention)
			if !reflect.DeepEqual(it, before) {
				t.Errorf("iteration changed by a failed AddOutput:\n%+v\nwas\n%+v", it, before)
			}
		})
	}
}

// validFinished is a FinishedRequest that passes Validate.
func validFinished() stats.FinishedRequest {
	return stats.FinishedRequest{
		Reason: stats.FinishStop, PromptTokens: 100, GenerationTokens: 4, PrefillComputedTokens: 60,
		MaxTokens: 16, N: 1, MaxGenerationTokens: 4,
		E2ELatency: 1, QueueTime: 0.1, PrefillTime: 0.2, InferenceTime: 0.8, DecodeTime: 0.6, TimePerOutputToken: 0.2,
	}
}

func TestIterationAddFinished(t *testing.T) {
	var it stats.Iteration
	f := validFinished()
	if err := it.AddFinished(f); err != nil {
		t.Fatal(err)
	}
	bad := validFinished()
	bad.E2ELatency = math.NaN()
	wantErr(t, it.AddFinished(bad), stats.ErrNotFinite, "Finished.E2ELatency")
	if len(it.Finished) != 1 || it.Finished[0] != f {
		t.Errorf("Finished = %+v, want only the valid request", it.Finished)
	}
}

func TestIterationValidate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name     string
		mutate   func(it *stats.Iteration)
		sentinel error
		mention  string
	}{
		{"valid", func(*stats.Iteration) {}, nil, ""},
		{"TTFT NaN", func(it *stats.Iteration) { it.TTFT = []float64{0.1, nan} }, stats.ErrNotFinite, "TTFT[1] = NaN"},
		{"TTFT negative", func(it *stats.Iteration) { it.TTFT = []float64{-0.25} }, stats.ErrNegative, "TTFT[0] = -0.25"},
		{"ITL +Inf", func(it *stats.Iteration) { it.ITL = []float64{0.1, 0.2, inf} }, stats.ErrNotFinite, "ITL[2] = +Inf"},
		{"ITL -Inf", func(it *stats.Iteration) { it.ITL = []float64{0.1, 0.2, -inf} }, stats.ErrNotFinite, "ITL[2] = -Inf"},
		{"ITL negative", func(it *stats.Iteration) { it.ITL = []float64{0.1, 0.2, -0.5} }, stats.ErrNegative, "ITL[2] = -0.5"},
		{"Finished NaN", func(it *stats.Iteration) { it.Finished[1].DecodeTime = nan }, stats.ErrNotFinite, "Finished[1].DecodeTime = NaN"},
		{"Finished +Inf", func(it *stats.Iteration) { it.Finished[0].QueueTime = inf }, stats.ErrNotFinite, "Finished[0].QueueTime = +Inf"},
		{"Finished -Inf", func(it *stats.Iteration) { it.Finished[0].PrefillTime = -inf }, stats.ErrNotFinite, "Finished[0].PrefillTime = -Inf"},
		{"Finished negative", func(it *stats.Iteration) { it.Finished[1].E2ELatency = -1 }, stats.ErrNegative, "Finished[1].E2ELatency = -1"},
		{"negative prompt tokens", func(it *stats.Iteration) { it.PromptTokens.ExternalKVTransfer = -4 }, stats.ErrNegative, "PromptTokens.ExternalKVTransfer = -4"},
		{"negative generation tokens", func(it *stats.Iteration) { it.GenerationTokens = -1 }, stats.ErrNegative, "GenerationTokens = -1"},
		{"negative preemptions", func(it *stats.Iteration) { it.Preemptions = -1 }, stats.ErrNegative, "Preemptions = -1"},
		{"negative corrupted requests", func(it *stats.Iteration) { it.CorruptedRequests = -1 }, stats.ErrNegative, "CorruptedRequests = -1"},
		{"TokensDone overflows", func(it *stats.Iteration) { it.GenerationTokens = math.MaxInt64 }, stats.ErrOverflow, "TokensDone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := stats.Iteration{
				PromptTokens:     stats.PromptTokens{Computed: 10, LocalCacheHit: 20},
				GenerationTokens: 3,
				Preemptions:      1,
				TTFT:             []float64{0.1},
				ITL:              []float64{0.02, 0.03},
				Finished:         []stats.FinishedRequest{validFinished(), validFinished()},
			}
			tt.mutate(&it)
			err := it.Validate()
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			wantErr(t, err, tt.sentinel, tt.mention)
		})
	}
}

func TestIterationReset(t *testing.T) {
	it := stats.Iteration{
		PromptTokens:      stats.PromptTokens{Computed: 1, LocalCacheHit: 2, ExternalKVTransfer: 3},
		GenerationTokens:  4,
		Preemptions:       5,
		CorruptedRequests: 6,
		TTFT:              make([]float64, 2, 8),
		ITL:               make([]float64, 3, 16),
		Finished:          make([]stats.FinishedRequest, 1, 4),
	}
	it.Reset()
	if it.PromptTokens != (stats.PromptTokens{}) || it.GenerationTokens != 0 || it.Preemptions != 0 || it.CorruptedRequests != 0 {
		t.Errorf("counts after Reset = %+v, want zero", it)
	}
	if len(it.TTFT) != 0 || len(it.ITL) != 0 || len(it.Finished) != 0 {
		t.Errorf("lengths after Reset = %d, %d, %d; want 0", len(it.TTFT), len(it.ITL), len(it.Finished))
	}
	if cap(it.TTFT) != 8 || cap(it.ITL) != 16 || cap(it.Finished) != 4 {
		t.Errorf("capacities after Reset = %d, %d, %d; want 8, 16, 4", cap(it.TTFT), cap(it.ITL), cap(it.Finished))
	}
	if it.TokensDone() != 0 {
		t.Errorf("TokensDone() after Reset = %d, want 0", it.TokensDone())
	}

	var empty stats.Iteration
	empty.Reset()
	if !reflect.DeepEqual(empty, stats.Iteration{}) {
		t.Errorf("Reset of a zero Iteration = %+v, want zero", empty)
	}
}

func TestOutputValidate(t *testing.T) {
	tests := []struct {
		name     string
		o        stats.Output
		sentinel error
		mention  string
	}{
		{"first output", first(1, 2, 3, 1, 0.5), nil, ""},
		{"later output", decode(3, 0.01), nil, ""},
		{"prompt on a later output", stats.Output{PromptTokens: stats.PromptTokens{ExternalKVTransfer: 1}, GenerationTokens: 1}, stats.ErrOutOfOrder, "PromptTokens"},
		{"negative prompt", first(0, -1, 0, 1, 0.5), stats.ErrNegative, "PromptTokens.LocalCacheHit = -1"},
		{"negative tokens", decode(-1, 0.5), stats.ErrNegative, "GenerationTokens = -1"},
		{"infinite latency", decode(1, math.Inf(1)), stats.ErrNotFinite, "ITL = +Inf"},
		{"absurd TTFT", first(1, 0, 0, 1, 1e308), stats.ErrOutOfRange, "TTFT = 1e+308"},
		{"TTFT on a later output", stats.Output{GenerationTokens: 1, TTFT: 0.5}, stats.ErrOutOfOrder, "TTFT = 0.5"},
		{"ITL on the first output", stats.Output{First: true, GenerationTokens: 1, TTFT: 0.5, ITL: 0.1}, stats.ErrOutOfOrder, "ITL = 0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			wantErr(t, err, tt.sentinel, tt.mention)
		})
	}
}

// TestIterationFromTimelines: one request's speculative output of 3 tokens
// adds 3 generation tokens and one ITL sample to its step.
func TestIterationFromTimelines(t *testing.T) {
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 64})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	outs, _ := run(t, tl, []event{queued(0), scheduled(10, 0, 0), output(40, 1), output(100, 3)})
	var step1, step2 stats.Iteration
	if err := step1.AddOutput(outs[0]); err != nil {
		t.Fatal(err)
	}
	if err := step2.AddOutput(outs[1]); err != nil {
		t.Fatal(err)
	}
	if step1.TokensDone() != 65 || len(step1.TTFT) != 1 || len(step1.ITL) != 0 { // 64 computed + 1
		t.Errorf("step 1: TokensDone %d, %d TTFT, %d ITL; want 65, 1, 0", step1.TokensDone(), len(step1.TTFT), len(step1.ITL))
	}
	if step2.GenerationTokens != 3 || step2.TokensDone() != 3 || !slices.Equal(step2.ITL, []float64{0.06}) || len(step2.TTFT) != 0 {
		t.Errorf("step 2: generation %d, TokensDone %d, ITL %v, %d TTFT; want 3, 3, [0.06], 0",
			step2.GenerationTokens, step2.TokensDone(), step2.ITL, len(step2.TTFT))
	}
}

// A Timeline's kept refusal moves to the first step its request takes part
// in, once: later Output, Preempt and Finish calls leave it behind.
func TestIterationTakesKeptRefusalOnce(t *testing.T) {
	tl := stats.NewTimeline(stats.Request{Arrival: ms(10), PromptTokens: 8})
	tl.Scheduled(ms(5), 0, 0) // before the arrival: refused, kept
	tl.Scheduled(ms(11), 0, 0)
	var total int64
	var step stats.Iteration
	for i, do := range []func(){
		func() { step.Output(tl, ms(20), 1) },
		func() { step.Output(tl, ms(30), 1) },
		func() { step.Preempt(tl, ms(40)); tl.Scheduled(ms(41), 0, 0) },
		func() { step.Output(tl, ms(50), 1) },
		func() { step.Finish(tl, ms(60), stats.FinishStop) },
	} {
		do()
		if got := step.Refused().Count(stats.KindScheduled); got != 0 && i > 0 {
			t.Errorf("step %d took %d scheduled refusals again", i, got)
		}
		total += step.Refused().Total()
		step.Reset()
	}
	if total != 1 || tl.Refused().Total() != 0 {
		t.Errorf("%d refusals taken, %d left on the Timeline; want 1, 0", total, tl.Refused().Total())
	}
}

// testKey is the key of the contexts these tests tell apart.
type testKey struct{}

// Context lists must be empty or parallel to their values; Reset empties
// them, keeping the storage and dropping the contexts.
func TestIterationContexts(t *testing.T) {
	ctx := context.WithValue(context.Background(), testKey{}, 1)
	it := stats.Iteration{GenerationTokens: 2, TTFT: []float64{0.1}, ITL: []float64{0.01},
		TTFTContexts: []context.Context{ctx, nil}}
	if err := it.Validate(); !errors.Is(err, stats.ErrOutOfRange) {
		t.Errorf("TTFTContexts longer than TTFT: %v, want ErrOutOfRange", err)
	}
	it.TTFTContexts = it.TTFTContexts[:1]
	it.ITLContexts = []context.Context{nil, nil}
	if err := it.Validate(); !errors.Is(err, stats.ErrOutOfRange) {
		t.Errorf("ITLContexts longer than ITL: %v, want ErrOutOfRange", err)
	}
	it.ITLContexts = nil
	if err := it.Validate(); err != nil {
		t.Fatal(err)
	}
	backing := it.TTFTContexts[:1]
	it.Reset()
	if len(it.TTFTContexts) != 0 || cap(it.TTFTContexts) == 0 || backing[0] != nil {
		t.Errorf("Reset: TTFTContexts len %d cap %d, backing[0] %v; want empty, storage kept, context dropped",
			len(it.TTFTContexts), cap(it.TTFTContexts), backing[0])
	}
}

// A Timeline passes its request's context on to every output and to the
// finished request.
func TestTimelineCarriesContext(t *testing.T) {
	ctx := context.WithValue(context.Background(), testKey{}, 1)
	t0 := time.Unix(100, 0)
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 1, Context: ctx})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Scheduled(t0, 0, 0) }); err != nil {
		t.Fatal(err)
	}
	var it stats.Iteration
	for i := 1; i <= 2; i++ {
		if err := eventtest.Err(it.Refused, func() { it.Output(tl, t0.Add(time.Duration(i)*time.Second), 1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := eventtest.Err(it.Refused, func() { it.Finish(tl, t0.Add(3*time.Second), stats.FinishStop) }); err != nil {
		t.Fatal(err)
	}
	if len(it.TTFTContexts) != 1 || it.TTFTContexts[0] != ctx || len(it.ITLContexts) != 1 || it.ITLContexts[0] != ctx ||
		it.Finished[0].Context != ctx {
		t.Errorf("contexts not passed on: TTFT %v ITL %v finished %v", it.TTFTContexts, it.ITLContexts, it.Finished[0].Context)
	}
}
