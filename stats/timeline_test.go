package stats_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

// mustNil returns a function that fails the test on a non-nil error.
func mustNil(t *testing.T) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// t0 is the arrival time of the scenarios; events are given in milliseconds
// after it.
var t0 = time.Unix(1000, 0)

func ms(n int64) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// near reports whether two durations in seconds agree within 1e-9.
func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9 }

type eventKind uint8

const (
	evQueued eventKind = iota
	evScheduled
	evOutput
	evPreempted
	evFinish
)

// event is one call on a Timeline.
type event struct {
	kind   eventKind
	at     time.Time
	a, b   int64 // Scheduled: local and external cached; Output: tokens
	reason stats.FinishReason
}

func queued(at int64) event { return event{kind: evQueued, at: ms(at)} }
func scheduled(at, local, external int64) event {
	return event{kind: evScheduled, at: ms(at), a: local, b: external}
}
func output(at, tokens int64) event { return event{kind: evOutput, at: ms(at), a: tokens} }
func preempted(at int64) event      { return event{kind: evPreempted, at: ms(at)} }
func finish(at int64, r stats.FinishReason) event {
	return event{kind: evFinish, at: ms(at), reason: r}
}

func (e event) name() string {
	return [...]string{"Queued", "Scheduled", "Output", "Preempted", "Finish"}[e.kind]
}

func (e event) String() string {
	return fmt.Sprintf("%s(%s, %d, %d, %d)", e.name(), e.at.Sub(t0), e.a, e.b, e.reason)
}

// apply calls e on tl and returns what the call returned.
func apply(tl *stats.Timeline, e event) (stats.Output, stats.FinishedRequest, error) {
	switch e.kind {
	case evQueued:
		return stats.Output{}, stats.FinishedRequest{}, eventtest.Err(tl.Refused, func() { tl.Queued(e.at) })
	case evScheduled:
		return stats.Output{}, stats.FinishedRequest{}, eventtest.Err(tl.Refused, func() { tl.Scheduled(e.at, e.a, e.b) })
	case evOutput:
		o, err := tl.Output(e.at, e.a)
		return o, stats.FinishedRequest{}, err
	case evPreempted:
		return stats.Output{}, stats.FinishedRequest{}, tl.Preempted(e.at)
	default:
		f, err := tl.Finish(e.at, e.reason)
		return stats.Output{}, f, err
	}
}

// run applies events that must all succeed and returns the outputs and the
// finished request (zero if there is no finish event).
func run(t *testing.T, tl *stats.Timeline, events []event) ([]stats.Output, stats.FinishedRequest) {
	t.Helper()
	var outs []stats.Output
	var fin stats.FinishedRequest
	for _, e := range events {
		o, f, err := apply(tl, e)
		if err != nil {
			t.Fatalf("%v: %v", e, err)
		}
		switch e.kind {
		case evOutput:
			outs = append(outs, o)
		case evFinish:
			fin = f
		}
	}
	return outs, fin
}

func checkOutputs(t *testing.T, got, want []stats.Output) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.First != w.First || g.PromptTokens != w.PromptTokens || g.GenerationTokens != w.GenerationTokens || !near(g.TTFT, w.TTFT) || !near(g.ITL, w.ITL) {
			t.Errorf("output %d = %+v, want %+v", i, g, w)
		}
	}
}

func checkFinished(t *testing.T, got, want stats.FinishedRequest) {
	t.Helper()
	g, w := got, want
	ints := g.Reason == w.Reason && g.PromptTokens == w.PromptTokens && g.GenerationTokens == w.GenerationTokens &&
		g.PrefillComputedTokens == w.PrefillComputedTokens && g.MaxTokens == w.MaxTokens &&
		g.N == w.N && g.MaxGenerationTokens == w.MaxGenerationTokens && g.ParentPending == w.ParentPending &&
		g.Preemptions == w.Preemptions
	floats := near(g.E2ELatency, w.E2ELatency) && near(g.QueueTime, w.QueueTime) &&
		near(g.PrefillTime, w.PrefillTime) && near(g.InferenceTime, w.InferenceTime) &&
		near(g.DecodeTime, w.DecodeTime) && near(g.TimePerOutputToken, w.TimePerOutputToken)
	if !ints || !floats {
		t.Errorf("finished =\n%+v\nwant\n%+v", g, w)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("finished.Validate() = %v", err)
	}
}

