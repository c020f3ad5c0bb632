package stats

import (
	"context"
	"fmt"
	"time"
)

// Iteration is what one engine step produced: the per-iteration families are
// recorded from it once per step. Fill it with one call per request event,
// Output, Preempt and Finish, each driving the request's Timeline; Reset it
// for the next step. Under chunked prefill a request's computed prompt counts
// in the step of its first output, not in the steps that computed its chunks
// (see TokensDone).
type Iteration struct {
	// PromptTokens sums, by source, the prompts of the requests that produced
	// their first output in this step. A request counts its prompt once, in
	// the step of its first output; chunked-prefill steps before that and
	// re-prefills after a preemption add nothing.
	PromptTokens PromptTokens
	// GenerationTokens is the number of new tokens emitted in this step.
	GenerationTokens int64
	// Preemptions is the number of requests preempted in this step.
	Preemptions int64
	// CorruptedRequests is the number of requests whose outputs were found
	// corrupted (for example NaN logits) in this step.
	CorruptedRequests int64
	// TTFT holds, in seconds, the time to first token of every request that
	// emitted its first token in this step (arrival to first token).
	TTFT []float64
	// ITL holds, in seconds, one inter-token latency per decode output of a
	// request in this step (time since that request's previous output).
	ITL []float64
	// TTFTContexts and ITLContexts, when not empty, hold the context of the
	// request of each TTFT and ITL value (same length, same order; a nil
	// entry means none): the value is recorded with it, so that its exemplar
	// names the request's span rather than the step's. Output and AddOutput
	// fill them from Request.Context; empty, every value takes the step's
	// context.
	TTFTContexts []context.Context
	ITLContexts  []context.Context
	// Finished holds the requests that finished in this step.
	Finished []FinishedRequest

	// refused counts the events refused in this step and those its
	// Timelines handed over; recorded marks a step a Recorder recorded.
	refused  Refusals
	recorded bool
}

// Refused returns the events refused by Output, Preempt and Finish in this
// step, and those refused earlier by the Timelines they drove (Queued,
// Scheduled, NewTimeline's Request), for RecordIteration to report and
// count. Reset empties it.
func (it *Iteration) Refused() Refusals { return it.refused }

// Recorded reports whether a Recorder recorded the step since the last
// Reset: recording it again would count it twice.
func (it *Iteration) Recorded() bool { return it.recorded }

// MarkRecorded marks the step recorded, until Reset. A Recorder calls it
// after recording the step, so that it refuses a second recording.
func (it *Iteration) MarkRecorded() { it.recorded = true }

// refuse keeps a refused event of kind k on tl, after taking tl's earlier
// refusals. The event of a refused Request's Timeline is not counted again.
func (it *Iteration) refuse(tl *Timeline, k EventKind, err error) {
	it.take(tl)
	if tl == nil || tl.reqErr == nil {
		it.refused.add(k, err)
	}
}

// take moves tl's refused events into the step; after a commit (*tl =
// next), since next is a copy made before, which holds them too.
func (it *Iteration) take(tl *Timeline) {
	if tl != nil {
		it.refused.take(&tl.refused)
	}
}

// TokensDone returns the work done in this step: prompt tokens computed here
// plus generation tokens. This is the one definition behind
// vllm:iteration_tokens_total.
//
// Under chunked prefill a request's computed prompt counts in the step of its
// first output, all of it, not spread over the steps that computed its
// chunks: a 1000-token prompt prefilled in two 500-token steps adds 0 to the
// first step and 1000 plus its first token(s) to the second. This is vLLM's
// rule (its iteration stats add a request's prompt when it leaves
// prefilling); the per-step histogram is right over time, not step by step.
//
// Prompt tokens served from the local prefix cache or received as KV from
// another node are not work done in the step, so they are left out: counting
// them made a prefill/decode decode node report a whole prompt length for
// every request that arrived with its KV already computed elsewhere.
func (it *Iteration) TokensDone() int64 {
	return it.PromptTokens.Computed + it.GenerationTokens
}

