package stats

import (
	"context"
	"fmt"
	"unicode/utf8"
)

// FinishReason says why a request stopped: FinishStop, FinishLength,
// FinishAbort, FinishError or FinishRepetition (finished_reason "stop",
// "length", "abort", "error", "repetition").
type FinishReason uint8

const (
	// FinishStop: a stop string or token ended the request.
	FinishStop FinishReason = iota
	// FinishLength: the request reached max_tokens or the model's length limit.
	FinishLength
	// FinishAbort: the client or the engine aborted the request.
	FinishAbort
	// FinishError: the request failed.
	FinishError
	// FinishRepetition: repetition detection stopped the request.
	FinishRepetition

	numFinishReasons = iota
)

var finishReasonLabels = [numFinishReasons]string{"stop", "length", "abort", "error", "repetition"}

// FinishReasons returns every FinishReason in label order.
func FinishReasons() []FinishReason {
	return []FinishReason{FinishStop, FinishLength, FinishAbort, FinishError, FinishRepetition}
}

// String returns the finished_reason label value: "stop", "length", "abort",
// "error" or "repetition".
func (r FinishReason) String() string {
	if int(r) < numFinishReasons {
		return finishReasonLabels[r]
	}
	return "unknown"
}

// Validate reports ErrUnknownFinishReason for a value not in FinishReasons().
func (r FinishReason) Validate() error {
	if int(r) >= numFinishReasons {
		return fieldErr("Reason", uint8(r), ErrUnknownFinishReason)
	}
	return nil
}

// FinishedRequest is what one finished request reports, once. Durations are
// in seconds. A Timeline fills it; an engine may also fill it directly.
type FinishedRequest struct {
	Reason FinishReason
	// PromptTokens is the prompt length, 0 for a request that finished
	// before its length was known (Timeline.Tokenized): the request-level
	// prompt histograms then observe nothing for it, as vLLM never observes
	// an empty prompt. GenerationTokens is the tokens it emitted.
	PromptTokens     int64
	GenerationTokens int64
	// PrefillComputedTokens is the prompt tokens computed here (prompt - cached).
	PrefillComputedTokens int64
	// MaxTokens is the max_tokens parameter; 0 means it was not set.
	MaxTokens int64

	// N is the sampling parameter n of the request's parent; 0 means 1.
	N int64
	// MaxGenerationTokens is the most tokens any of the parent's children
	// generated; 0 means GenerationTokens, right for n = 1.
	MaxGenerationTokens int64
	// ParentPending marks a child of an n > 1 request that is not the last
	// to finish: request_params_n and request_max_num_generation_tokens are
	// observed once per parent, on its last child, so not on this one. The
	// Timeline sets it; the zero value (every n = 1 request) observes them.
	ParentPending bool

	E2ELatency    float64 // arrival to finish
	QueueTime     float64 // queued to first scheduled
	PrefillTime   float64 // first scheduled to first token
	InferenceTime float64 // first scheduled to last token
	DecodeTime    float64 // first token to last token
	// TimePerOutputToken is DecodeTime / (GenerationTokens - 1), or 0 when
	// GenerationTokens <= 1.
	TimePerOutputToken float64

	// Priority is the request's scheduling priority (lower is more urgent),
	// exported only under priority scheduling: bucketed as the priority
	// label (BucketPriority) and raw in vllm:request_priority.
	Priority int
	// TimeToFirstToken is arrival to first output, 0 without an output.
	// Under priority scheduling TTFT is observed from it, at the finish, so
	// that it carries the priority label; otherwise from Iteration.TTFT.
	TimeToFirstToken float64
	// Preemptions is how many times the request was preempted
	// (vllm:request_num_preemptions, observed for every finished request,
	// 0 included).
	Preemptions int64
	// Context is the request's context (Request.Context), with which its
	// latencies are recorded so that their exemplars name its trace; nil
	// means the context passed to the Record call.
	Context context.Context
}

// Parent returns what request_params_n and request_max_num_generation_tokens
// observe for f, with their defaults applied (n 1, the request's own
// generation tokens), and false when ParentPending says another child of the
// parent will.
func (f FinishedRequest) Parent() (n, maxGenerationTokens int64, observe bool) {
	if f.ParentPending {
		return 0, 0, false
	}
	n, maxGenerationTokens = max(f.N, 1), f.MaxGenerationTokens
	if maxGenerationTokens == 0 {
		maxGenerationTokens = f.GenerationTokens
	}
	return n, maxGenerationTokens, true
}

// Validate reports the first bad field: an unknown reason, a negative count, a
// NaN, infinite, negative or above-MaxSeconds duration, more computed tokens
// than the prompt, a parent maximum below the request's own generation
// tokens (or other than them for n = 1), or ParentPending on an n = 1
// request or with a parent maximum.
func (f FinishedRequest) Validate() error {
	if err := f.Reason.Validate(); err != nil {
		return err
	}
	for _, c := range [...]struct {
		name string
		v    int64
	}{
		{"PromptTokens", f.PromptTokens},
		{"GenerationTokens", f.GenerationTokens},
		{"PrefillComputedTokens", f.PrefillComputedTokens},
		{"MaxTokens", f.MaxTokens},
		{"N", f.N},
		{"MaxGenerationTokens", f.MaxGenerationTokens},
		{"Preemptions", f.Preemptions},
	} {
		if err := checkCount(c.name, c.v); err != nil {
			return err
		}
	}
	if f.PrefillComputedTokens > f.PromptTokens {
		return hintedErr("PrefillComputedTokens", f.PrefillComputedTokens, ErrOutOfRange, fmt.Sprintf("more than PromptTokens (%d)", f.PromptTokens))
	}
	if err := f.checkParent(); err != nil {
		return err
	}
	for _, d := range [...]struct {
		name string
		v    float64
	}{
		{"E2ELatency", f.E2ELatency},
		{"QueueTime", f.QueueTime},
		{"PrefillTime", f.PrefillTime},
		{"InferenceTime", f.InferenceTime},
		{"DecodeTime", f.DecodeTime},
		{"TimePerOutputToken", f.TimePerOutputToken},
		{"TimeToFirstToken", f.TimeToFirstToken},
	} {
		if err := checkSeconds(d.name, d.v); err != nil {
			return err
		}
	}
	return nil
}

// checkParent reports N, MaxGenerationTokens and ParentPending that
// contradict each other or the request's own generation tokens.
func (f FinishedRequest) checkParent() error {
	switch n := max(f.N, 1); {
	case f.ParentPending && n == 1:
		// A request with n = 1 has no other child to report its parent.
		return hintedErr("N", f.N, ErrOutOfRange, "ParentPending needs N of 2 or more")
	case f.ParentPending && f.MaxGenerationTokens != 0:
		// Only the last child knows the parent's maximum.
		return hintedErr("MaxGenerationTokens", f.MaxGenerationTokens, ErrOutOfRange, "want 0 with ParentPending: only the last child reports it")
	case f.ParentPending || f.MaxGenerationTokens == 0:
		return nil
	case f.MaxGenerationTokens < f.GenerationTokens, n == 1 && f.MaxGenerationTokens != f.GenerationTokens:
		return hintedErr("MaxGenerationTokens", f.MaxGenerationTokens, ErrOutOfRange,
			fmt.Sprintf("want at least GenerationTokens (%d), equal with N of 1", f.GenerationTokens))
	}
	return nil
}

// checkLabel reports an empty (when required) or non-UTF-8 label value.
func checkLabel(field, v string, required bool) error {
	if (required && v == "") || !utf8.ValidString(v) {
		return fieldErr(field, v, ErrInvalidLabel)
	}
	return nil
}