func TestTimelineScenarios(t *testing.T) {
	tests := []struct {
		name   string
		req    stats.Request
		events []event
		outs   []stats.Output
		want   stats.FinishedRequest
	}{
		{
			// The prefill node computed the prompt; its KV arrives through the
			// connector, so this node computes none of it.
			name: "P/D decode node",
			req:  stats.Request{Arrival: t0, PromptTokens: 1000},
			events: []event{
				queued(10), scheduled(50, 0, 1000),
				output(250, 1), output(300, 1), output(400, 1),
				finish(400, stats.FinishStop),
			},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{ExternalKVTransfer: 1000}, GenerationTokens: 1, TTFT: 0.25},
				{GenerationTokens: 1, ITL: 0.05},
				{GenerationTokens: 1, ITL: 0.1},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 1000, GenerationTokens: 3, PrefillComputedTokens: 0,
				N: 1, MaxGenerationTokens: 3,
				E2ELatency: 0.4, QueueTime: 0.04, PrefillTime: 0.2, InferenceTime: 0.35, DecodeTime: 0.15,
				TimePerOutputToken: 0.075, // 0.15 s / (3-1)
			},
		},
		{
			name: "fully locally cached prompt",
			req:  stats.Request{Arrival: t0, PromptTokens: 512},
			events: []event{
				queued(0), scheduled(20, 512, 0),
				output(100, 1), output(200, 1),
				finish(250, stats.FinishStop),
			},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{LocalCacheHit: 512}, GenerationTokens: 1, TTFT: 0.1},
				{GenerationTokens: 1, ITL: 0.1},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 512, GenerationTokens: 2, PrefillComputedTokens: 0,
				N: 1, MaxGenerationTokens: 2,
				E2ELatency: 0.25, QueueTime: 0.02, PrefillTime: 0.08, InferenceTime: 0.18, DecodeTime: 0.1,
				TimePerOutputToken: 0.1,
			},
		},
		{
			// The first scheduling's snapshot counts (800 computed), as in
			// newest vLLM; the second one's 512 cache hits are not counted.
			// Queue and prefill times start at the first scheduling.
			name: "preemption before the first output",
			req:  stats.Request{Arrival: t0, PromptTokens: 800},
			events: []event{
				queued(5), scheduled(10, 0, 0), preempted(100), scheduled(300, 512, 0),
				output(500, 1), output(600, 1),
				finish(600, stats.FinishStop),
			},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{Computed: 800}, GenerationTokens: 1, TTFT: 0.5},
				{GenerationTokens: 1, ITL: 0.1},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 800, GenerationTokens: 2, PrefillComputedTokens: 800,
				N: 1, MaxGenerationTokens: 2,
				E2ELatency: 0.6, QueueTime: 0.005, PrefillTime: 0.49, InferenceTime: 0.59, DecodeTime: 0.1,
				TimePerOutputToken: 0.1,
				Preemptions:        1,
			},
		},
		{
			// The re-scheduling after the first output counts no prompt again;
			// the output after it is an ITL since the previous output (450-150).
			// Finished by length at max_tokens = 5.
			name: "preemption after the first output, finish by length",
			req:  stats.Request{Arrival: t0, PromptTokens: 100, MaxTokens: 5},
			events: []event{
				queued(0), scheduled(20, 64, 0),
				output(100, 1), output(150, 1),
				preempted(160), scheduled(400, 96, 4),
				output(450, 1), output(500, 2),
				finish(500, stats.FinishLength),
			},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{Computed: 36, LocalCacheHit: 64}, GenerationTokens: 1, TTFT: 0.1},
				{GenerationTokens: 1, ITL: 0.05},
				{GenerationTokens: 1, ITL: 0.3},
				{GenerationTokens: 2, ITL: 0.05},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishLength, PromptTokens: 100, GenerationTokens: 5, PrefillComputedTokens: 36,
				MaxTokens: 5, N: 1, MaxGenerationTokens: 5,
				E2ELatency: 0.5, QueueTime: 0.02, PrefillTime: 0.08, InferenceTime: 0.48, DecodeTime: 0.4,
				TimePerOutputToken: 0.1, // 0.4 s / (5-1)
				Preemptions:        1,
			},
		},
		{
			// After 9 generated tokens the re-prefill finds 108 tokens cached:
			// more than the prompt (100) but within prompt+generated (109).
			name: "re-prefill after the first output hits cached output tokens",
			req:  stats.Request{Arrival: t0, PromptTokens: 100},
			events: []event{
				queued(0), scheduled(10, 0, 0),
				output(50, 1), output(60, 4), output(70, 4),
				preempted(80), scheduled(90, 108, 0),
				output(120, 1),
				finish(120, stats.FinishStop),
			},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{Computed: 100}, GenerationTokens: 1, TTFT: 0.05},
				{GenerationTokens: 4, ITL: 0.01},
				{GenerationTokens: 4, ITL: 0.01},
				{GenerationTokens: 1, ITL: 0.05},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 100, GenerationTokens: 10, PrefillComputedTokens: 100,
				N: 1, MaxGenerationTokens: 10,
				E2ELatency: 0.12, QueueTime: 0.01, PrefillTime: 0.04, InferenceTime: 0.11, DecodeTime: 0.07,
				TimePerOutputToken: 0.07 / 9,
				Preemptions:        1,
			},
		},
		{
			name:   "abort while queued",
			req:    stats.Request{Arrival: t0, PromptTokens: 200},
			events: []event{queued(5), finish(2500, stats.FinishAbort)},
			want: stats.FinishedRequest{
				Reason: stats.FinishAbort, PromptTokens: 200, N: 1, E2ELatency: 2.5,
			},
		},
		{
			name:   "abort before queued",
			req:    stats.Request{Arrival: t0, PromptTokens: 200, MaxTokens: 16},
			events: []event{finish(30, stats.FinishAbort)},
			want: stats.FinishedRequest{
				Reason: stats.FinishAbort, PromptTokens: 200, MaxTokens: 16, N: 1, E2ELatency: 0.03,
			},
		},
		{
			// Scheduled with 100 cached, aborted during prefill: queue time and
			// the scheduling's computed tokens (300-100) are known, no token was.
			name:   "abort during prefill",
			req:    stats.Request{Arrival: t0, PromptTokens: 300},
			events: []event{queued(5), scheduled(15, 100, 0), finish(40, stats.FinishAbort)},
			want: stats.FinishedRequest{
				Reason: stats.FinishAbort, PromptTokens: 300, PrefillComputedTokens: 200, N: 1,
				E2ELatency: 0.04, QueueTime: 0.01,
			},
		},
		{
			name:   "one token: TPOT is 0",
			req:    stats.Request{Arrival: t0, PromptTokens: 10},
			events: []event{queued(0), scheduled(0, 0, 0), output(30, 1), finish(30, stats.FinishStop)},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{Computed: 10}, GenerationTokens: 1, TTFT: 0.03},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 1, PrefillComputedTokens: 10,
				N: 1, MaxGenerationTokens: 1,
				E2ELatency: 0.03, PrefillTime: 0.03, InferenceTime: 0.03,
			},
		},
		{
			// Speculative decoding: each output carries 3 tokens and is one
			// latency sample. TPOT = 0.06 s / (6-1).
			name:   "outputs of 3 tokens",
			req:    stats.Request{Arrival: t0, PromptTokens: 64},
			events: []event{queued(0), scheduled(10, 0, 0), output(40, 3), output(100, 3), finish(100, stats.FinishStop)},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{Computed: 64}, GenerationTokens: 3, TTFT: 0.04},
				{GenerationTokens: 3, ITL: 0.06},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 64, GenerationTokens: 6, PrefillComputedTokens: 64,
				N: 1, MaxGenerationTokens: 6,
				E2ELatency: 0.1, QueueTime: 0.01, PrefillTime: 0.03, InferenceTime: 0.09, DecodeTime: 0.06,
				TimePerOutputToken: 0.012,
			},
		},
		{
			name:   "repetition and error reasons pass through",
			req:    stats.Request{Arrival: t0, PromptTokens: 4},
			events: []event{queued(0), scheduled(0, 0, 4), output(10, 1), finish(20, stats.FinishRepetition)},
			outs: []stats.Output{
				{First: true, PromptTokens: stats.PromptTokens{ExternalKVTransfer: 4}, GenerationTokens: 1, TTFT: 0.01},
			},
			want: stats.FinishedRequest{
				Reason: stats.FinishRepetition, PromptTokens: 4, GenerationTokens: 1, N: 1, MaxGenerationTokens: 1,
				E2ELatency: 0.02, PrefillTime: 0.01, InferenceTime: 0.01,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := stats.NewTimeline(tt.req)
			if err := tl.Err(); err != nil {
				t.Fatal(err)
			}
			outs, fin := run(t, tl, tt.events)
			checkOutputs(t, outs, tt.outs)
			checkFinished(t, fin, tt.want)
			if !tl.Done() {
				t.Error("Done() = false after Finish")
			}
			if tl.Generated() != tt.want.GenerationTokens {
				t.Errorf("Generated() = %d, want %d", tl.Generated(), tt.want.GenerationTokens)
			}
		})
	}
}

