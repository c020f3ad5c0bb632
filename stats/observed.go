package stats

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ObservedRequest is what a front end observes of one finished request: an
// OpenAI-compatible server, a gateway or a router, which sees the HTTP
// request, the streamed chunks and the usage object but no engine step.
// Durations are in seconds from the request's arrival. Token counts are
// those of the response's usage object; without one (UsageKnown false) they
// stay zero and no token family is recorded.
type ObservedRequest struct {
	// Operation is the request's GenAI operation, from its endpoint;
	// OperationDefault keeps the Recorder's configured one.
	Operation  Operation
	Reason     FinishReason
	E2ELatency float64 // arrival to the end of the response

	// FirstToken is set when a content chunk was observed (a streamed
	// response); TimeToFirstToken is then arrival to the first content
	// chunk and TimeToLastToken arrival to the last. Both are 0 otherwise.
	FirstToken       bool
	TimeToFirstToken float64
	TimeToLastToken  float64

	// DecodeChoices, when above 1, is the number of choices (n > 1) that
	// streamed content, and ChoicesDecodeTime the sum over them of each
	// choice's own first-to-last content chunk time. The time per output
	// token is then per choice (see TimePerOutputToken). 0 for one choice.
	DecodeChoices     int64
	ChoicesDecodeTime float64

	// ServerTimes is set when the server reported how long it spent on the
	// prompt and on generating (Ollama's prompt_eval_duration and
	// eval_duration, llama.cpp's timings.prompt_ms and predicted_ms);
	// PrefillTime and DecodeTime are then those, in seconds, recorded as
	// vllm:request_prefill_time_seconds and
	// vllm:request_decode_time_seconds. They are the server's figures, not
	// observed times.
	ServerTimes bool
	PrefillTime float64
	DecodeTime  float64

	// UsageKnown is set when the response reported usage.
	UsageKnown bool
	// PromptTokens, GenerationTokens and CachedPromptTokens are usage's
	// prompt_tokens, completion_tokens and
	// prompt_tokens_details.cached_tokens. CachedPromptTokens may exceed
	// PromptTokens as an upstream reported them (a provider whose
	// prompt_tokens leaves the cached part out): the split of the prompt
	// is then unknown, and Bounded drops it.
	PromptTokens       int64
	GenerationTokens   int64
	CachedPromptTokens int64
	// CachedByKVTransfer says the cached prompt tokens arrived through a KV
	// connector (source external_kv_transfer), as on the decode leg of a
	// prefill/decode disaggregated deployment; otherwise they are local
	// prefix cache hits (local_cache_hit).
	CachedByKVTransfer bool

	// Details are the kinds of tokens the usage broke out beyond the prompt
	// and generation counts: TokenCacheRead when the usage had a cached
	// count (CachedPromptTokens, then, is that count), TokenCacheWrite (a
	// part of PromptTokens beside the cached ones), TokenReasoning and the
	// audio and image kinds. Only those kinds may be set; a kind the usage
	// did not report is not set, and is recorded nowhere. Tokens derives
	// the input and output kinds.
	Details TokenUsage

	// ErrorType says why a request failed (Reason FinishError) or was
	// aborted (FinishAbort: ErrorClientCanceled, ErrorTimeout, ...);
	// ErrorNone for a request that did neither, and ErrorNone for a failed
	// one is recorded as ErrorOther.
	ErrorType ErrorType
	// ResponseModel is the model the response named
	// (gen_ai.response.model, a dated snapshot of the requested one, for
	// example); "" when it named none.
	ResponseModel string
	// Cost is what the request cost, from a price table.
	Cost Cost
	// Attribution holds the request's value of each attribution dimension
	// of the Recorder (instrument.WithAttribution), in their order; a
	// missing value is "".
	Attribution []string

	// MaxTokens and N are the request's max_tokens and n parameters; 0
	// means not set. Priority is its scheduling priority, if any.
	MaxTokens int64
	N         int64
	Priority  int
}

