package instrument

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/infermetrics/infermetrics/stats"
)

// Names of the OpenTelemetry GenAI client metrics (semantic conventions,
// status Development: open-telemetry/semantic-conventions-genai,
// docs/gen-ai/gen-ai-metrics.md), recorded per backend by a gateway or
// router through Engine.Backend. They keep their OpenTelemetry names in
// every export: vLLM has no client-side family.
const (
	NameGenAIClientTokenUsage         = "gen_ai.client.token.usage"
	NameGenAIClientOperationDuration  = "gen_ai.client.operation.duration"
	NameGenAIClientTimeToFirstChunk   = "gen_ai.client.operation.time_to_first_chunk"
	NameGenAIClientTimePerOutputChunk = "gen_ai.client.operation.time_per_output_chunk"
)

// Attribute keys of the client metrics.
const (
	// KeyBackend is the backend a leg went to: a name, or host:port.
	KeyBackend = "backend"
	// KeyBackendRole is the backend's role, for example prefill or decode
	// in a prefill/decode disaggregated deployment; empty when not given.
	KeyBackendRole = "backend.role"
	// KeyGenAITokenType is gen_ai.token.type of gen_ai.client.token.usage.
	KeyGenAITokenType = "gen_ai.token.type"
	// KeyServerAddress and KeyServerPort are the conventions' server.address
	// and server.port: the host and port of a backend named host:port (the
	// transport's default name), absent for a backend of another name.
	KeyServerAddress = "server.address"
	KeyServerPort    = "server.port"
)

// Values of gen_ai.token.type.
const (
	TokenTypeInput  = "input"
	TokenTypeOutput = "output"
)

// Backend roles of a prefill/decode disaggregated deployment.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// HTTPClient says the client metrics' series appear with a backend's first
// leg (Backend.RecordRequest), and the gateway's attempts with its first
// request that sent legs (RecordAttempts).
const HTTPClient Feature = KVConsumer + 1

const perLeg = "each request leg to a backend (Backend.RecordRequest)"

var clientAttrs = withKeys(genAIAttrs, KeyBackend, KeyBackendRole, KeyServerAddress, KeyServerPort)

// withKeys returns keys followed by more, in a slice of its own.
func withKeys(keys []string, more ...string) []string {
	return append(keys[:len(keys):len(keys)], more...)
}

// clientCatalog is the catalog of the client metrics, which ClientDescriptors
// returns; lookup finds them with the others.
var clientCatalog = []Descriptor{
	{Name: NameGenAIClientTokenUsage, Kind: Histogram, Integer: true, Unit: "{token}", Buckets: genAITokenUsageBuckets,
		Recorded: perLeg + ", when the response reported usage", Feature: HTTPClient,
		Attributes:  withKeys(clientAttrs, KeyGenAITokenType, KeyGenAIResponseModel),
		Description: "Number of input and output tokens used, from the usage object of the backend's response."},
	{Name: NameGenAIClientOperationDuration, Kind: Histogram, Unit: "s", Buckets: genAIDurationBuckets,
		Recorded: perLeg, Feature: HTTPClient,
		Attributes:  withKeys(clientAttrs, KeyErrorType, KeyGenAIResponseModel),
		Description: "GenAI operation duration: from sending the request to the backend to the end of its response."},
	{Name: NameGenAIClientTimeToFirstChunk, Kind: Histogram, Unit: "s", Buckets: genAIChunkBuckets,
		Recorded: perLeg + ", streamed responses with a content chunk", Feature: HTTPClient,
		Attributes:  withKeys(clientAttrs, KeyGenAIResponseModel),
		Description: "Time to receive the first content chunk of a streamed response, from sending the request to the backend."},
	{Name: NameGenAIClientTimePerOutputChunk, Kind: Histogram, Unit: "s", Buckets: genAIChunkBuckets,
		Recorded: "each content chunk after the first of a streamed response (Backend.RecordChunkGap)", Feature: HTTPClient,
		Attributes:  clientAttrs,
		Description: "Time between consecutive content chunks of a streamed response from the backend."},
}

// ClientDescriptors returns the GenAI client metrics the Recorder creates
// beside those of Descriptors, in a stable order.
func ClientDescriptors() []Descriptor { return copyDescriptors(clientCatalog) }

// Backend records the legs a gateway or router sends to one backend: the
// GenAI client metrics with the backend and backend.role attributes, and
// gen_ai.operation.name by each leg's stats.Operation. Get it from
// Engine.Backend once per backend (the Engine keeps it); its methods
// allocate nothing. It is safe for concurrent use.
type Backend struct {
	e    *Engine
	name string
	role string
	ops  [stats.NumOperations]clientMeasures
	// cache are the sets with an error.type or a gen_ai.response.model,
	// built on first use (measureKey).
	cache measureCache
}