// TestTimelineExactSeconds checks that millisecond timestamps give the
// float64 seconds literal exactly (no accumulated rounding).
func TestTimelineExactSeconds(t *testing.T) {
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 1000})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	outs, fin := run(t, tl, []event{
		queued(10), scheduled(50, 0, 1000), output(250, 1), output(750, 1), finish(750, stats.FinishStop),
	})
	if outs[0].TTFT != 0.25 || outs[1].ITL != 0.5 {
		t.Errorf("latencies = %v, %v; want exactly 0.25, 0.5", outs[0].TTFT, outs[1].ITL)
	}
	if fin.E2ELatency != 0.75 || fin.PrefillTime != 0.2 || fin.DecodeTime != 0.5 || fin.TimePerOutputToken != 0.5 {
		t.Errorf("finished = %+v; want E2E 0.75, prefill 0.2, decode 0.5, TPOT 0.5 exactly", fin)
	}
}

// TestTimelineZeroTimeIsAValue drives a request whose events straddle
// time.Time{}: the zero time is a valid event time, not "not yet".
func TestTimelineZeroTimeIsAValue(t *testing.T) {
	var zero time.Time
	at := func(n int64) time.Time { return zero.Add(time.Duration(n) * time.Millisecond) }
	tl := stats.NewTimeline(stats.Request{Arrival: at(-2000), PromptTokens: 10})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	must := mustNil(t)
	tl.Queued(at(-1500))
	tl.Scheduled(at(0), 4, 0)
	o1, err := tl.Output(at(0), 1)
	must(err)
	o2, err := tl.Output(at(500), 1)
	must(err)
	fin, err := tl.Finish(at(500), stats.FinishStop)
	must(err)
	checkOutputs(t, []stats.Output{o1, o2}, []stats.Output{
		{First: true, PromptTokens: stats.PromptTokens{Computed: 6, LocalCacheHit: 4}, GenerationTokens: 1, TTFT: 2},
		{GenerationTokens: 1, ITL: 0.5},
	})
	checkFinished(t, fin, stats.FinishedRequest{
		Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 2, PrefillComputedTokens: 6,
		N: 1, MaxGenerationTokens: 2,
		E2ELatency: 2.5, QueueTime: 1.5, PrefillTime: 0, InferenceTime: 0.5, DecodeTime: 0.5, TimePerOutputToken: 0.5,
	})
}