// Validate reports the first bad field: an unknown operation or reason, a
// negative count, token counts without UsageKnown, a NaN, infinite,
// negative or above-MaxSeconds duration, token times without FirstToken,
// or times out of order (first token <= last token <= end). Counts from
// upstreams that cannot be (above MaxRequestTokens, cached tokens above
// the prompt) are not refused: Bounded drops them for their request.
func (r ObservedRequest) Validate() error {
	if err := r.Operation.Validate(); err != nil {
		return err
	}
	if err := r.Reason.Validate(); err != nil {
		return err
	}
	for _, c := range [...]struct {
		name string
		v    int64
	}{
		{"PromptTokens", r.PromptTokens},
		{"GenerationTokens", r.GenerationTokens},
		{"CachedPromptTokens", r.CachedPromptTokens},
		{"MaxTokens", r.MaxTokens},
		{"N", r.N},
		{"DecodeChoices", r.DecodeChoices},
	} {
		if err := checkCount(c.name, c.v); err != nil {
			return err
		}
		if c.name != "MaxTokens" && c.name != "N" && c.name != "DecodeChoices" && !r.UsageKnown && c.v != 0 {
			// Counts without usage would be invented.
			return hintedErr(c.name, c.v, ErrOutOfRange, "want 0 without UsageKnown")
		}
	}
	if err := r.ErrorType.Validate(); err != nil {
		return err
	}
	if r.ErrorType != ErrorNone && r.Reason != FinishError && r.Reason != FinishAbort {
		return hintedErr("ErrorType", r.ErrorType.String(), ErrOutOfRange, "want ErrorNone unless Reason is FinishError or FinishAbort")
	}
	if err := r.validateDetails(); err != nil {
		return err
	}
	if err := r.Cost.Validate(); err != nil {
		return err
	}
	for _, d := range [...]struct {
		name string
		v    float64
	}{
		{"E2ELatency", r.E2ELatency},
		{"TimeToFirstToken", r.TimeToFirstToken},
		{"TimeToLastToken", r.TimeToLastToken},
		{"ChoicesDecodeTime", r.ChoicesDecodeTime},
		{"PrefillTime", r.PrefillTime},
		{"DecodeTime", r.DecodeTime},
	} {
		if err := checkSeconds(d.name, d.v); err != nil {
			return err
		}
	}
	switch {
	case !r.FirstToken && r.DecodeChoices != 0:
		return fieldErr("DecodeChoices", r.DecodeChoices, ErrOutOfRange)
	case r.DecodeChoices <= 1 && r.ChoicesDecodeTime != 0:
		return fieldErr("ChoicesDecodeTime", r.ChoicesDecodeTime, ErrOutOfRange)
	case !r.ServerTimes && (r.PrefillTime != 0 || r.DecodeTime != 0):
		return fieldErr("PrefillTime", r.PrefillTime+r.DecodeTime, ErrOutOfRange)
	case !r.FirstToken && r.TimeToFirstToken != 0:
		return hintedErr("TimeToFirstToken", r.TimeToFirstToken, ErrOutOfRange, "want 0 without FirstToken")
	case !r.FirstToken && r.TimeToLastToken != 0:
		return hintedErr("TimeToLastToken", r.TimeToLastToken, ErrOutOfRange, "want 0 without FirstToken")
	case r.TimeToLastToken < r.TimeToFirstToken:
		return fieldErr("TimeToLastToken", r.TimeToLastToken, ErrOutOfOrder)
	case r.TimeToLastToken > r.E2ELatency:
		return fieldErr("E2ELatency", r.E2ELatency, ErrOutOfOrder)
	}
	return nil
}

// MaxRequestTokens bounds every count of one observed request (its usage,
// max_tokens and n), far above the longest context any model serves. A
// front end's counts come from clients and upstreams it does not control:
// with each request's counts at most this, the totals of instrument's
// families (at most 2^53, instrument.MaxTotal) need over 2^26 requests at
// the bound to fill,
// where a single request of max_tokens 2^63-1 would otherwise make every
// later one unrecordable.
const MaxRequestTokens = 1 << 27

// Bounded returns r with its absurd counts dropped, for this request
// alone: MaxTokens or N above MaxRequestTokens as not set (0), usage with
// a count above it as unknown, and cached tokens above the prompt as
// unknown (0): the prompt and generation tokens still count, the prompt
// all computed, as with usage that has no cached count. err says what was
// dropped (matching ErrOutOfRange, or ErrCachedExceedsPrompt for the
// cached tokens); it is nil when nothing was.
func (r ObservedRequest) Bounded() (ObservedRequest, error) {
	var errs []error
	if r.MaxTokens > MaxRequestTokens {
		errs = append(errs, fieldErr("MaxTokens", r.MaxTokens, ErrOutOfRange))
		r.MaxTokens = 0
	}
	if r.N > MaxRequestTokens {
		errs = append(errs, fieldErr("N", r.N, ErrOutOfRange))
		r.N = 0
	}
	usage := len(errs)
	if r.PromptTokens > MaxRequestTokens {
		errs = append(errs, fieldErr("PromptTokens", r.PromptTokens, ErrOutOfRange))
	}
	if r.GenerationTokens > MaxRequestTokens {
		errs = append(errs, fieldErr("GenerationTokens", r.GenerationTokens, ErrOutOfRange))
	}
	if len(errs) > usage {
		r.UsageKnown, r.PromptTokens, r.GenerationTokens, r.CachedPromptTokens = false, 0, 0, 0
	}
	if r.cachedUnknown() {
		errs = append(errs, hintedErr("CachedPromptTokens", r.CachedPromptTokens, ErrCachedExceedsPrompt,
			fmt.Sprintf("above PromptTokens (%d): the split of the prompt is unknown, all of it computed", r.PromptTokens)))
		r.CachedPromptTokens = 0
		r.Details.drop(TokenCacheRead)
	}
	errs = append(errs, r.boundDetails()...)
	if r.ResponseModel != "" && (len(r.ResponseModel) > MaxResponseModelLen || !utf8.ValidString(r.ResponseModel)) {
		errs = append(errs, hintedErr("ResponseModel", len(r.ResponseModel), ErrInvalidLabel, "want UTF-8 of at most 256 bytes: dropped"))
		r.ResponseModel = ""
	}
	return r, errors.Join(errs...)
}

