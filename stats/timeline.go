package stats

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Request describes a request as it arrives, before any event of its Timeline.
type Request struct {
	Arrival time.Time
	// PromptTokens is the prompt's length; 0 means not known yet, for an
	// engine that queues a request before tokenizing it: Timeline.Tokenized
	// then sets it, before the request is scheduled.
	PromptTokens int64
	// MaxTokens is the max_tokens parameter; 0 means it was not set.
	MaxTokens int64
	// N is the sampling parameter n: the number of child requests, each with
	// its own Timeline and each counting its own prompt. 0 means 1.
	N int64
	// Priority is the scheduling priority (lower is more urgent), passed on
	// to the FinishedRequest; any value is valid.
	Priority int
	// Context, when set, is the request's own context, typically carrying
	// its trace span. The Timeline passes it on to every Output and to the
	// FinishedRequest, and the request's latencies (TTFT, ITL, e2e, queue,
	// prefill, decode, inference, TPOT) are recorded with it, so that an
	// exemplar names this request's trace rather than the step's. It is
	// never cancelled or waited on. nil: the step's context is used.
	Context context.Context
}

// Validate reports a zero arrival time or a negative count.
func (r Request) Validate() error {
	if r.Arrival.IsZero() {
		return hintedErr("Arrival", r.Arrival, ErrOutOfRange, "set Request.Arrival")
	}
	if err := checkCount("PromptTokens", r.PromptTokens); err != nil {
		return err
	}
	if err := checkCount("MaxTokens", r.MaxTokens); err != nil {
		return err
	}
	return checkCount("N", r.N)
}

type phase uint8

const (
	arrived   phase = iota // waiting for the engine to queue or schedule it
	queued                 // waiting to be scheduled
	scheduled              // running
	preempted              // back in the queue after a preemption
	finished
)

// Event names, as errors print them.
const (
	evArrival   = "Arrival"
	evQueued    = "Queued"
	evScheduled = "Scheduled"
	evOutput    = "Output"
	evPreempted = "Preempted"
	evFinish    = "Finish"
	evTokenized = "Tokenized"
)

// maxAge is MaxSeconds as a time.Duration: no event may come later than
// that after the arrival, so that every duration a Timeline derives is
// valid.
const maxAge = time.Duration(MaxSeconds * float64(time.Second))

// Timeline follows one request through the engine, event by event, and turns
// the timestamps into the per-step contributions (Output) and the
// FinishedRequest exactly as vLLM defines them. Events must come in time
// order; an event the request's state does not allow, or a bad argument, is
// refused: it leaves the Timeline unchanged and is kept (see Refusals) until
// the next Iteration event of the request hands it to the step, whose
// RecordIteration reports it to the Recorder's error handler and counts it.
// Err returns what is kept. Make it with NewTimeline or NewTimelines: every
// event of a zero or nil Timeline is refused (ErrOutOfOrder).
//
// The usual calls are Queued (optional), Tokenized (when the prompt length
// came after the arrival) and Scheduled on the Timeline, and
// Iteration.Output, Iteration.Preempt and Iteration.Finish, which drive the
// Timeline and add the result to the step in one call. Output, Preempted
// and Finish on the Timeline itself return the result for the caller to
// add (Iteration.AddOutput, Iteration.Preemptions, Iteration.AddFinished),
// for an engine that assembles the step elsewhere.
//
// A Timeline is not safe for concurrent use; the children of one request
// (NewTimelines) may be driven from different goroutines.
//
// A Timeline may simply be dropped before its first output, whatever its
// phase: a request the server refuses after Queued, Tokenized or Scheduled
// (a prompt too long, a failed tokenization) needs no Finish. Nothing holds
// it but its caller, and nothing is recorded for it, as vLLM records nothing
// for a request its API server refused before its engine saw it; refused
// events kept on it go with it, uncounted. A child of an n > 1 request
// refused alone, while its siblings run, is finished instead (Finish with
// FinishAbort): its parent waits for each child's finish, and would never
// observe n and the maximum generation tokens (see NewTimelines).
type Timeline struct {
	req   Request
	phase phase
	last  time.Time // the latest event's time
	event string    // the latest event's name

	queued, scheduled, firstOutput, lastOutput time.Time

	// Flags rather than zero times: a time.Time is a value, not a sentinel.
	hasSnapshot bool         // Scheduled at least once; scheduled is the first time
	hasOutput   bool         // Output at least once; firstOutput is set
	prompt      PromptTokens // the split at the last scheduling before the first output
	generated   int64
	preemptions int64 // Preempted events so far

	parent *parent

	// refused holds the refused events not yet handed to a step; reqErr is
	// the error of a refused Request, whose events are ignored (the
	// Request's refusal counts for them).
	refused Refusals
	reqErr  error
}