func TestTimelinesN2(t *testing.T) {
	children := stats.NewTimelines(stats.Request{Arrival: t0, PromptTokens: 50, N: 2})
	if err := children[0].Err(); err != nil {
		t.Fatal(err)
	}
	if len(children) != 2 {
		t.Fatalf("len(NewTimelines(N=2)) = %d, want 2", len(children))
	}
	a, b := children[0], children[1]

	// Each child counts its own prompt at its first output; b found 32
	// tokens in the prefix cache (its sibling's prompt).
	outsA, _ := run(t, a, []event{queued(0), scheduled(10, 0, 0), output(100, 1), output(200, 1), output(300, 1)})
	outsB, _ := run(t, b, []event{queued(0), scheduled(10, 32, 0), output(120, 1), output(220, 1), output(320, 1), output(420, 1), output(520, 1)})
	checkOutputs(t, outsA[:1], []stats.Output{{First: true, PromptTokens: stats.PromptTokens{Computed: 50}, GenerationTokens: 1, TTFT: 0.1}})
	checkOutputs(t, outsB[:1], []stats.Output{{First: true, PromptTokens: stats.PromptTokens{Computed: 18, LocalCacheHit: 32}, GenerationTokens: 1, TTFT: 0.12}})

	var it stats.Iteration
	for _, o := range []stats.Output{outsA[0], outsB[0]} {
		if err := it.AddOutput(o); err != nil {
			t.Fatal(err)
		}
	}
	if it.PromptTokens.Total() != 100 { // n x prompt = 2 x 50
		t.Errorf("prompt tokens of both children = %d, want 100", it.PromptTokens.Total())
	}

	// b (5 tokens) finishes first: it is marked ParentPending, without
	// MaxGenerationTokens.
	finB, err := b.Finish(ms(520), stats.FinishLength)
	if err != nil {
		t.Fatal(err)
	}
	checkFinished(t, finB, stats.FinishedRequest{
		Reason: stats.FinishLength, PromptTokens: 50, GenerationTokens: 5, PrefillComputedTokens: 18,
		N: 2, ParentPending: true,
		E2ELatency: 0.52, QueueTime: 0.01, PrefillTime: 0.11, InferenceTime: 0.51, DecodeTime: 0.4, TimePerOutputToken: 0.1,
	})
	// A second Finish of b is refused and does not count as a child finishing.
	if _, err := b.Finish(ms(530), stats.FinishStop); !errors.Is(err, stats.ErrFinished) {
		t.Fatalf("second Finish of a child = %v, want ErrFinished", err)
	}

	// a (3 tokens) finishes last: N = 2 and the max over both children, 5.
	finA, err := a.Finish(ms(600), stats.FinishStop)
	if err != nil {
		t.Fatal(err)
	}
	checkFinished(t, finA, stats.FinishedRequest{
		Reason: stats.FinishStop, PromptTokens: 50, GenerationTokens: 3, PrefillComputedTokens: 50,
		N: 2, MaxGenerationTokens: 5,
		E2ELatency: 0.6, QueueTime: 0.01, PrefillTime: 0.09, InferenceTime: 0.29, DecodeTime: 0.2, TimePerOutputToken: 0.1,
	})
}

