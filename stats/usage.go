package stats

import (
	"math"
)

// TokenKind is a kind of token a provider bills or reports apart: the kind
// label of the usage families. Input, CacheRead and CacheWrite partition a
// request's prompt (their sum is its prompt tokens); Reasoning is a part of
// Output; the audio and image kinds are parts of the prompt (InputAudio,
// InputImage) or of the output (OutputAudio, OutputImage).
type TokenKind uint8

const (
	// TokenInput: prompt tokens neither read from nor written to a prompt
	// cache, billed at the plain input price.
	TokenInput TokenKind = iota
	// TokenCacheRead: prompt tokens read from a prompt cache (OpenAI's
	// prompt_tokens_details.cached_tokens, Anthropic's
	// cache_read_input_tokens, a server's prefix-cache hits).
	TokenCacheRead
	// TokenCacheWrite: prompt tokens written to a prompt cache (Anthropic's
	// cache_creation_input_tokens).
	TokenCacheWrite
	// TokenOutput: every generated token, reasoning included.
	TokenOutput
	// TokenReasoning: the output tokens spent reasoning (OpenAI's
	// completion_tokens_details.reasoning_tokens), a part of TokenOutput.
	TokenReasoning
	// TokenInputAudio: prompt tokens of audio, a part of the prompt.
	TokenInputAudio
	// TokenInputImage: prompt tokens of images, a part of the prompt.
	TokenInputImage
	// TokenOutputAudio: output tokens of audio, a part of TokenOutput.
	TokenOutputAudio
	// TokenOutputImage: output tokens of images, a part of TokenOutput.
	TokenOutputImage
	numTokenKinds
)

// NumTokenKinds is the number of TokenKind values: an array indexed by a
// TokenKind has this length.
const NumTokenKinds = int(numTokenKinds)

var tokenKindNames = [numTokenKinds]string{
	"input", "cache_read", "cache_write", "output", "reasoning",
	"input_audio", "input_image", "output_audio", "output_image",
}

// TokenKinds returns every TokenKind, in the order of their values.
func TokenKinds() []TokenKind {
	k := make([]TokenKind, numTokenKinds)
	for i := range k {
		k[i] = TokenKind(i)
	}
	return k
}

// String returns the kind's label value ("input", "cache_read", ...).
func (k TokenKind) String() string {
	if k < numTokenKinds {
		return tokenKindNames[k]
	}
	return "unknown"
}

// TokenUsage is a request's tokens by kind, each kind with whether the
// response reported it: a kind not reported is unknown and recorded
// nowhere, never guessed.
type TokenUsage struct {
	Tokens [NumTokenKinds]int64
	Known  uint16 // bit 1<<k for each reported TokenKind k
}

// Set records n tokens of kind k as reported.
func (u *TokenUsage) Set(k TokenKind, n int64) {
	if k < numTokenKinds {
		u.Tokens[k], u.Known = n, u.Known|1<<k
	}
}

// Get returns the tokens of kind k and whether they were reported.
func (u TokenUsage) Get(k TokenKind) (int64, bool) {
	if k >= numTokenKinds || u.Known&(1<<k) == 0 {
		return 0, false
	}
	return u.Tokens[k], true
}

// drop makes kind k unknown.
func (u *TokenUsage) drop(k TokenKind) {
	if k < numTokenKinds {
		u.Tokens[k], u.Known = 0, u.Known&^(1<<k)
	}
}

// Has reports whether kind k was reported.
func (u TokenUsage) Has(k TokenKind) bool { return k < numTokenKinds && u.Known&(1<<k) != 0 }

// ErrorType says why a request failed: the error.type attribute of the
// request families that carry it. The zero value, ErrorNone, is a request
// that did not fail; a failed one with no known cause is ErrorOther
// ("_OTHER", the conventions' fallback).
type ErrorType uint8