// parent tracks the n children of one request so that the child finishing
// last reports MaxGenerationTokens and the others are marked ParentPending.
type parent struct {
	mu        sync.Mutex
	n         int64
	remaining int64
	maxGen    int64
}

// maxChildren bounds the sampling parameter N of NewTimelines.
const maxChildren = 1 << 16

// NewTimeline starts the timeline of a request with N <= 1. It never
// returns nil: the Timeline of an invalid Request (see Request.Validate)
// refuses the Request on its first event, as that event's step reports
// refusals, and ignores every event after; Err returns the Request's error
// until then.
func NewTimeline(r Request) *Timeline {
	err := r.Validate()
	if err == nil && r.N > 1 {
		err = hintedErr("N", r.N, ErrOutOfRange, "want 0 or 1: use NewTimelines for n > 1")
	}
	if err != nil {
		return refusedTimeline(r, err)
	}
	return newChild(r, &parent{n: 1, remaining: 1})
}

// NewTimelines starts one timeline per child of a request with sampling
// parameter N (at least one, at most 65536). For an invalid Request it
// returns one refused Timeline, as NewTimeline does. The last child to
// finish carries the parent's n and the most tokens a child generated
// (FinishedRequest.MaxGenerationTokens): finish every child, or drop them
// all (a request refused whole); a child dropped alone leaves them
// unreported.
func NewTimelines(r Request) []*Timeline {
	err := r.Validate()
	if err == nil && r.N > maxChildren {
		err = hintedErr("N", r.N, ErrOutOfRange, fmt.Sprintf("want at most %d", maxChildren))
	}
	if err != nil {
		return []*Timeline{refusedTimeline(r, err)}
	}
	n := max(r.N, 1)
	p := &parent{n: n, remaining: n}
	children := make([]*Timeline, n)
	for i := range children {
		children[i] = newChild(r, p)
	}
	return children
}

// refusedTimeline is the Timeline of a Request refused with err.
func refusedTimeline(r Request, err error) *Timeline {
	t := &Timeline{req: r, phase: arrived, event: evArrival, reqErr: err, parent: &parent{n: 1, remaining: 1}}
	t.refused.add(KindRequest, err)
	return t
}

// Err returns the error of the first refused event of the Timeline that no
// step has taken yet (Iteration.Output, Preempt and Finish take them), or of
// its refused Request; nil when there is none. Events refused by the
// Iteration methods are the step's: see Iteration.Refused.
func (t *Timeline) Err() error {
	if t == nil {
		return nil
	}
	return t.refused.Err()
}

// Refused returns the refused events of the Timeline that no step has taken
// yet, and its refused Request.
func (t *Timeline) Refused() Refusals {
	if t == nil {
		return Refusals{}
	}
	return t.refused
}

// refuse keeps a refused event of kind k, unless the Timeline's Request was
// refused: its refusal stands for all its events.
func (t *Timeline) refuse(k EventKind, err error) {
	if t != nil && t.reqErr == nil {
		t.refused.add(k, err)
	}
}

// newChild starts a child as queued at its arrival: Queued is optional.
func newChild(r Request, p *parent) *Timeline {
	r.N = p.n
	return &Timeline{req: r, phase: arrived, last: r.Arrival, event: evArrival, queued: r.Arrival, parent: p}
}