// TestTimelinesConcurrentChildren drives the 4 children of one request from 4
// goroutines (run with -race): exactly one finish reports the maximum, 4
// tokens; the others are marked ParentPending.
func TestTimelinesConcurrentChildren(t *testing.T) {
	children := stats.NewTimelines(stats.Request{Arrival: t0, PromptTokens: 8, N: 4})
	if err := children[0].Err(); err != nil {
		t.Fatal(err)
	}
	fins := make([]stats.FinishedRequest, len(children))
	errs := make([]error, len(children))
	var wg sync.WaitGroup
	for i, c := range children {
		wg.Go(func() {
			events := []event{queued(0), scheduled(1, 0, 0)}
			for k := range int64(i + 1) { // child i generates i+1 tokens
				events = append(events, output(10+k, 1))
			}
			for _, e := range events {
				if _, _, err := apply(c, e); err != nil {
					errs[i] = err
					return
				}
			}
			fins[i], errs[i] = c.Finish(ms(100), stats.FinishStop)
		})
	}
	wg.Wait()
	reporters := 0
	for i, f := range fins {
		if errs[i] != nil {
			t.Fatalf("child %d: %v", i, errs[i])
		}
		switch {
		case f.N == 4 && f.MaxGenerationTokens == 4 && !f.ParentPending:
			reporters++
		case f.N != 4 || f.MaxGenerationTokens != 0 || !f.ParentPending:
			t.Errorf("child %d: N = %d, MaxGenerationTokens = %d, ParentPending %v; want 4, 0, true or 4, 4, false",
				i, f.N, f.MaxGenerationTokens, f.ParentPending)
		}
	}
	if reporters != 1 {
		t.Errorf("%d children reported N = 4, want exactly 1", reporters)
	}
}

func TestNewTimelinesN(t *testing.T) {
	for _, tt := range []struct {
		n, wantChildren, wantN int64
	}{
		{n: 0, wantChildren: 1, wantN: 1}, // N unset means 1
		{n: 1, wantChildren: 1, wantN: 1},
		{n: 3, wantChildren: 3, wantN: 3},
	} {
		children := stats.NewTimelines(stats.Request{Arrival: t0, PromptTokens: 1, N: tt.n})
		if err := children[0].Err(); err != nil {
			t.Fatalf("N=%d: %v", tt.n, err)
		}
		if int64(len(children)) != tt.wantChildren {
			t.Fatalf("N=%d: %d children, want %d", tt.n, len(children), tt.wantChildren)
		}
		var last stats.FinishedRequest
		var err error
		for _, c := range children {
			if last, err = c.Finish(ms(1), stats.FinishAbort); err != nil {
				t.Fatal(err)
			}
		}
		if last.N != tt.wantN {
			t.Errorf("N=%d: last child's N = %d, want %d", tt.n, last.N, tt.wantN)
		}
	}
	// NewTimeline treats N = 0 as 1 too.
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 1})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	if f, err := tl.Finish(t0, stats.FinishAbort); err != nil || f.N != 1 {
		t.Errorf("NewTimeline(N=0).Finish: N = %d, err = %v; want 1, nil", f.N, err)
	}
}

