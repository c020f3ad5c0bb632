package instrument

import (
	"context"

	"github.com/infermetrics/infermetrics/stats"
)

// Names of the OpenTelemetry GenAI server metrics (semantic conventions,
// status Development: open-telemetry/semantic-conventions-genai,
// docs/gen-ai/gen-ai-metrics.md), recorded with WithGenAISemconv. Like the
// client metrics they keep their OpenTelemetry names in every export.
const (
	NameGenAIServerRequestDuration    = "gen_ai.server.request.duration"
	NameGenAIServerTimeToFirstToken   = "gen_ai.server.time_to_first_token"
	NameGenAIServerTimePerOutputToken = "gen_ai.server.time_per_output_token"
)

// GenAISemconv says the GenAI server metrics' series appear with their first
// measurement, on a Recorder built WithGenAISemconv.
const GenAISemconv Feature = PDRouting + 1

// serverCatalog is the catalog of the GenAI server metrics, which
// ServerDescriptors returns; lookup finds them with the others. They carry
// only the GenAI attributes, so that the views exporting them need no
// attribute filter (a filter makes every sampled exemplar allocate).
var serverCatalog = []Descriptor{
	{Name: NameGenAIServerRequestDuration, Kind: Histogram, Unit: "s", Buckets: genAIDurationBuckets,
		Recorded: perFinished + "; each request of a front end (RecordRequest)", Feature: GenAISemconv,
		Attributes:  withKeys(genAIAttrs, KeyErrorType, KeyGenAIResponseModel),
		Description: "GenAI server request duration: from a request's arrival to its last output token or failure."},
	{Name: NameGenAIServerTimeToFirstToken, Kind: Histogram, Unit: "s", Buckets: genAIServerTTFTBuckets,
		Recorded: perIter + " for a request's first token; RecordRequest for a streamed one", Feature: GenAISemconv,
		Attributes:  withKeys(genAIAttrs, KeyGenAIResponseModel),
		Description: "Time from a request's arrival to its first output token."},
	{Name: NameGenAIServerTimePerOutputToken, Kind: Histogram, Unit: "s", Buckets: genAIServerTPOTBuckets,
		Recorded: perFinished + ", successful requests with more than one output token; RecordRequest alike", Feature: GenAISemconv,
		Attributes:  withKeys(genAIAttrs, KeyGenAIResponseModel),
		Description: "Time per output token generated after the first, of successful requests: decode time / (generation tokens - 1)."},
}

// ServerDescriptors returns the GenAI server metrics the Recorder creates
// beside those of Descriptors, in a stable order. Only a Recorder built
// WithGenAISemconv records them.
func ServerDescriptors() []Descriptor { return copyDescriptors(serverCatalog) }

// WithGenAISemconv records the OpenTelemetry GenAI server metrics
// (gen_ai.server.request.duration, gen_ai.server.time_to_first_token,
// gen_ai.server.time_per_output_token) on instruments of their own, with
// the GenAI attributes of WithGenAI, beside vLLM's. views.Semconv shapes
// them. Off by default: each is one more histogram measurement per request.
// The server metrics follow the conventions, not vLLM: the time per output
// token counts successful requests with more than one output token only.
func WithGenAISemconv() Option {
	return optionFunc(func(c *config) { c.genAISemconv = true })
}

// serverMeasures are an engine's attribute sets of the GenAI server metrics,
// by stats.Operation (gen_ai.operation.name).
type serverMeasures struct {
	on bool                         // WithGenAISemconv
	ok [stats.NumOperations]measure // the GenAI attributes
	// cache are the sets with an error.type or a gen_ai.response.model,
	// built on first use (measureKey).
	cache measureCache
}

// buildServer builds the GenAI server measures of every operation: the
// GenAI attributes only, no model_name, engine or constant attribute (see
// serverCatalog).
func (e *engineState) buildServer(cfg *config) {
	s := &e.server
	if s.on = cfg.genAISemconv; !s.on {
		return
	}
	for _, op := range stats.Operations() {
		s.ok[op] = newMeasure(e.genAIKV(op)...)
	}
}

// serverMeasure returns the GenAI server set of an operation with the
// error.type of t (none for ErrorNone) and the response model of index
// model (none for 0).
func (e *engineState) serverMeasure(op stats.Operation, t stats.ErrorType, model int) *measure {
	s := &e.server
	if t == stats.ErrorNone && model == 0 {
		return &s.ok[op]
	}
	return s.cache.get(measureKey(measureGenAI, op, t, model), func() measure {
		return newMeasure(e.respModels.extraKV(e.genAIKV(op), t, model)...)
	})
}

// recordServerTTFT records a first token's time on the GenAI server TTFT,
// with the response model of index model; op is valid.
func (e *engineState) recordServerTTFT(ctx context.Context, op stats.Operation, model int, v float64) {
	if e.server.on {
		e.inst.serverTTFT.Record(ctx, v, e.serverMeasure(op, stats.ErrorNone, model).rec...)
	}
}

// recordServerFinished records a finished request on the GenAI server
// request duration, with the error.type of t (see errorTypeOf) and the
// response model of index model, and, when it did not fail and tpot is the
// time per output token of more than one token (manyTokens), on the time
// per output token: the conventions' "time per output token generated
// after the first token for successful responses".
func (e *engineState) recordServerFinished(ctx context.Context, op stats.Operation, r stats.FinishReason, t stats.ErrorType, model int, e2e, tpot float64, manyTokens bool) {
	if !e.server.on {
		return
	}
	e.inst.serverDuration.Record(ctx, e2e, e.serverMeasure(op, errorTypeOf(r, t), model).rec...)
	if r != stats.FinishError && manyTokens {
		e.inst.serverTPOT.Record(ctx, tpot, e.serverMeasure(op, stats.ErrorNone, model).rec...)
	}
}