// check validates an event's time and that the current phase allows it. A
// nil or zero Timeline (one not made by NewTimeline or NewTimelines) has no
// request and allows no event.
func (t *Timeline) check(event string, at time.Time, allowed ...phase) error {
	if t == nil || t.parent == nil {
		return hintedErr(event, "a Timeline not made by NewTimeline", ErrOutOfOrder, "use NewTimeline or NewTimelines")
	}
	if t.reqErr != nil {
		return t.reqErr
	}
	if t.phase == finished {
		return &EventError{event, at, t.event, t.last, ErrFinished, "a new request needs its own Timeline (NewTimeline)"}
	}
	if at.Before(t.last) {
		return &EventError{event, at, t.event, t.last, ErrOutOfOrder,
			"events come in time order: pass a time no earlier than " + formatTime(t.last)}
	}
	if at.Sub(t.req.Arrival) > maxAge {
		return &EventError{event, at, evArrival, t.req.Arrival, ErrOutOfRange,
			"every event comes at most MaxSeconds (1e9 s) after Request.Arrival"}
	}
	if len(allowed) == 0 || slices.Contains(allowed, t.phase) {
		return nil
	}
	return &EventError{event, at, t.event, t.last, ErrOutOfOrder, orderHint(event)}
}

// orderHint says what an event that cannot follow the previous one needs.
func orderHint(event string) string {
	switch event {
	case evQueued:
		return "Queued comes at most once, before the first Scheduled"
	case evTokenized:
		return "Tokenized comes before Scheduled"
	case evScheduled:
		return "the request is running: Preempt it before scheduling it again"
	case evPreempted:
		return "only a running request can be preempted: call Scheduled first"
	}
	return "call Scheduled first" // Output
}

// Queued records that the engine queued the request. It is optional: an
// engine without a queue, or one that does not see the moment it enqueues,
// calls Scheduled directly, and the queue time then runs from the arrival.
// vLLM's runs from the engine core's QUEUED event, which follows the arrival
// by the front end's processing (tokenization, transfer to the engine core).
//
// A refused Queued is kept: see Timeline.
func (t *Timeline) Queued(at time.Time) {
	if err := t.check(evQueued, at, arrived); err != nil {
		t.refuse(KindQueued, err)
		return
	}
	t.phase, t.last, t.event, t.queued = queued, at, evQueued, at
}

// Tokenized sets the prompt length of a request that arrived without it
// (Request.PromptTokens 0), once, before it is scheduled: an engine that
// queues requests before tokenizing them makes the Timeline at the arrival,
// so that TTFT and e2e run from there, and a request that fails before its
// tokenization can still finish. The length is at least 1: vLLM refuses an
// empty decoder prompt before its engine sees the request
// (vllm/v1/engine/input_processor.py, _validate_prompt_len, at a1799180e1fc).
//
// A refused Tokenized is kept, as a refusal of kind KindRequest: see
// Timeline.
func (t *Timeline) Tokenized(at time.Time, promptTokens int64) {
	if err := t.tokenized(at, promptTokens); err != nil {
		t.refuse(KindRequest, err)
	}
}

// tokenized is Tokenized, returning its refusal.
func (t *Timeline) tokenized(at time.Time, promptTokens int64) error {
	if err := t.check(evTokenized, at, arrived, queued); err != nil {
		return err
	}
	if t.req.PromptTokens != 0 {
		return hintedErr("promptTokens", promptTokens, ErrOutOfOrder,
			fmt.Sprintf("the prompt length is known (%d): Tokenized is for a Request made with PromptTokens 0", t.req.PromptTokens))
	}
	if promptTokens < 1 {
		return hintedErr("promptTokens", promptTokens, ErrOutOfRange,
			"want at least 1: vLLM refuses a request with an empty prompt, so its engine never sees one")
	}
	t.req.PromptTokens, t.last, t.event = promptTokens, at, evTokenized
	return nil
}

