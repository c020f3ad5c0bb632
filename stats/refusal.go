package stats

// EventKind names a per-event call of this package whose input can be
// refused: KindRequest (NewTimeline, NewTimelines), KindQueued,
// KindScheduled, KindOutput, KindPreempt or KindFinish. Its String is the
// kind label of instrument's invalid events counter.
type EventKind uint8

// The event kinds, in label order.
const (
	// KindRequest: a Request refused by NewTimeline or NewTimelines, or
	// its prompt length refused by Timeline.Tokenized.
	KindRequest EventKind = iota
	// KindQueued: a refused Timeline.Queued.
	KindQueued
	// KindScheduled: a refused Timeline.Scheduled or ScheduledWith.
	KindScheduled
	// KindOutput: a refused Iteration.Output.
	KindOutput
	// KindPreempt: a refused Iteration.Preempt.
	KindPreempt
	// KindFinish: a refused Iteration.Finish.
	KindFinish
)

// numEventKinds is the number of EventKind values.
const numEventKinds = 6

var eventKindLabels = [numEventKinds]string{"request", "queued", "scheduled", "output", "preempt", "finish"}

// EventKinds returns every EventKind in label order.
func EventKinds() []EventKind {
	return []EventKind{KindRequest, KindQueued, KindScheduled, KindOutput, KindPreempt, KindFinish}
}

// String returns the kind label value: "request", "queued", "scheduled",
// "output", "preempt" or "finish".
func (k EventKind) String() string {
	if int(k) < numEventKinds {
		return eventKindLabels[k]
	}
	return "unknown"
}

// Refusals counts the events a Timeline or an Iteration refused, by kind,
// and keeps the first and the latest refusal's error: a refused event
// changes nothing else,
// and its record stays here, in constant space, until a Recorder reports
// and counts it (instrument's RecordIteration does, for an Iteration's).
type Refusals struct {
	counts      [numEventKinds]int64
	first, last error
}

// Count returns the refused events of kind k.
func (r Refusals) Count(k EventKind) int64 {
	if int(k) < numEventKinds {
		return r.counts[k]
	}
	return 0
}

// Total returns the refused events of every kind.
func (r Refusals) Total() int64 {
	var n int64
	for _, c := range r.counts {
		n += c
	}
	return n
}

// Err returns the error of the first refused event, nil when none was.
func (r Refusals) Err() error { return r.first }

// Last returns the error of the latest refused event, nil when none was.
func (r Refusals) Last() error { return r.last }

// add counts one refused event of kind k.
func (r *Refusals) add(k EventKind, err error) {
	r.counts[k]++
	if r.first == nil {
		r.first = err
	}
	r.last = err
}

// take moves the refusals of o into r, leaving o empty.
func (r *Refusals) take(o *Refusals) {
	if o.first == nil {
		return
	}
	for k, c := range o.counts {
		r.counts[k] += c
	}
	if r.first == nil {
		r.first = o.first
	}
	r.last = o.last
	*o = Refusals{}
}