func TestNewTimelineErrors(t *testing.T) {
	tests := []struct {
		name     string
		req      stats.Request
		single   bool // only NewTimeline rejects it
		sentinel error
		mention  string
	}{
		{"zero arrival", stats.Request{PromptTokens: 10}, false, stats.ErrOutOfRange, "Arrival"},
		{"negative prompt", stats.Request{Arrival: t0, PromptTokens: -1}, false, stats.ErrNegative, "PromptTokens = -1"},
		{"negative max tokens", stats.Request{Arrival: t0, PromptTokens: 10, MaxTokens: -2}, false, stats.ErrNegative, "MaxTokens = -2"},
		{"negative n", stats.Request{Arrival: t0, PromptTokens: 10, N: -1}, false, stats.ErrNegative, "N = -1"},
		{"n = 2 needs NewTimelines", stats.Request{Arrival: t0, PromptTokens: 10, N: 2}, true, stats.ErrOutOfRange, "N = 2"},
		{"n too large", stats.Request{Arrival: t0, PromptTokens: 10, N: 1<<16 + 1}, false, stats.ErrOutOfRange, "N = 65537"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := stats.NewTimeline(tt.req)
			wantErr(t, tl.Err(), tt.sentinel, tt.mention)
			// The refused Request's Timeline refuses its events without
			// counting them: the step counts the Request once.
			var it stats.Iteration
			tl.Scheduled(t0, 0, 0)
			it.Output(tl, t0, 1)
			it.Finish(tl, t0, stats.FinishStop)
			if r := it.Refused(); r.Total() != 1 || r.Count(stats.KindRequest) != 1 || it.GenerationTokens != 0 || len(it.Finished) != 0 {
				t.Errorf("a refused Request's events: %d refused (%d requests), %d tokens, %d finished; want 1 request refused, nothing else",
					r.Total(), r.Count(stats.KindRequest), it.GenerationTokens, len(it.Finished))
			}
			children := stats.NewTimelines(tt.req)
			err := children[0].Err()
			if tt.single {
				if err != nil || len(children) != 2 {
					t.Errorf("NewTimelines: %d children, %v; want 2, nil", len(children), err)
				}
				return
			}
			wantErr(t, err, tt.sentinel, tt.mention)
			if len(children) != 1 {
				t.Errorf("NewTimelines returned %d children for a refused Request, want 1", len(children))
			}
		})
	}
}