// Scheduled records that the scheduler took the request from waiting, with
// the prompt tokens it found in the local prefix cache and through the KV
// connector at that moment. The first scheduling's snapshot is what the first
// output counts: a re-scheduling after a preemption, before or after the
// first output, counts no prompt token again (newest vLLM sets a request's
// prefill stats at its first admission only, while num_preemptions is 0:
// vllm/v1/core/sched/scheduler.py, see docs/design.md). A re-scheduling is
// still validated: its cached tokens may cover generated tokens too and must
// not exceed the prompt plus the tokens generated so far. The external tokens
// count as tier external_unspecified: ScheduledWith names their tiers.
//
// A prompt found whole in the local prefix cache is still reported as the
// engine found it; vLLM caps a local hit at the prompt length minus one, so
// that the last token is recomputed for its logits: an engine that does the
// same reports prompt-1 local cached tokens, and one computed token counts.
//
// A refused Scheduled is kept: see Timeline.
func (t *Timeline) Scheduled(at time.Time, localCached, externalCached int64) {
	t.ScheduledWith(at, Cached{Local: localCached, External: externalCached})
}

// ScheduledWith is Scheduled with the external tokens split by the tier they
// came from (host, p2p, disk; the rest external_unspecified). The snapshot's
// tiers reach the step of the first output with its prompt split
// (Output.PromptTokens), where vllm:prompt_tokens_cached_by_source counts them.
func (t *Timeline) ScheduledWith(at time.Time, c Cached) {
	if err := t.schedule(at, c); err != nil {
		t.refuse(KindScheduled, err)
	}
}

// schedule is ScheduledWith, returning its refusal.
func (t *Timeline) schedule(at time.Time, c Cached) error {
	if err := t.check(evScheduled, at, arrived, queued, preempted); err != nil {
		return err
	}
	if t.req.PromptTokens == 0 {
		return &EventError{evScheduled, at, t.event, t.last, ErrOutOfOrder,
			"the prompt length is not known: call Tokenized first, or set Request.PromptTokens"}
	}
	tokens := t.req.PromptTokens
	if t.hasOutput {
		// A re-prefill after the first output recomputes prompt and output.
		var err error
		if tokens, err = addChecked("tokens", tokens, t.generated); err != nil {
			tokens = math.MaxInt64
		}
	}
	split, err := SplitCached(tokens, c)
	if err != nil {
		return err
	}
	if !t.hasSnapshot {
		t.scheduled, t.prompt, t.hasSnapshot = at, split, true
	}
	t.phase, t.last, t.event = scheduled, at, evScheduled
	return nil
}

// Output records an output of tokens new tokens (at least one) and returns
// what it adds to the step: on the first output the prompt split and the time
// to first token, later the inter-token latency. Iteration.Output does this
// and adds the result to the step in one call.
func (t *Timeline) Output(at time.Time, tokens int64) (Output, error) {
	next, o, err := t.output(at, tokens)
	if err != nil {
		return Output{}, err
	}
	*t = next
	return o, nil
}

// output returns the Timeline after an output and what the output adds to
// the step, leaving t unchanged.
func (t *Timeline) output(at time.Time, tokens int64) (Timeline, Output, error) {
	if err := t.check(evOutput, at, scheduled); err != nil {
		return Timeline{}, Output{}, err
	}
	if tokens < 1 {
		return Timeline{}, Output{}, hintedErr("tokens", tokens, ErrOutOfRange, "want 1 or more")
	}
	generated, err := addChecked("tokens", t.generated, tokens)
	if err != nil {
		return Timeline{}, Output{}, err
	}
	next := *t
	o := Output{GenerationTokens: tokens}
	if !t.hasOutput {
		o.First, o.PromptTokens, o.TTFT = true, t.prompt, at.Sub(t.req.Arrival).Seconds()
		next.firstOutput, next.hasOutput = at, true
	} else {
		o.ITL = at.Sub(t.lastOutput).Seconds()
	}
	o.Context = t.req.Context
	next.generated, next.lastOutput, next.last, next.event = generated, at, at, evOutput
	return next, o, nil
}