// MaxResponseModelLen bounds ResponseModel, in bytes (as instrument bounds
// a model name).
const MaxResponseModelLen = 256

// detailKinds are the kinds Details may hold.
const detailKinds = 1<<TokenCacheRead | 1<<TokenCacheWrite | 1<<TokenReasoning |
	1<<TokenInputAudio | 1<<TokenInputImage | 1<<TokenOutputAudio | 1<<TokenOutputImage

// validateDetails refuses details that cannot be: a kind Details may not
// hold (input and output are derived), a negative count, details without
// usage, or a cache read count other than CachedPromptTokens.
func (r ObservedRequest) validateDetails() error {
	if r.Details.Known&^detailKinds != 0 {
		return hintedErr("Details.Known", r.Details.Known, ErrOutOfRange, "input and output are derived from the usage: set only the other kinds")
	}
	for _, k := range TokenKinds() {
		n, ok := r.Details.Get(k)
		if !ok {
			if r.Details.Tokens[k] != 0 {
				return hintedErr("Details."+k.String(), r.Details.Tokens[k], ErrOutOfRange, "want 0 for a kind not Known")
			}
			continue
		}
		if n < 0 { // the field's name built only then: validation allocates nothing
			return checkCount("Details."+k.String(), n)
		}
		if !r.UsageKnown {
			return hintedErr("Details."+k.String(), n, ErrOutOfRange, "want no details without UsageKnown")
		}
	}
	if n, ok := r.Details.Get(TokenCacheRead); ok && n != r.CachedPromptTokens {
		return hintedErr("Details.cache_read", n, ErrOutOfRange, fmt.Sprintf("want CachedPromptTokens (%d)", r.CachedPromptTokens))
	}
	return nil
}

// boundDetails drops, for this request, each detail kind that is more than
// the tokens it is a part of (an upstream's counts, which Validate cannot
// refuse), and returns what it dropped.
func (r *ObservedRequest) boundDetails() []error {
	var errs []error
	part := func(k TokenKind, whole int64, of string) {
		if n, ok := r.Details.Get(k); ok && (n > whole || n > MaxRequestTokens) {
			errs = append(errs, hintedErr("Details."+k.String(), n, ErrDetailExceedsTotal, "above "+of+": dropped"))
			r.Details.drop(k)
		}
	}
	part(TokenCacheWrite, r.PromptTokens-r.CachedPromptTokens, "the prompt tokens not cached")
	part(TokenReasoning, r.GenerationTokens, "GenerationTokens")
	audio, _ := r.Details.Get(TokenInputAudio)
	part(TokenInputAudio, r.PromptTokens, "PromptTokens")
	part(TokenInputImage, r.PromptTokens-min(audio, r.PromptTokens), "PromptTokens less the audio ones")
	audio, _ = r.Details.Get(TokenOutputAudio)
	part(TokenOutputAudio, r.GenerationTokens, "GenerationTokens")
	part(TokenOutputImage, r.GenerationTokens-min(audio, r.GenerationTokens), "GenerationTokens less the audio ones")
	return errs
}

// Tokens returns the request's tokens by kind: input (the prompt less its
// cache reads and writes) and output whenever the usage is known, and each
// kind of Details. It is empty without usage.
func (r ObservedRequest) Tokens() TokenUsage {
	if !r.UsageKnown {
		return TokenUsage{}
	}
	u := r.Details
	cached := r.CachedPromptTokens
	if r.cachedUnknown() {
		cached = 0
		u.drop(TokenCacheRead)
	}
	write, _ := u.Get(TokenCacheWrite)
	u.Set(TokenInput, max(r.PromptTokens-cached-write, 0))
	u.Set(TokenOutput, r.GenerationTokens)
	return u
}

