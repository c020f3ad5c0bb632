package instrument

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// Windows of Events (see WithEventWindow).
const (
	// DefaultEventWindow is the window of an engine's events that makes one
	// step: about one decode step of a small model on a current GPU, and
	// vLLM's smallest inter-token latency bucket.
	DefaultEventWindow = 10 * time.Millisecond
	// MinEventWindow and MaxEventWindow bound WithEventWindow.
	MinEventWindow = time.Millisecond
	MaxEventWindow = time.Minute
)

// maxWindowValues bounds the latencies and finished requests one window
// holds: a window that reaches it is recorded at once, so that a burst of
// events cannot grow it without bound.
const maxWindowValues = 1 << 16

// maxEventSkew is how much earlier than a request's latest event an event
// may be timed and still be taken, at that latest event's time: two
// goroutines that read the clock, then raced for the lock.
const maxEventSkew = time.Second

// WithEventWindow sets the window in which Engine.Events gathers an
// event-driven engine's events into one step (default DefaultEventWindow;
// MinEventWindow to MaxEventWindow): set it near the engine's time per
// output token, so that a window holds about one output of each running
// request, as one vLLM decode step does. Events.SetWindow changes it at run
// time.
func WithEventWindow(d time.Duration) Option {
	return optionFunc(func(c *config) { c.eventWindow = d })
}

// checkEventWindow reports, with ErrConfig, a window outside MinEventWindow
// to MaxEventWindow, naming the call that set it.
func checkEventWindow(d time.Duration, by string) error {
	if d < MinEventWindow || d > MaxEventWindow {
		return fmt.Errorf("%w: event window %v (%s) must be %v to %v: %w",
			ErrConfig, d, by, MinEventWindow, MaxEventWindow, stats.ErrOutOfRange)
	}
	return nil
}

// Events records an engine that has no scheduler step: one goroutine per
// request, tokens produced on timers. Request goroutines report each event
// of their request as it happens, and Events gathers the events of all
// requests into steps, one per window of the engine's wall-clock time
// (WithEventWindow, SetWindow): a window opens at the first Output, Preempt or Finish
// after the previous one ended and is recorded when it ends, as
// RecordIteration records a step. It needs no goroutine of yours and no call
// to end a window: a timer records it (Flush records it at once), and
// Recorder.Close records the last one.
//
// vllm:iteration_tokens_total then observes, once per window in which a
// request produced tokens, the prompt tokens computed for the requests whose
// first output came in the window plus the tokens output in it: THE RULE,
// over a window instead of a step. A window without output (only finishes
// or preemptions) records those but observes nothing, as an idle vLLM
// engine, which runs no step, observes nothing. Everything else is recorded
// as from steps: prompt tokens by source at each request's first output,
// TTFT and inter-token latencies from the Timelines, finished requests, and
// refused events counted on NameInvalidEvents.
//
// Its methods are safe for concurrent use, allocate nothing once the
// window's lists have grown, and never wait for a window's recording: any
// goroutine may report any event of any request, an abort from another
// goroutine included. Each takes the Timeline's event (see stats.Timeline)
// under one lock, with two rules for event-driven engines: an event of a
// request that has finished is dropped, not refused (an abort that won the
// race with the request's own events; vLLM's output processor likewise
// ignores the outputs of an aborted request), and an event timed up to a
// second before the request's latest one (two goroutines that read the
// clock, then raced for the lock) takes that latest time.
//
// Events holds no Timeline: a request refused after Queued, Tokenized or
// Scheduled, before its first output (a prompt too long, a failed
// tokenization), may simply be dropped, and nothing is recorded for it (see
// stats.Timeline; a child of an n > 1 request refused alone is finished
// with stats.FinishAbort instead).
//
// An engine records through Events or through RecordIteration, not both:
// both would observe iteration tokens. Gauges and counters that change at
// their own time are set with SetRunning, SetWaiting, SetKVCacheUsage,
// AddPrefixCache and the like.
type Events struct {
	e *Engine

	// mu guards the open window: its step, whether it is open, when it
	// opened and for how long, and the timer that records it; and the
	// length of the next window (SetWindow).
	mu     sync.Mutex
	step   *stats.Iteration
	open   bool
	opened time.Time
	length time.Duration // the open window's
	window time.Duration // the next window's
	timer  *time.Timer   // nil until the first window

	// recordMu is held while a window is recorded, and taken before mu:
	// events go on into the other step meanwhile. spare is that other step,
	// empty, swapped in when a window ends.
	recordMu sync.Mutex
	spare    *stats.Iteration
}

