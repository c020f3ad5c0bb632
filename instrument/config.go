package instrument

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// ScopeName is the instrumentation scope (meter) name of the Recorder.
const ScopeName = "github.com/infermetrics/infermetrics/instrument"

// Version is the library version, reported as the instrumentation version.
const Version = "0.3.0"

// Defaults of the options.
const (
	DefaultMaxModelLen    = 8192
	DefaultGenAIOperation = "text_completion"
	DefaultGenAIProvider  = "self_hosted"
	// MaxModelNameLen is the longest model name accepted, in bytes.
	MaxModelNameLen = 256
)

type config struct {
	meterProvider  metric.MeterProvider
	modelName      string
	engines        []int
	attributes     []attribute.KeyValue
	maxModelLen    int
	cacheConfig    stats.CacheConfig
	kvConnector    bool
	kvResidency    bool // WithKVResidency
	corruption     bool // WithCorruptionDetection
	kvConsumer     bool
	specPositions  int
	genAIOperation string
	genAIProvider  string
	genAISemconv   bool // WithGenAISemconv
	priority       bool // WithPriorityScheduling
	kvOffload      bool // WithKVOffload
	kvOffloadCPU   bool // WithKVOffloadCPU
	// kvOffloadThreshold: WithKVOffloadStoreThreshold of 2 or more.
	kvOffloadThreshold bool
	simpleKVOffload    *stats.SimpleKVOffloadConfig // WithSimpleKVOffload
	eventWindow        time.Duration
	loraHistory        int // WithLoRAHistory
	errorHandler       func(error)
	attribution        *Attribution // WithAttribution
	priced             bool         // WithPriceTable
}

func newConfig(opts []Option) config {
	c := config{
		engines:        []int{0},
		maxModelLen:    DefaultMaxModelLen,
		genAIOperation: DefaultGenAIOperation,
		genAIProvider:  DefaultGenAIProvider,
		eventWindow:    DefaultEventWindow,
		loraHistory:    DefaultLoRAHistory,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	return c
}

// Option configures a Recorder.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets the MeterProvider; the default is the global one,
// otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithModelName sets the model_name attribute: the served model name.
// Required.
func WithModelName(name string) Option {
	return optionFunc(func(c *config) { c.modelName = name })
}

// WithEngines sets the data-parallel ranks this Recorder serves (the engine
// attribute); the default is the single engine 0.
func WithEngines(ranks ...int) Option {
	return optionFunc(func(c *config) { c.engines = append([]int(nil), ranks...) })
}

// WithAttributes adds constant attributes to every series but the info
// gauges (for example a role=decode attribute in a P/D deployment). A key must
// keep a Prometheus label of its own: NewRecorder returns ErrConfig for a key
// starting with "__", one exported as "le" or "quantile", one exported as a
// label the Prometheus exporter adds (otel_scope_*, otel_metric_overflow, and
// those of a ReservedLabelsProvider), and one exported as the same label name
// as a key the Recorder sets or another constant key ("model.name" would
// merge into model_name).
func WithAttributes(kv ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.attributes = append(c.attributes, kv...) })
}

// WithMaxModelLen sets the model's context length, from which the token-count
// histograms get their 1-2-5 boundaries (LengthBuckets). Default 8192. The
// SDK keeps the boundaries a provider's histograms were first created with,
// so every Recorder of one MeterProvider needs the same boundaries:
// NewRecorder returns ErrConfig for a length whose boundaries differ.
func WithMaxModelLen(n int) Option {
	return optionFunc(func(c *config) { c.maxModelLen = n })
}

// WithCacheConfig exports the KV cache configuration as the labels of
// vllm:cache_config_info, once per engine. Its keys follow the rules of
// WithAttributes' keys, engine being the label the Recorder sets.
func WithCacheConfig(cfg stats.CacheConfig) Option {
	return optionFunc(func(c *config) { c.cacheConfig = cfg })
}

// WithKVConnector declares a KV connector, so that its families
// (Scheduler.KVTransfer: vLLM's NIXL transfer histograms and failure
// counters) exist at zero from start-up. The external prefix cache counters
// (Scheduler.ConnectorPrefixCache) need no option: they always exist, as in
// vLLM.
func WithKVConnector() Option {
	return optionFunc(func(c *config) { c.kvConnector = true })
}

// WithKVResidency declares that steps report sampled KV block evictions
// (Scheduler.Evictions; vLLM's --kv-cache-metrics), so that the KV block
// residency histograms are in the Prometheus scrape at zero from start-up.
func WithKVResidency() Option {
	return optionFunc(func(c *config) { c.kvResidency = true })
}

// WithCorruptionDetection declares that iterations report corrupted requests
// (vLLM with VLLM_COMPUTE_NANS_IN_LOGITS), so that
// vllm:corrupted_requests_total exists at zero from start-up.
func WithCorruptionDetection() Option {
	return optionFunc(func(c *config) { c.corruption = true })
}

// WithKVConsumer declares that the engine receives KV through its connector
// (vLLM's kv_transfer_config.is_kv_consumer, as on a P/D decode node), so
// that vllm:num_requests_kv_fetch_by_stage exists at zero from start-up, as
// in vLLM, which registers it only on a KV consumer.
func WithKVConsumer() Option {
	return optionFunc(func(c *config) { c.kvConsumer = true })
}

// WithSpecDecoding declares speculative decoding with numSpeculativeTokens
// draft positions, so that its counters exist at zero from start-up.
func WithSpecDecoding(numSpeculativeTokens int) Option {
	return optionFunc(func(c *config) { c.specPositions = numSpeculativeTokens })
}

// WithGenAI sets the gen_ai.operation.name and gen_ai.provider.name
// attributes of the GenAI server metrics (WithGenAISemconv) and of the GenAI
// client metrics (Engine.Backend). Defaults: "text_completion" and
// "self_hosted". The operation is that of the engine path and of observed
// requests with stats.OperationDefault; a front end that knows the endpoint
// sets ObservedRequest.Operation instead. It does not turn the server
// metrics on: a gateway sets it for its client metrics alone.
func WithGenAI(operation, provider string) Option {
	return optionFunc(func(c *config) { c.genAIOperation, c.genAIProvider = operation, provider })
}