// cachedUnknown reports cached tokens above the prompt: a split no prompt
// has, so unknown (see Bounded).
func (r ObservedRequest) cachedUnknown() bool {
	return r.CachedPromptTokens > r.PromptTokens
}

// Prompt returns the usage's prompt tokens by source: the cached ones as
// local cache hits, or as external KV transfer with CachedByKVTransfer, the
// rest computed (all of them with cached tokens above the prompt, see
// Bounded). It is zero without usage.
func (r ObservedRequest) Prompt() PromptTokens {
	if !r.UsageKnown {
		return PromptTokens{}
	}
	if r.cachedUnknown() {
		r.CachedPromptTokens = 0
	}
	p := PromptTokens{Computed: r.PromptTokens - r.CachedPromptTokens}
	if r.CachedByKVTransfer {
		p.ExternalKVTransfer = r.CachedPromptTokens
	} else {
		p.LocalCacheHit = r.CachedPromptTokens
	}
	return p
}

// TimePerOutputToken returns (last token - first token) / (generation
// tokens - 1), as vLLM defines it from the decode time, and whether it is
// known: it needs the token times (FirstToken) and usage. It is 0 with one
// generation token or none.
//
// With DecodeChoices k > 1 it is per choice: vLLM runs each of the n
// choices as a request of its own, with TPOT_i = decode_i / (tokens_i - 1).
// Usage sums the choices' tokens, so the tokens_i are unknown; what is
// returned is their token-weighted mean, sum(decode_i) / sum(tokens_i - 1)
// = ChoicesDecodeTime / (generation tokens - k), exact without the
// tokens_i. It is 0 when the choices have one token each or fewer.
func (r ObservedRequest) TimePerOutputToken() (float64, bool) {
	if !r.FirstToken || !r.UsageKnown {
		return 0, false
	}
	if r.DecodeChoices > 1 {
		if r.GenerationTokens <= r.DecodeChoices {
			return 0, true
		}
		return r.ChoicesDecodeTime / float64(r.GenerationTokens-r.DecodeChoices), true
	}
	if r.GenerationTokens <= 1 {
		return 0, true
	}
	return (r.TimeToLastToken - r.TimeToFirstToken) / float64(r.GenerationTokens-1), true
}

// CheckSeconds reports a duration this package would not accept: NaN,
// infinite, negative or above MaxSeconds. field names it in the error.
func CheckSeconds(field string, v float64) error { return checkSeconds(field, v) }

// PDLegs is what a prefill/decode (P/D) router observed of the two legs it
// sent for one client request, in seconds: the prefill leg's latency, the
// decode leg's time to first token and the handoff gap between them. The
// client request's own figures (TTFT from arrival at the router, e2e,
// tokens) are an ObservedRequest.
type PDLegs struct {
	// PrefillLatency is from sending the prefill leg to the end of its
	// response.
	PrefillLatency float64
	// Handoff is set when the decode leg was sent after the prefill leg
	// ended (a router that sends both at once has none); HandoffGap is
	// then from the end of the prefill leg to the start of the decode leg.
	Handoff    bool
	HandoffGap float64
	// DecodeFirstToken is set when the decode leg streamed a content
	// chunk; DecodeTimeToFirstToken is then from sending the decode leg to
	// its first content chunk.
	DecodeFirstToken       bool
	DecodeTimeToFirstToken float64
}

// Validate reports the first bad field: a NaN, infinite, negative or
// above-MaxSeconds duration, or a handoff gap or decode time to first
// token without its flag.
func (l PDLegs) Validate() error {
	for _, d := range [...]struct {
		name string
		v    float64
	}{
		{"PrefillLatency", l.PrefillLatency},
		{"HandoffGap", l.HandoffGap},
		{"DecodeTimeToFirstToken", l.DecodeTimeToFirstToken},
	} {
		if err := checkSeconds(d.name, d.v); err != nil {
			return err
		}
	}
	switch {
	case !l.Handoff && l.HandoffGap != 0:
		return hintedErr("HandoffGap", l.HandoffGap, ErrOutOfRange, "want 0 without Handoff")
	case !l.DecodeFirstToken && l.DecodeTimeToFirstToken != 0:
		return hintedErr("DecodeTimeToFirstToken", l.DecodeTimeToFirstToken, ErrOutOfRange, "want 0 without DecodeFirstToken")
	}
	return nil
}