func newEvents(e *Engine, window time.Duration) *Events {
	return &Events{e: e, window: window, step: &stats.Iteration{}, spare: &stats.Iteration{}}
}

// Events returns the engine's Events, the way to record it without a
// scheduler step (nil for a nil or zero Engine; its methods then report
// their refusal).
func (e *Engine) Events() *Events {
	if e == nil || e.engineState == nil {
		return nil
	}
	return e.events
}

// Queued records that the engine queued tl's request (Timeline.Queued).
func (ev *Events) Queued(tl *stats.Timeline, at time.Time) {
	if ev.usable(refusal(stats.KindQueued), "Queued") {
		ev.timeline(tl, at, func(at time.Time) { tl.Queued(at) })
	}
}

// Tokenized sets the prompt length of tl's request, which arrived without
// it (Timeline.Tokenized).
func (ev *Events) Tokenized(tl *stats.Timeline, at time.Time, promptTokens int64) {
	if ev.usable(refusal(stats.KindRequest), "Tokenized") {
		ev.timeline(tl, at, func(at time.Time) { tl.Tokenized(at, promptTokens) })
	}
}

// Scheduled records that tl's request was scheduled with the prompt tokens
// found in the local prefix cache and through the KV connector
// (Timeline.Scheduled).
func (ev *Events) Scheduled(tl *stats.Timeline, at time.Time, localCached, externalCached int64) {
	ev.ScheduledWith(tl, at, stats.Cached{Local: localCached, External: externalCached})
}

// ScheduledWith is Scheduled with the external tokens split by tier
// (Timeline.ScheduledWith).
func (ev *Events) ScheduledWith(tl *stats.Timeline, at time.Time, c stats.Cached) {
	if ev.usable(refusal(stats.KindScheduled), "Scheduled") {
		ev.timeline(tl, at, func(at time.Time) { tl.ScheduledWith(at, c) })
	}
}

// Output records an output of tokens new tokens of tl's request and adds it
// to the open window (Iteration.Output).
func (ev *Events) Output(tl *stats.Timeline, at time.Time, tokens int64) {
	if ev.usable(refusal(stats.KindOutput), "Output") {
		ev.add(tl, at, func(step *stats.Iteration, at time.Time) { step.Output(tl, at, tokens) })
	}
}

// Preempt records a preemption of tl's running request in the open window
// (Iteration.Preempt).
func (ev *Events) Preempt(tl *stats.Timeline, at time.Time) {
	if ev.usable(refusal(stats.KindPreempt), "Preempt") {
		ev.add(tl, at, func(step *stats.Iteration, at time.Time) { step.Preempt(tl, at) })
	}
}

// Finish ends tl's request, in any phase, and adds it to the open window
// (Iteration.Finish). A later event of the request is dropped.
func (ev *Events) Finish(tl *stats.Timeline, at time.Time, reason stats.FinishReason) {
	if ev.usable(refusal(stats.KindFinish), "Finish") {
		ev.add(tl, at, func(step *stats.Iteration, at time.Time) { step.Finish(tl, at, reason) })
	}
}

// Flush ends the open window now and records it: for an engine that forms
// its steps itself (a simulation on its own clock), or a test.
func (ev *Events) Flush() {
	if ev.usable(refusedIteration, "Flush") {
		ev.flush(true)
	}
}

