package stats_test

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

// TestIterationEvents drives two requests through three steps with one call
// per event: the step gets the outputs, the preemption and the finished
// request with nothing routed by hand.
func TestIterationEvents(t *testing.T) {
	a := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 100})
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	b := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 40})
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	must := mustNil(t)
	a.Scheduled(ms(10), 60, 0)
	b.Scheduled(ms(10), 0, 0)

	var step stats.Iteration
	step.Output(a, ms(50), 1)
	step.Output(b, ms(50), 1)
	if step.PromptTokens.Computed != 80 || step.PromptTokens.LocalCacheHit != 60 || step.GenerationTokens != 2 ||
		!slices.Equal(step.TTFT, []float64{0.05, 0.05}) || len(step.ITL) != 0 {
		t.Errorf("step 1 = %+v", step)
	}

	step.Reset()
	step.Output(a, ms(80), 3) // speculative decoding: 3 tokens
	step.Preempt(b, ms(80))
	if step.GenerationTokens != 3 || step.Preemptions != 1 || !slices.Equal(step.ITL, []float64{0.03}) || step.TokensDone() != 3 {
		t.Errorf("step 2 = %+v", step)
	}

	step.Reset()
	step.Finish(a, ms(120), stats.FinishStop)
	if len(step.Finished) != 1 {
		t.Fatalf("step 3 finished %d requests, want 1", len(step.Finished))
	}
	checkFinished(t, step.Finished[0], stats.FinishedRequest{
		Reason: stats.FinishStop, PromptTokens: 100, GenerationTokens: 4, PrefillComputedTokens: 40,
		N: 1, MaxGenerationTokens: 4,
		E2ELatency: 0.12, QueueTime: 0.01, PrefillTime: 0.04, InferenceTime: 0.07, DecodeTime: 0.03, TimePerOutputToken: 0.01,
	})
	if !a.Done() || b.Done() || b.Generated() != 1 {
		t.Errorf("Done a, b = %v, %v; b generated %d", a.Done(), b.Done(), b.Generated())
	}
	must(step.Validate())
}

// TestIterationEventsErrorsChangeNothing: a refused event leaves both the
// Timeline and the step as they were, including when the Timeline would take
// the event but the step cannot (an overflow).
func TestIterationEventsErrorsChangeNothing(t *testing.T) {
	newRunning := func(t *testing.T) *stats.Timeline {
		tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
		if err := tl.Err(); err != nil {
			t.Fatal(err)
		}
		if err := eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(1), 0, 0) }); err != nil {
			t.Fatal(err)
		}
		return tl
	}
	tests := []struct {
		name     string
		step     stats.Iteration
		call     func(it *stats.Iteration, tl *stats.Timeline) error
		sentinel error
	}{
		{"Output before the previous event", stats.Iteration{},
			func(it *stats.Iteration, tl *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Output(tl, t0, 1) })
			}, stats.ErrOutOfOrder},
		{"Output of no token", stats.Iteration{},
			func(it *stats.Iteration, tl *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Output(tl, ms(5), 0) })
			}, stats.ErrOutOfRange},
		{"Output overflowing the step", stats.Iteration{GenerationTokens: math.MaxInt64},
			func(it *stats.Iteration, tl *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Output(tl, ms(5), 1) })
			}, stats.ErrOverflow},
		{"Output on a nil Timeline", stats.Iteration{},
			func(it *stats.Iteration, _ *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Output(nil, ms(5), 1) })
			}, stats.ErrOutOfOrder},
		{"Preempt overflowing the step", stats.Iteration{Preemptions: math.MaxInt64},
			func(it *stats.Iteration, tl *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Preempt(tl, ms(5)) })
			}, stats.ErrOverflow},
		{"Preempt before the previous event", stats.Iteration{},
			func(it *stats.Iteration, tl *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Preempt(tl, t0) })
			}, stats.ErrOutOfOrder},
		{"Preempt on a nil Timeline", stats.Iteration{},
			func(it *stats.Iteration, _ *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Preempt(nil, ms(5)) })
			}, stats.ErrOutOfOrder},
		{"Finish with an unknown reason", stats.Iteration{},
			func(it *stats.Iteration, tl *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Finish(tl, ms(5), stats.FinishReason(99)) })
			}, stats.ErrUnknownFinishReason},
		{"Finish before the previous event", stats.Iteration{},
			func(it *stats.Iteration, tl *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Finish(tl, t0, stats.FinishStop) })
			}, stats.ErrOutOfOrder},
		{"Finish on a nil Timeline", stats.Iteration{},
			func(it *stats.Iteration, _ *stats.Timeline) error {
				return eventtest.Err(it.Refused, func() { it.Finish(nil, ms(5), stats.FinishStop) })
			}, stats.ErrOutOfOrder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := newRunning(t)
			step := tt.step
			wantErr(t, tt.call(&step, tl), tt.sentinel)
			if !equalIterations(step, tt.step) {
				t.Errorf("step after the error = %+v, want %+v", step, tt.step)
			}
			// The Timeline is where it was: running, no output, not done.
			if tl.Generated() != 0 || tl.Done() {
				t.Fatalf("Timeline after the error: generated %d, done %v", tl.Generated(), tl.Done())
			}
			var next stats.Iteration
			if err := eventtest.Err(next.Refused, func() { next.Output(tl, ms(10), 1) }); err != nil {
				t.Fatalf("Output after the error: %v", err)
			}
			if err := eventtest.Err(next.Refused, func() { next.Finish(tl, ms(20), stats.FinishStop) }); err != nil {
				t.Fatalf("Finish after the error: %v", err)
			}
			checkFinished(t, next.Finished[0], stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 1, PrefillComputedTokens: 10,
				N: 1, MaxGenerationTokens: 1, E2ELatency: 0.02, QueueTime: 0.001, PrefillTime: 0.009, InferenceTime: 0.009,
			})
		})
	}
}

