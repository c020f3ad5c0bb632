package instrument

import (
	"context"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// The Record methods with the refusal returned rather than counted and
// reported, for the tests of package instrument that check its error. The
// public path (count, report) has tests of its own (refusal_test.go,
// badinput_test.go).

func RecordIterationErr(e *Engine, ctx context.Context, it *stats.Iteration) error {
	return e.recordIteration(ctx, it)
}

func RecordFinishedErr(e *Engine, ctx context.Context, f *stats.FinishedRequest) error {
	return e.recordFinishedRequest(ctx, f)
}

func RecordSchedulerErr(e *Engine, ctx context.Context, s *stats.Scheduler) error {
	return e.recordSchedulerStep(ctx, s)
}

func RecordChunkGapErr(e *Engine, ctx context.Context, seconds float64) error {
	return e.recordChunkGap(ctx, seconds)
}

func RecordPDLegsErr(e *Engine, ctx context.Context, l *stats.PDLegs) error {
	return e.recordPDLegs(ctx, l)
}

// RecordRequestErr is Engine.RecordRequest or Backend.RecordRequest,
// returning the refusal, or else what was dropped (nil for neither).
func RecordRequestErr(x any, ctx context.Context, r *stats.ObservedRequest) error {
	var dropped, refused error
	if b, ok := x.(*Backend); ok {
		dropped, refused = b.recordRequest(ctx, r)
	} else {
		dropped, refused = x.(*Engine).recordObserved(ctx, r)
	}
	if refused != nil {
		return refused
	}
	return dropped
}

// RecordHTTPRequestErr is Engine.RecordHTTPRequest, returning its refusal.
func RecordHTTPRequestErr(e *Engine, ctx context.Context, handler, method string, status int, seconds float64) error {
	return e.recordHTTPRequest(ctx, handler, method, status, seconds)
}

func BackendRecordChunkGapErr(b *Backend, ctx context.Context, op stats.Operation, seconds float64) error {
	return b.recordChunkGap(ctx, op, seconds)
}

func RequestStartedErr(e *Engine) error {
	if err := e.usable(false); err != nil {
		return err
	}
	e.RequestStarted()
	return nil
}

func RequestEndedErr(e *Engine) error {
	if err := e.usable(false); err != nil {
		return err
	}
	e.RequestEnded()
	return nil
}

// The Recorder's Record methods by rank.

func RecorderRecordIterationErr(r *Recorder, ctx context.Context, rank int, it *stats.Iteration) error {
	e, err := r.Engine(rank)
	if err != nil {
		return err
	}
	return e.recordIteration(ctx, it)
}

func RecorderRecordFinishedErr(r *Recorder, ctx context.Context, rank int, f *stats.FinishedRequest) error {
	e, err := r.Engine(rank)
	if err != nil {
		return err
	}
	return e.recordFinishedRequest(ctx, f)
}

func RecorderRecordSchedulerErr(r *Recorder, ctx context.Context, rank int, s *stats.Scheduler) error {
	e, err := r.Engine(rank)
	if err != nil {
		return err
	}
	return e.recordSchedulerStep(ctx, s)
}

// RateLimitedAt is RateLimited with a clock.
func RateLimitedAt(h func(error), now func() time.Time) func(error) {
	l := &limiter{handle: h, now: now}
	return l.report
}

// InvalidCount returns the engine's count of refused input of the kind
// label, read from its cell: it holds after Close, when the counter is no
// longer exported; -1 for an unknown kind.
func InvalidCount(e *Engine, kind string) int64 {
	for k := range numRefusals {
		if refusal(k).String() == kind {
			return e.c.invalid[k].Load()
		}
	}
	return -1
}

// OpenWindow returns the length of ev's open window, and whether one is.
func OpenWindow(ev *Events) (time.Duration, bool) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.length, ev.open
}

// RecordAttemptsErr is RecordAttempts, returning its refusal.
func RecordAttemptsErr(e *Engine, ctx context.Context, n int64) error {
	return e.recordAttempts(ctx, n)
}