// SetWindow sets the length of the windows that follow (see
// WithEventWindow), for an engine whose time per output token changes at run
// time (a simulator's new configuration, another model loaded): the open
// window keeps the end it had, and the next window opened lasts d. It is
// safe for concurrent use with every other method. It returns an error
// matching ErrConfig (and stats.ErrOutOfRange) for a d outside
// MinEventWindow to MaxEventWindow, leaving the window as it was; and one
// matching ErrUnknownEngine for a nil Events, ErrClosed after Close.
func (ev *Events) SetWindow(d time.Duration) error {
	if ev == nil {
		return fmt.Errorf("instrument: Events.SetWindow: %w: nil Events (get it from Engine.Events)", ErrUnknownEngine)
	}
	if err := ev.e.usable(false); err != nil {
		return fmt.Errorf("instrument: Events.SetWindow: %w", err)
	}
	if err := checkEventWindow(d, "Events.SetWindow"); err != nil {
		return err
	}
	ev.mu.Lock()
	ev.window = d
	ev.mu.Unlock()
	return nil
}

// usable reports, as a refusal of kind k, Events of a nil or zero Engine or
// of a closed Recorder.
func (ev *Events) usable(k refusal, method string) bool {
	if ev == nil {
		unbound(fmt.Errorf("instrument: Events.%s refused: %w: nil Events (get it from Engine.Events)", method, ErrUnknownEngine))
		return false
	}
	if err := ev.e.usable(false); err != nil {
		ev.e.refuse(k, "Events."+method, err)
		return false
	}
	return true
}

// timeline makes an event of tl that adds nothing to the window.
func (ev *Events) timeline(tl *stats.Timeline, at time.Time, event func(at time.Time)) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if !tl.Done() {
		event(skewed(tl, at))
	}
}

// add makes an event of tl that adds to the window, opening it when none
// is, and records the window at once when it is full.
func (ev *Events) add(tl *stats.Timeline, at time.Time, event func(step *stats.Iteration, at time.Time)) {
	ev.mu.Lock()
	if tl.Done() {
		ev.mu.Unlock()
		return
	}
	if !ev.open {
		ev.open, ev.opened, ev.length = true, time.Now(), ev.window
		if ev.timer == nil {
			ev.timer = time.AfterFunc(ev.length, ev.due)
		} else {
			ev.timer.Reset(ev.length)
		}
	}
	event(ev.step, skewed(tl, at))
	full := len(ev.step.TTFT)+len(ev.step.ITL)+len(ev.step.Finished) >= maxWindowValues
	ev.mu.Unlock()
	// A full window is recorded now, unless one is being recorded: the
	// event does not wait for that, and the next event tries again.
	if full && ev.recordMu.TryLock() {
		ev.endWindow(true)
	}
}

// skewed returns at, or tl's latest event time when at is earlier by at
// most maxEventSkew.
func skewed(tl *stats.Timeline, at time.Time) time.Time {
	if latest := tl.Latest(); at.Before(latest) && latest.Sub(at) <= maxEventSkew {
		return latest
	}
	return at
}

// due is the timer's: it records the window once it has lasted its time. A
// timer that fired for a window Flush already ended finds the next one
// younger, and waits for its end.
func (ev *Events) due() { ev.flush(false) }

// flush records the open window: at once when now is set, else when it has
// lasted its time.
func (ev *Events) flush(now bool) {
	ev.recordMu.Lock()
	ev.endWindow(now)
}

// endWindow is flush, with recordMu held; it releases it.
func (ev *Events) endWindow(now bool) {
	ev.mu.Lock()
	if !ev.open {
		ev.mu.Unlock()
		ev.recordMu.Unlock()
		return
	}
	if left := ev.length - time.Since(ev.opened); !now && left > 0 {
		ev.timer.Reset(left)
		ev.mu.Unlock()
		ev.recordMu.Unlock()
		return
	}
	ended := ev.step
	ev.step, ev.spare, ev.open = ev.spare, ended, false
	ev.mu.Unlock()
	later, err := ev.e.recordStep(context.Background(), ended, true)
	ended.Reset()
	// The handler may call back (WithErrorHandler): it runs once the
	// window is recorded and no lock is held.
	ev.recordMu.Unlock()
	ev.e.report(later)
	if err != nil {
		ev.e.refuse(refusedIteration, "Events", err)
	}
}

// close records the open window before the Recorder closes, and stops the
// timer.
func (ev *Events) close() {
	ev.flush(true)
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.timer != nil {
		ev.timer.Stop()
	}
}