// clientMeasures are a backend's attribute sets of one operation.
type clientMeasures struct {
	plain  measure
	input  measure
	output measure
}

type backendKey struct{ name, role string }

// backends are an engine's Backend handles by name and role.
type backends struct {
	mu       sync.RWMutex
	m        map[backendKey]*Backend
	overflow map[backendKey]*Backend // BackendOther's handles, at most 4
}

// maxBackends bounds the backends of one engine, so that a gateway taking
// the backend from untrusted input cannot grow the series without limit.
const maxBackends = 1024

// BackendOther is the backend (and role) that legs past the engine's first
// 1,024 backends, or with a name or role longer than MaxModelNameLen bytes,
// are recorded under: a gateway that takes backends from untrusted input
// (a header, a URL) keeps a bounded number of series.
const BackendOther = "_OTHER"

// Backend returns the handle of one backend (name or host:port) and role
// (RolePrefill, RoleDecode, or any other label; "" for none), built on first
// use. It returns an error matching stats.ErrInvalidLabel for an empty or
// non-UTF-8 name or a non-UTF-8 role. Past 1,024 backends of the engine, a
// new backend gets the handle of BackendOther (with its role when that is
// "", RolePrefill or RoleDecode, else BackendOther): the series stay
// bounded.
func (e *Engine) Backend(name, role string) (*Backend, error) {
	if err := e.usable(false); err != nil {
		return nil, err
	}
	key := backendKey{name, role}
	e.backends.mu.RLock()
	b := e.backends.m[key]
	e.backends.mu.RUnlock()
	if b != nil {
		return b, nil
	}
	if err := checkBackend(name, role); err != nil {
		return nil, err
	}
	e.backends.mu.Lock()
	defer e.backends.mu.Unlock()
	if b := e.backends.m[key]; b != nil {
		return b, nil
	}
	if len(name) > MaxModelNameLen || len(role) > MaxModelNameLen || len(e.backends.m) >= maxBackends {
		key = backendKey{BackendOther, role}
		if role != "" && role != RolePrefill && role != RoleDecode {
			key.role = BackendOther
		}
		if b := e.backends.overflow[key]; b != nil {
			return b, nil
		}
		if e.backends.overflow == nil {
			e.backends.overflow = map[backendKey]*Backend{}
		}
		b = e.newBackend(key.name, key.role)
		e.backends.overflow[key] = b
		return b, nil
	}
	if e.backends.m == nil {
		e.backends.m = map[backendKey]*Backend{}
	}
	b = e.newBackend(name, role)
	e.backends.m[key] = b
	return b, nil
}

// serverOf returns the host and port of a backend named host:port (an IP
// address or a name, and a port from 1 to 65535): its server.address and
// server.port.
func serverOf(name string) (host string, port int, ok bool) {
	h, p, err := net.SplitHostPort(name)
	if err != nil || h == "" {
		return "", 0, false
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, false
	}
	return h, port, true
}

func checkBackend(name, role string) error {
	if name == "" || !utf8.ValidString(name) {
		return fmt.Errorf("instrument: backend %q: %w", name, stats.ErrInvalidLabel)
	}
	if !utf8.ValidString(role) {
		return fmt.Errorf("instrument: backend role %q: %w", role, stats.ErrInvalidLabel)
	}
	return nil
}

func (e *Engine) newBackend(name, role string) *Backend {
	b := &Backend{e: e, name: name, role: role}
	for _, op := range stats.Operations() {
		m := &b.ops[op]
		m.plain = e.with(b.kv(measureGenAI, op)...)
		m.input = e.with(b.kv(measureInput, op)...)
		m.output = e.with(b.kv(measureOutput, op)...)
	}
	return b
}

// kv returns the backend's attributes of a kind of measure of an
// operation: the GenAI ones, backend and backend.role, and
// gen_ai.token.type for the token usage (measureInput, measureOutput).
func (b *Backend) kv(kind uint8, op stats.Operation) []attribute.KeyValue {
	kv := append(b.e.genAIKV(op), attribute.String(KeyBackend, b.name), attribute.String(KeyBackendRole, b.role))
	if host, port, ok := serverOf(b.name); ok {
		kv = append(kv, attribute.String(KeyServerAddress, host), attribute.Int(KeyServerPort, port))
	}
	switch kind {
	case measureInput:
		kv = append(kv, attribute.String(KeyGenAITokenType, TokenTypeInput))
	case measureOutput:
		kv = append(kv, attribute.String(KeyGenAITokenType, TokenTypeOutput))
	}
	return kv
}