// Preempted records that the scheduler preempted the running request; count
// it in the step's Iteration.Preemptions (Iteration.Preempt does both). It
// must be Scheduled again before its next output.
func (t *Timeline) Preempted(at time.Time) error {
	next, err := t.preempted(at)
	if err != nil {
		return err
	}
	*t = next
	return nil
}

// preempted returns the Timeline after a preemption, leaving t unchanged.
func (t *Timeline) preempted(at time.Time) (Timeline, error) {
	if err := t.check(evPreempted, at, scheduled); err != nil {
		return Timeline{}, err
	}
	next := *t
	next.phase, next.last, next.event = preempted, at, evPreempted
	next.preemptions++
	return next, nil
}

// Finish ends the request in any phase (an abort may come before any output)
// and returns its FinishedRequest. Iteration.Finish does this and adds the
// request to the step in one call.
func (t *Timeline) Finish(at time.Time, reason FinishReason) (FinishedRequest, error) {
	next, f, err := t.finish(at, reason)
	if err != nil {
		return FinishedRequest{}, err
	}
	t.endChild(next, &f)
	return f, nil
}

// finish returns the Timeline after the finish and the FinishedRequest
// without the parent's part (see endChild), leaving t and its parent
// unchanged.
func (t *Timeline) finish(at time.Time, reason FinishReason) (Timeline, FinishedRequest, error) {
	if err := t.check(evFinish, at); err != nil {
		return Timeline{}, FinishedRequest{}, err
	}
	if err := reason.Validate(); err != nil {
		return Timeline{}, FinishedRequest{}, err
	}
	f := FinishedRequest{
		Reason:           reason,
		PromptTokens:     t.req.PromptTokens,
		GenerationTokens: t.generated,
		MaxTokens:        t.req.MaxTokens,
		N:                t.parent.n,
		E2ELatency:       at.Sub(t.req.Arrival).Seconds(),
		Preemptions:      t.preemptions,
	}
	if t.hasSnapshot {
		f.PrefillComputedTokens = t.prompt.Computed
		f.QueueTime = t.scheduled.Sub(t.queued).Seconds()
	}
	f.Priority = t.req.Priority
	f.Context = t.req.Context
	if t.hasOutput {
		f.TimeToFirstToken = t.firstOutput.Sub(t.req.Arrival).Seconds()
		f.PrefillTime = t.firstOutput.Sub(t.scheduled).Seconds()
		f.DecodeTime = t.lastOutput.Sub(t.firstOutput).Seconds()
		f.InferenceTime = t.lastOutput.Sub(t.scheduled).Seconds()
	}
	if t.generated > 1 {
		f.TimePerOutputToken = f.DecodeTime / float64(t.generated-1)
	}
	next := *t
	next.phase, next.last, next.event = finished, at, evFinish
	return next, f, nil
}

// endChild commits a finish: t becomes next and f gets the parent's part,
// MaxGenerationTokens on the last child to finish and ParentPending on the
// others.
func (t *Timeline) endChild(next Timeline, f *FinishedRequest) {
	maxGen, last := t.parent.childFinished(t.generated)
	if last {
		f.MaxGenerationTokens = maxGen
	} else {
		f.ParentPending = true
	}
	*t = next
}

// childFinished counts a child's finish and returns the most tokens any
// child generated and whether this child was the last.
func (p *parent) childFinished(generated int64) (maxGen int64, last bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remaining--
	p.maxGen = max(p.maxGen, generated)
	return p.maxGen, p.remaining == 0
}

// Latest returns the time of the request's latest event, its arrival
// before any (the zero time for a nil Timeline): the earliest time its next
// event may take.
func (t *Timeline) Latest() time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.last
}

// Generated returns the tokens the request has emitted so far (0 for a nil
// Timeline).
func (t *Timeline) Generated() int64 {
	if t == nil {
		return 0
	}
	return t.generated
}

// Done reports whether the request has finished (false for a nil Timeline).
func (t *Timeline) Done() bool { return t != nil && t.phase == finished }