// AddOutput adds one request's output in this step, as returned by
// Timeline.Output. On an invalid output or an overflow it returns the error
// and leaves the iteration unchanged.
func (it *Iteration) AddOutput(o Output) error {
	if err := o.Validate(); err != nil {
		return err
	}
	prompt := it.PromptTokens
	if err := prompt.Add(o.PromptTokens); err != nil {
		return prefixed("PromptTokens", err)
	}
	gen, err := addChecked("GenerationTokens", it.GenerationTokens, o.GenerationTokens)
	if err != nil {
		return err
	}
	if _, err := addChecked("TokensDone", prompt.Computed, gen); err != nil {
		return err
	}
	it.PromptTokens, it.GenerationTokens = prompt, gen
	if o.First {
		it.TTFT, it.TTFTContexts = appendWithContext(it.TTFT, it.TTFTContexts, o.TTFT, o.Context)
	} else {
		it.ITL, it.ITLContexts = appendWithContext(it.ITL, it.ITLContexts, o.ITL, o.Context)
	}
	return nil
}

// appendWithContext appends v to vs and ctx to its parallel contexts, which
// stay empty until a value comes with a context (earlier values then get
// nil), so that a step without traced requests keeps no contexts at all.
func appendWithContext(vs []float64, ctxs []context.Context, v float64, ctx context.Context) ([]float64, []context.Context) {
	if ctx != nil || len(ctxs) > 0 {
		for len(ctxs) < len(vs) {
			ctxs = append(ctxs, nil)
		}
		ctxs = append(ctxs, ctx)
	}
	return append(vs, v), ctxs
}

// Output records an output of tokens new tokens (at least one, several with
// speculative decoding) of tl's request at time at, and adds it to the step:
// Timeline.Output and AddOutput in one call. A refused output changes
// neither the Timeline nor the step's counts: it is kept in Refused.
func (it *Iteration) Output(tl *Timeline, at time.Time, tokens int64) {
	next, o, err := tl.output(at, tokens)
	if err == nil {
		err = it.AddOutput(o)
	}
	if err != nil {
		it.refuse(tl, KindOutput, err)
		return
	}
	*tl = next
	it.take(tl)
}

// Preempt records that the scheduler preempted tl's running request at time
// at and counts it in Preemptions: Timeline.Preempted and the count in one
// call. A refused preemption changes neither the Timeline nor the step's
// counts: it is kept in Refused.
func (it *Iteration) Preempt(tl *Timeline, at time.Time) {
	next, err := tl.preempted(at)
	var n int64
	if err == nil {
		n, err = addChecked("Preemptions", it.Preemptions, 1)
	}
	if err != nil {
		it.refuse(tl, KindPreempt, err)
		return
	}
	*tl = next
	it.take(tl)
	it.Preemptions = n
}

// Finish ends tl's request at time at for reason and adds it to Finished:
// Timeline.Finish and AddFinished in one call. A refused finish changes
// neither the Timeline nor the step: it is kept in Refused.
func (it *Iteration) Finish(tl *Timeline, at time.Time, reason FinishReason) {
	next, f, err := tl.finish(at, reason)
	if err == nil {
		// The parent's part, set by endChild, keeps f valid.
		if err = f.Validate(); err != nil {
			err = prefixed("Finished", err)
		}
	}
	if err != nil {
		it.refuse(tl, KindFinish, err)
		return
	}
	tl.endChild(next, &f)
	it.take(tl)
	it.Finished = append(it.Finished, f)
}

// AddFinished adds a request that finished in this step. An invalid request is
// returned as an error and not added.
func (it *Iteration) AddFinished(f FinishedRequest) error {
	if err := f.Validate(); err != nil {
		return prefixed("Finished", err)
	}
	it.Finished = append(it.Finished, f)
	return nil
}