// measure returns the backend's set of an operation of a kind
// (measureGenAI, measureInput, measureOutput), with the error.type of t
// (none for ErrorNone) and the response model of index model (none for 0).
func (b *Backend) measure(kind uint8, op stats.Operation, t stats.ErrorType, model int) *measure {
	m := &b.ops[op]
	if t == stats.ErrorNone && model == 0 {
		switch kind {
		case measureInput:
			return &m.input
		case measureOutput:
			return &m.output
		}
		return &m.plain
	}
	return b.cache.get(measureKey(kind, op, t, model), func() measure {
		return b.e.with(b.e.respModels.extraKV(b.kv(kind, op), t, model)...)
	})
}

// Name returns the backend's name; Role its role.
func (b *Backend) Name() string { return b.name }

// Role returns the backend's role.
func (b *Backend) Role() string { return b.role }

// RecordChunkGap records the time between two consecutive content chunks of
// a streamed response of an operation
// (gen_ai.client.operation.time_per_output_chunk). A bad duration or an
// unknown operation is refused: nothing is recorded, and the refusal is
// counted and reported (see Engine.RecordIteration).
func (b *Backend) RecordChunkGap(ctx context.Context, op stats.Operation, seconds float64) {
	if err := b.recordChunkGap(ctx, op, seconds); err != nil {
		b.engine().refuse(refusedClientChunkGap, "Backend.RecordChunkGap", err)
	}
}

// engine returns the Backend's engine, nil for a nil Backend.
func (b *Backend) engine() *Engine {
	if b == nil {
		return nil
	}
	return b.e
}

// recordChunkGap is RecordChunkGap, returning its refusal.
func (b *Backend) recordChunkGap(ctx context.Context, op stats.Operation, seconds float64) error {
	if b == nil {
		return fmt.Errorf("%w: a nil Backend (get one from Engine.Backend)", ErrUnknownEngine)
	}
	if err := b.e.usable(false); err != nil {
		return err
	}
	if err := op.Validate(); err != nil {
		return err
	}
	if err := stats.CheckSeconds("seconds", seconds); err != nil {
		return err
	}
	b.e.inst.clientPerChunk.Record(ctx, seconds, b.ops[op].plain.rec...)
	return nil
}

// RecordRequest records one finished leg as the client saw it: its duration
// (with error.type when it failed: r.ErrorType, _OTHER without one; or was
// aborted for a known cause), its time to first chunk when streamed, and
// its input and output tokens when the response reported usage, with
// gen_ai.operation.name from r.Operation and gen_ai.response.model from
// r.ResponseModel (see MaxResponseModels). Times are from sending the
// request to the backend. An invalid leg is refused: nothing of it is
// recorded, and the refusal is counted and reported (see
// Engine.RecordIteration). Usage above stats.MaxRequestTokens is dropped
// for this leg alone, as in Engine.RecordRequest: the rest is recorded.
func (b *Backend) RecordRequest(ctx context.Context, r *stats.ObservedRequest) {
	dropped, err := b.recordRequest(ctx, r)
	if err != nil {
		b.engine().refuse(refusedClientRequest, "Backend.RecordRequest", err)
	} else if dropped != nil {
		b.engine().refuse(refusedValue, "Backend.RecordRequest", dropped)
	}
}

// recordRequest is RecordRequest, returning what it dropped and its
// refusal.
func (b *Backend) recordRequest(ctx context.Context, req *stats.ObservedRequest) (dropped, refused error) {
	if b == nil {
		return nil, fmt.Errorf("%w: a nil Backend (get one from Engine.Backend)", ErrUnknownEngine)
	}
	if err := b.e.usable(req == nil); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	bounded, dropped := req.Bounded()
	r := &bounded
	var inc increments
	if r.UsageKnown {
		inc.add(totClientTokens, r.PromptTokens)
		inc.add(totClientTokens, r.GenerationTokens)
	}
	if err := b.e.reserve(&inc); err != nil {
		return nil, err
	}
	in, op := b.e.inst, r.Operation
	model := b.e.respModels.index(r.ResponseModel)
	in.clientDuration.Record(ctx, r.E2ELatency, b.measure(measureGenAI, op, errorTypeOf(r.Reason, r.ErrorType), model).rec...)
	if r.FirstToken {
		in.clientFirstChunk.Record(ctx, r.TimeToFirstToken, b.measure(measureGenAI, op, stats.ErrorNone, model).rec...)
	}
	if r.UsageKnown {
		in.clientTokens.Record(ctx, r.PromptTokens, b.measure(measureInput, op, stats.ErrorNone, model).rec...)
		in.clientTokens.Record(ctx, r.GenerationTokens, b.measure(measureOutput, op, stats.ErrorNone, model).rec...)
	}
	return dropped, nil
}