const (
	// ErrorNone: the request did not fail (no error.type).
	ErrorNone ErrorType = iota
	// ErrorOther: failed for a cause not told apart ("_OTHER").
	ErrorOther
	// ErrorRateLimited: the provider refused for its rate limits or quota
	// (a 429 whose body is the provider's error).
	ErrorRateLimited
	// ErrorGatewayRateLimited: a 429 sent by a server in between (a
	// gateway, a load balancer), not by the provider, as the response shows.
	ErrorGatewayRateLimited
	// ErrorContextLengthExceeded: the prompt (with max_tokens) is longer
	// than the model's context.
	ErrorContextLengthExceeded
	// ErrorInvalidRequest: any other request the provider refused as bad
	// (400, 413, 422).
	ErrorInvalidRequest
	// ErrorAuthentication: missing or bad credentials (401).
	ErrorAuthentication
	// ErrorPermission: credentials without the right (403).
	ErrorPermission
	// ErrorNotFound: no such model or path (404).
	ErrorNotFound
	// ErrorOverloaded: the provider is overloaded (Anthropic's 529, an
	// overloaded error, a 503 that says so).
	ErrorOverloaded
	// ErrorAdmissionRejected: the server refused to queue the request, its
	// queue full (vLLM's --max-num-queued-reqs and --max-num-queued-tokens:
	// HTTP 503, counted in vllm:admission_rejections_total).
	ErrorAdmissionRejected
	// ErrorServerError: the provider failed (5xx not told apart otherwise).
	ErrorServerError
	// ErrorTimeout: the provider or a server in between timed out (408,
	// 504, a response that never came in time).
	ErrorTimeout
	// ErrorUpstreamUnreachable: no response came: the connection to the
	// upstream failed or was cut.
	ErrorUpstreamUnreachable
	// ErrorClientCanceled: the client went away before the response ended.
	ErrorClientCanceled
	numErrorTypes
)

// NumErrorTypes is the number of ErrorType values, ErrorNone included.
const NumErrorTypes = int(numErrorTypes)

var errorTypeNames = [numErrorTypes]string{
	"", "_OTHER", "rate_limited", "gateway_rate_limited", "context_length_exceeded",
	"invalid_request", "authentication", "permission", "not_found", "overloaded",
	"admission_rejected", "server_error", "timeout", "upstream_unreachable", "client_canceled",
}

// ErrorTypes returns every ErrorType but ErrorNone, ErrorOther first.
func ErrorTypes() []ErrorType {
	t := make([]ErrorType, 0, numErrorTypes-1)
	for i := ErrorOther; i < numErrorTypes; i++ {
		t = append(t, i)
	}
	return t
}

// String returns the error.type value ("rate_limited", ..., "_OTHER"), or
// "" for ErrorNone.
func (t ErrorType) String() string {
	if t < numErrorTypes {
		return errorTypeNames[t]
	}
	return "unknown"
}

// Validate reports ErrUnknownErrorType for a value not in ErrorTypes() nor
// ErrorNone.
func (t ErrorType) Validate() error {
	if t >= numErrorTypes {
		return fieldErr("ErrorType", uint8(t), ErrUnknownErrorType)
	}
	return nil
}

// MaxCost bounds the cost of one request, in the price table's currency:
// far above any request a provider bills, so that one absurd price cannot
// take a cost counter's float64 sum where later requests no longer add.
const MaxCost = 1e6

// Cost is what one request cost, from a price table, in the table's
// currency. Known is false for a request whose model has no price: such a
// request is counted as unpriced, never priced by a guess.
type Cost struct {
	Known bool
	// Charged is the cost of the request's tokens at their kinds' prices.
	Charged float64
	// Uncached is what the same tokens would have cost without a prompt
	// cache (cache reads and writes at the input price): Uncached - Charged
	// is what caching saved, negative when cache writes cost more than
	// the reads saved.
	Uncached float64
}

// Validate reports a cost that cannot be: NaN, infinite, negative or above
// MaxCost, or set without Known.
func (c Cost) Validate() error {
	for _, v := range [...]struct {
		name string
		v    float64
	}{{"Cost.Charged", c.Charged}, {"Cost.Uncached", c.Uncached}} {
		switch {
		case math.IsNaN(v.v) || math.IsInf(v.v, 0):
			return fieldErr(v.name, v.v, ErrNotFinite)
		case v.v < 0:
			return fieldErr(v.name, v.v, ErrNegative)
		case v.v > MaxCost:
			return hintedErr(v.name, v.v, ErrOutOfRange, "want at most MaxCost (1e6)")
		case !c.Known && v.v != 0:
			return hintedErr(v.name, v.v, ErrOutOfRange, "want 0 without Known")
		}
	}
	return nil
}
