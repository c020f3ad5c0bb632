package instrument

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

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
		Attributes:  append(genAIAttrs[:len(genAIAttrs):len(genAIAttrs)], KeyErrorType),
		Description: "GenAI server request duration: from a request's arrival to its last output token or failure."},
	{Name: NameGenAIServerTimeToFirstToken, Kind: Histogram, Unit: "s", Buckets: genAIFirstChunkBuckets,
		Recorded: perIter + " for a request's first token; RecordRequest for a streamed one", Feature: GenAISemconv,
		Attributes:  genAIAttrs,
		Description: "Time from a request's arrival to its first output token."},
	{Name: NameGenAIServerTimePerOutputToken, Kind: Histogram, Unit: "s", Buckets: genAIPerChunkBuckets,
		Recorded: perFinished + ", successful requests with more than one output token; RecordRequest alike", Feature: GenAISemconv,
		Attributes:  genAIAttrs,
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
	// byError are the request duration's sets with an error.type, built
	// on first use (measureKey).
	byError measureCache
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

// recordServerTTFT records a first token's time on the GenAI server TTFT;
// op is valid.
func (e *engineState) recordServerTTFT(ctx context.Context, op stats.Operation, v float64) {
	if e.server.on {
		e.inst.serverTTFT.Record(ctx, v, e.server.ok[op].rec...)
	}
}

// recordServerFinished records a finished request on the GenAI server
// request duration, with the error.type of t (see errorTypeOf) and, when it
// did not fail and tpot is the time per output token of more than one
// token (manyTokens), on the time per output token: the conventions' "time
// per output token generated after the first token for successful
// responses".
func (e *engineState) recordServerFinished(ctx context.Context, op stats.Operation, r stats.FinishReason, t stats.ErrorType, e2e, tpot float64, manyTokens bool) {
	s := &e.server
	if !s.on {
		return
	}
	m := &s.ok[op]
	if t = errorTypeOf(r, t); t != stats.ErrorNone {
		m = s.byError.get(measureKey(measureDuration, op, t), func() measure {
			return newMeasure(append(e.genAIKV(op), attribute.String(KeyErrorType, t.String()))...)
		})
	}
	e.inst.serverDuration.Record(ctx, e2e, m.rec...)
	if r != stats.FinishError && manyTokens {
		e.inst.serverTPOT.Record(ctx, tpot, s.ok[op].rec...)
	}
}