// TestTimelineErrorsLeaveStateUnchanged inserts one bad call into a scenario
// and checks that the call fails with the expected sentinel and that the
// scenario then ends exactly as it does without the bad call.
func TestTimelineErrorsLeaveStateUnchanged(t *testing.T) {
	req := stats.Request{Arrival: t0, PromptTokens: 100, MaxTokens: 10}
	base := []event{
		queued(10),                    // 0
		scheduled(20, 30, 10),         // 1
		output(100, 1),                // 2
		preempted(150),                // 3
		scheduled(200, 40, 0),         // 4: not counted, after the first output
		output(250, 2),                // 5
		finish(300, stats.FinishStop), // 6
	}

	// The scenario without a bad call, checked by hand once.
	ref := stats.NewTimeline(req)
	if err := ref.Err(); err != nil {
		t.Fatal(err)
	}
	refOuts, refFin := run(t, ref, base)
	checkOutputs(t, refOuts, []stats.Output{
		{First: true, PromptTokens: stats.PromptTokens{Computed: 60, LocalCacheHit: 30, ExternalKVTransfer: 10}, GenerationTokens: 1, TTFT: 0.1},
		{GenerationTokens: 2, ITL: 0.15},
	})
	checkFinished(t, refFin, stats.FinishedRequest{
		Reason: stats.FinishStop, PromptTokens: 100, GenerationTokens: 3, PrefillComputedTokens: 60, MaxTokens: 10,
		N: 1, MaxGenerationTokens: 3,
		E2ELatency: 0.3, QueueTime: 0.01, PrefillTime: 0.08, InferenceTime: 0.23, DecodeTime: 0.15, TimePerOutputToken: 0.075,
		Preemptions: 1,
	})

	tests := []struct {
		name     string
		before   int // index in base the bad call goes before
		bad      event
		sentinel error
	}{
		{"Output before Queued", 0, output(5, 1), stats.ErrOutOfOrder},
		{"Preempted before Queued", 0, preempted(5), stats.ErrOutOfOrder},
		{"Queued twice", 1, queued(15), stats.ErrOutOfOrder},
		{"timestamp before the previous event", 1, scheduled(5, 0, 0), stats.ErrOutOfOrder},
		{"Output before Scheduled", 1, output(15, 1), stats.ErrOutOfOrder},
		{"Preempted while queued", 1, preempted(15), stats.ErrOutOfOrder},
		{"cached exceeds prompt", 1, scheduled(20, 90, 20), stats.ErrCachedExceedsPrompt},
		{"negative local cached", 1, scheduled(20, -1, 0), stats.ErrNegative},
		{"negative external cached", 1, scheduled(20, 0, -1), stats.ErrNegative},
		{"cached overflows", 1, scheduled(20, math.MaxInt64, 1), stats.ErrOverflow},
		{"Scheduled while running", 2, scheduled(50, 0, 0), stats.ErrOutOfOrder},
		{"Output of 0 tokens", 2, output(100, 0), stats.ErrOutOfRange},
		{"Output of negative tokens", 2, output(100, -3), stats.ErrOutOfRange},
		{"Output timestamp before the previous output", 3, output(90, 1), stats.ErrOutOfOrder},
		{"generated tokens overflow", 3, output(100, math.MaxInt64), stats.ErrOverflow},
		{"Finish before the previous event", 3, finish(90, stats.FinishStop), stats.ErrOutOfOrder},
		{"Output while preempted", 4, output(160, 1), stats.ErrOutOfOrder},
		{"Preempted twice", 4, preempted(160), stats.ErrOutOfOrder},
		// After 1 generated token the re-prefill may find at most 100+1 cached.
		{"re-prefill cached exceeds prompt+generated", 4, scheduled(200, 100, 2), stats.ErrCachedExceedsPrompt},
		{"unknown finish reason", 6, finish(300, stats.FinishReason(99)), stats.ErrUnknownFinishReason},
		{"Output after Finish", 7, output(400, 1), stats.ErrFinished},
		{"second Finish", 7, finish(400, stats.FinishStop), stats.ErrFinished},
		{"second Finish in the past", 7, finish(100, stats.FinishAbort), stats.ErrFinished},
		{"Queued after Finish", 7, queued(400), stats.ErrFinished},
		{"Scheduled after Finish", 7, scheduled(400, 0, 0), stats.ErrFinished},
		{"Preempted after Finish", 7, preempted(400), stats.ErrFinished},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := stats.NewTimeline(req)
			if err := tl.Err(); err != nil {
				t.Fatal(err)
			}
			outs, fin := run(t, tl, base[:tt.before])
			gen, done := tl.Generated(), tl.Done()

			o, f, err := apply(tl, tt.bad)
			wantErr(t, err, tt.sentinel)
			var fe *stats.FieldError
			var ee *stats.EventError
			if !(errors.As(err, &fe) && fe.Field != "") && !(errors.As(err, &ee) && ee.Event == tt.bad.name()) {
				t.Errorf("error %v is neither a *FieldError naming a field nor an *EventError naming the event", err)
			}
			if o != (stats.Output{}) || f != (stats.FinishedRequest{}) {
				t.Errorf("results on error = %+v, %+v; want zero values", o, f)
			}
			if tl.Generated() != gen || tl.Done() != done {
				t.Errorf("after the error Generated, Done = %d, %v; want %d, %v", tl.Generated(), tl.Done(), gen, done)
			}

			restOuts, restFin := run(t, tl, base[tt.before:])
			outs = append(outs, restOuts...)
			if tt.before == len(base) {
				restFin = fin
			}
			if len(outs) != len(refOuts) {
				t.Fatalf("%d outputs, want %d", len(outs), len(refOuts))
			}
			for i := range outs {
				if outs[i] != refOuts[i] {
					t.Errorf("output %d = %+v, want %+v", i, outs[i], refOuts[i])
				}
			}
			if restFin != refFin {
				t.Errorf("finished =\n%+v\nwant\n%+v", restFin, refFin)
			}
		})
	}
}
