package instrument

import (
	"context"
	"fmt"

	"github.com/infermetrics/infermetrics/stats"
)

// Names of the P/D router families: the legs a prefill/decode router sends
// for one client request (Engine.RecordPDLegs). Neither vLLM nor the routers
// in front of it (vllm-project/router, SGLang's router, llm-d, the Gateway
// API Inference Extension) define per-leg families, so they follow
// OpenTelemetry's naming rules and keep these names in every export.
const (
	NamePDPrefillLegDuration        = "router.pd.prefill_leg.duration"
	NamePDDecodeLegTimeToFirstChunk = "router.pd.decode_leg.time_to_first_chunk"
	NamePDHandoffDuration           = "router.pd.handoff.duration"
)

// NameGatewayRequestAttempts is how many requests (legs) a gateway or router
// sent upstream for one client request: 1 without a retry, more with
// retries and fallbacks to another backend (Engine.RecordAttempts). Ours,
// as the P/D router families: neither vLLM nor the GenAI conventions
// define one.
const NameGatewayRequestAttempts = "infermetrics.gateway.request.attempts"

// MaxAttempts bounds the attempts of one client request RecordAttempts
// takes, far above any retry policy: a value above is refused.
const MaxAttempts = 1 << 16

// RecordAttempts records how many requests (legs) a gateway or router sent
// upstream for one client request, at its end: package openaihttp's
// handler records the legs its Trace holds, for a request whose transport
// sent any. A count below 1 or above MaxAttempts is refused: nothing is
// recorded, and the refusal is counted and reported (see RecordIteration).
func (e *Engine) RecordAttempts(ctx context.Context, n int64) {
	if err := e.recordAttempts(ctx, n); err != nil {
		e.refuse(refusedRequest, "RecordAttempts", err)
	}
}

// recordAttempts is RecordAttempts, returning its refusal.
func (e *Engine) recordAttempts(ctx context.Context, n int64) error {
	if err := e.usable(false); err != nil {
		return err
	}
	if n < 1 || n > MaxAttempts {
		return fmt.Errorf("instrument: attempts %d: %w (want 1 to %d)", n, stats.ErrOutOfRange, MaxAttempts)
	}
	e.inst.gatewayAttempts.Record(ctx, n, e.plain.rec...)
	return nil
}

// PDRouting says the P/D router families' series appear with the first
// routed request (Engine.RecordPDLegs).
const PDRouting Feature = HTTPClient + 1

const perRouted = "each client request routed to a prefill and a decode backend (Engine.RecordPDLegs)"

// RecordPDLegs records the legs of one client request a P/D router sent to
// a prefill and then a decode backend: the prefill leg's latency, the
// handoff gap when there is one and the decode leg's time to first chunk
// when streamed. Package openaihttp's handler calls it once per routed
// request, after RecordRequest. Invalid legs are refused: nothing of them
// is recorded, and the refusal is counted and reported (see
// RecordIteration).
func (e *Engine) RecordPDLegs(ctx context.Context, l *stats.PDLegs) {
	if err := e.recordPDLegs(ctx, l); err != nil {
		e.refuse(refusedPDLegs, "RecordPDLegs", err)
	}
}

// recordPDLegs is RecordPDLegs, returning its refusal.
func (e *Engine) recordPDLegs(ctx context.Context, l *stats.PDLegs) error {
	if err := e.usable(l == nil); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	in, rec := e.inst, e.plain.rec
	in.pdPrefillLeg.Record(ctx, l.PrefillLatency, rec...)
	if l.Handoff {
		in.pdHandoff.Record(ctx, l.HandoffGap, rec...)
	}
	if l.DecodeFirstToken {
		in.pdDecodeFirstChunk.Record(ctx, l.DecodeTimeToFirstToken, rec...)
	}
	return nil
}