func equalIterations(a, b stats.Iteration) bool {
	return a.PromptTokens == b.PromptTokens && a.GenerationTokens == b.GenerationTokens &&
		a.Preemptions == b.Preemptions && a.CorruptedRequests == b.CorruptedRequests &&
		slices.Equal(a.TTFT, b.TTFT) && slices.Equal(a.ITL, b.ITL) && len(a.Finished) == len(b.Finished)
}

// TestIterationFinishChildren: Iteration.Finish marks the children of an
// n = 2 request like Timeline.Finish, and a refused Finish does not count as
// a child finishing.
func TestIterationFinishChildren(t *testing.T) {
	children := stats.NewTimelines(stats.Request{Arrival: t0, PromptTokens: 8, N: 2})
	if err := children[0].Err(); err != nil {
		t.Fatal(err)
	}
	var step stats.Iteration
	for i, c := range children {
		if err := eventtest.Err(c.Refused, func() { c.Scheduled(ms(1), 0, 0) }); err != nil {
			t.Fatal(err)
		}
		if err := eventtest.Err(step.Refused, func() { step.Output(c, ms(10), int64(i+2)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := eventtest.Err(step.Refused, func() { step.Finish(children[0], t0, stats.FinishStop) }); !errors.Is(err, stats.ErrOutOfOrder) {
		t.Fatalf("Finish before the previous event = %v, want ErrOutOfOrder", err)
	}
	for _, c := range children {
		if err := eventtest.Err(step.Refused, func() { step.Finish(c, ms(20), stats.FinishStop) }); err != nil {
			t.Fatal(err)
		}
	}
	first, last := step.Finished[0], step.Finished[1]
	if !first.ParentPending || first.N != 2 || first.MaxGenerationTokens != 0 {
		t.Errorf("first child = %+v, want ParentPending with N 2", first)
	}
	if last.ParentPending || last.N != 2 || last.MaxGenerationTokens != 3 {
		t.Errorf("last child = %+v, want N 2 and MaxGenerationTokens 3", last)
	}
}

// TestTimelineWithoutQueued: Queued is optional; without it the queue time
// runs from the arrival to the first scheduling, and Queued may not come
// after Scheduled.
func TestTimelineWithoutQueued(t *testing.T) {
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	outs, fin := run(t, tl, []event{scheduled(30, 0, 0), output(50, 1), finish(60, stats.FinishStop)})
	checkOutputs(t, outs, []stats.Output{{First: true, PromptTokens: stats.PromptTokens{Computed: 10}, GenerationTokens: 1, TTFT: 0.05}})
	checkFinished(t, fin, stats.FinishedRequest{
		Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 1, PrefillComputedTokens: 10, N: 1, MaxGenerationTokens: 1,
		E2ELatency: 0.06, QueueTime: 0.03, PrefillTime: 0.02, InferenceTime: 0.02,
	})

	tl = stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(30), 0, 0) }); err != nil {
		t.Fatal(err)
	}
	wantErr(t, eventtest.Err(tl.Refused, func() { tl.Queued(ms(40)) }), stats.ErrOutOfOrder, "Queued at", "cannot follow the previous event (Scheduled at")
}

// TestTimelineErrorNamesBothEvents: an out-of-order event's error gives both
// events and their absolute times, not a negative duration.
func TestTimelineErrorNamesBothEvents(t *testing.T) {
	arrival := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	tl := stats.NewTimeline(stats.Request{Arrival: arrival, PromptTokens: 10})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Scheduled(arrival.Add(225*time.Millisecond), 0, 0) }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		err      error
		want     string
		sentinel error
	}{
		{
			"before the previous event",
			func() error { _, err := tl.Output(arrival.Add(100*time.Millisecond), 1); return err }(),
			"stats: Output at 2026-11-30T07:00:00.100Z is before the previous event (Scheduled at 2026-11-30T07:00:00.225Z): event out of order: " +
				"events come in time order: pass a time no earlier than 2026-11-30T07:00:00.225Z",
			stats.ErrOutOfOrder,
		},
		{
			"sub-millisecond times",
			func() error {
				_, err := tl.Output(arrival.Add(225*time.Millisecond-200*time.Microsecond), 1)
				return err
			}(),
			"stats: Output at 2026-11-30T07:00:00.224800Z is before the previous event (Scheduled at 2026-11-30T07:00:00.225Z): event out of order: " +
				"events come in time order: pass a time no earlier than 2026-11-30T07:00:00.225Z",
			stats.ErrOutOfOrder,
		},
		{
			"a state that does not allow it",
			eventtest.Err(tl.Refused, func() { tl.Queued(arrival.Add(time.Second)) }),
			"stats: Queued at 2026-11-30T07:00:01.000Z cannot follow the previous event (Scheduled at 2026-11-30T07:00:00.225Z): event out of order: " +
				"Queued comes at most once, before the first Scheduled",
			stats.ErrOutOfOrder,
		},
		{
			"more than MaxSeconds after the arrival",
			tl.Preempted(arrival.Add(time.Duration(stats.MaxSeconds)*time.Second + time.Nanosecond)),
			"stats: Preempted at 2058-08-08T08:46:40.000000001Z is more than MaxSeconds after the arrival (Arrival at 2026-11-30T07:00:00.000Z): out of range: " +
				"every event comes at most MaxSeconds (1e9 s) after Request.Arrival",
			stats.ErrOutOfRange,
		},
	}
	for _, tt := range tests {
		if tt.err == nil || tt.err.Error() != tt.want {
			t.Errorf("%s: error\n%v\nwant\n%s", tt.name, tt.err, tt.want)
		}
		var ee *stats.EventError
		if !errors.Is(tt.err, tt.sentinel) || !errors.As(tt.err, &ee) {
			t.Errorf("%s: %v does not match %v and *EventError", tt.name, tt.err, tt.sentinel)
		}
	}
	if _, err := tl.Output(arrival.Add(time.Duration(stats.MaxSeconds)*time.Second), 1); err != nil {
		t.Errorf("Output exactly MaxSeconds after the arrival: %v", err)
	}
	if _, err := tl.Finish(arrival.Add(time.Second), stats.FinishStop); err == nil ||
		err.Error() != "stats: Finish at 2026-11-30T07:00:01.000Z is before the previous event (Output at 2058-08-08T08:46:40.000Z): event out of order: "+
			"events come in time order: pass a time no earlier than 2058-08-08T08:46:40.000Z" {
		t.Errorf("Finish error = %v", err)
	}
}