// Reset empties the iteration for the next step, keeping the slices' storage,
// and clears its refusals and its recorded mark. The contexts it held are
// cleared, so that the step does not keep finished requests' contexts alive.
func (it *Iteration) Reset() {
	clear(it.TTFTContexts)
	clear(it.ITLContexts)
	clear(it.Finished)
	*it = Iteration{TTFT: it.TTFT[:0], ITL: it.ITL[:0], Finished: it.Finished[:0],
		TTFTContexts: it.TTFTContexts[:0], ITLContexts: it.ITLContexts[:0]}
}

// Validate reports the first bad field, including those of PromptTokens, the
// latencies and every finished request, and a TokensDone that overflows.
func (it *Iteration) Validate() error {
	if err := it.PromptTokens.Validate(); err != nil {
		return prefixed("PromptTokens", err)
	}
	if err := checkCount("GenerationTokens", it.GenerationTokens); err != nil {
		return err
	}
	if _, err := addChecked("TokensDone", it.PromptTokens.Computed, it.GenerationTokens); err != nil {
		return err
	}
	if err := checkCount("Preemptions", it.Preemptions); err != nil {
		return err
	}
	if err := checkCount("CorruptedRequests", it.CorruptedRequests); err != nil {
		return err
	}
	if err := checkSecondsList("TTFT", it.TTFT); err != nil {
		return err
	}
	if err := checkSecondsList("ITL", it.ITL); err != nil {
		return err
	}
	if n := len(it.TTFTContexts); n > 0 && n != len(it.TTFT) {
		return fieldErr("len(TTFTContexts)", n, fmt.Errorf("%w: want 0 or len(TTFT) = %d", ErrOutOfRange, len(it.TTFT)))
	}
	if n := len(it.ITLContexts); n > 0 && n != len(it.ITL) {
		return fieldErr("len(ITLContexts)", n, fmt.Errorf("%w: want 0 or len(ITL) = %d", ErrOutOfRange, len(it.ITL)))
	}
	for i := range it.Finished {
		if err := it.Finished[i].Validate(); err != nil {
			return prefixed(fmt.Sprintf("Finished[%d]", i), err)
		}
	}
	return nil
}

// Output is what one output of one request adds to its step. Timeline.Output
// returns it; Iteration.AddOutput sums it.
type Output struct {
	// First is true for the request's first output: PromptTokens and TTFT
	// are set on it, ITL on the others.
	First bool
	// PromptTokens is the prompt split by source; zero except on the first
	// output.
	PromptTokens PromptTokens
	// GenerationTokens is the number of tokens in this output (more than one
	// with speculative decoding).
	GenerationTokens int64
	// TTFT is the time to first token, arrival to this output, in seconds;
	// zero except on the first output.
	TTFT float64
	// ITL is the inter-token latency, the previous output of the request to
	// this one, in seconds; zero on the first output.
	ITL float64
	// Context is the request's context (Request.Context), with which its
	// TTFT or ITL is recorded; nil means the step's.
	Context context.Context
}

// Validate reports a bad count or latency, or prompt tokens or a TTFT on an
// output that is not the first, or an ITL on the first.
func (o Output) Validate() error {
	if err := o.PromptTokens.Validate(); err != nil {
		return prefixed("PromptTokens", err)
	}
	if !o.First && o.PromptTokens != (PromptTokens{}) {
		return fieldErr("PromptTokens", o.PromptTokens, ErrOutOfOrder)
	}
	if err := checkCount("GenerationTokens", o.GenerationTokens); err != nil {
		return err
	}
	if err := checkSeconds("TTFT", o.TTFT); err != nil {
		return err
	}
	if err := checkSeconds("ITL", o.ITL); err != nil {
		return err
	}
	if !o.First && o.TTFT != 0 {
		return fieldErr("TTFT", o.TTFT, ErrOutOfOrder)
	}
	if o.First && o.ITL != 0 {
		return fieldErr("ITL", o.ITL, ErrOutOfOrder)
	}
	return nil
}
