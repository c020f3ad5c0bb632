package exporters

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// DefaultStatsInterval is the time between two stats lines, as in vLLM
// (the default of VLLM_LOG_STATS_INTERVAL in vllm/envs.py).
const DefaultStatsInterval = 10 * time.Second

// StatsMessage is the message of every stats line.
const StatsMessage = "engine stats"

// Attribute keys of the stats line; NewStatsLog describes each value.
const (
	StatsKeyModelName                  = instrument.KeyModelName // the model the line is about
	StatsKeyEngines                    = "engines"               // engines aggregated into the line
	StatsKeyIntervalSeconds            = "interval_s"            // seconds since the previous line
	StatsKeyPromptThroughput           = "prompt_throughput_tps" // computed prompt tokens per second
	StatsKeyGenerationThroughput       = "generation_throughput_tps"
	StatsKeyRunning                    = "running"
	StatsKeyWaiting                    = "waiting"
	StatsKeyPreemptions                = "preemptions"
	StatsKeyKVCacheUsage               = "kv_cache_usage_pct"
	StatsKeyPrefixCacheHitRate         = "prefix_cache_hit_rate_pct"
	StatsKeyExternalPrefixCacheHitRate = "external_prefix_cache_hit_rate_pct"
)

type statsLogConfig struct {
	interval time.Duration
	now      func() time.Time
}

// StatsLogOption configures NewStatsLog.
type StatsLogOption interface{ applyStatsLog(*statsLogConfig) }

type statsLogOptionFunc func(*statsLogConfig)

func (f statsLogOptionFunc) applyStatsLog(c *statsLogConfig) { f(c) }

// WithStatsInterval sets the time between two stats lines (default 10 s). A
// duration that is not positive is ignored.
func WithStatsInterval(d time.Duration) StatsLogOption {
	return statsLogOptionFunc(func(c *statsLogConfig) {
		if d > 0 {
			c.interval = d
		}
	})
}

// withClock replaces time.Now, for tests.
func withClock(now func() time.Time) StatsLogOption {
	return statsLogOptionFunc(func(c *statsLogConfig) { c.now = now })
}

// NewStatsLog returns a reader that writes vLLM's periodic stats line
// (LoggingStatLogger) through logger (slog.Default() when nil), one line per
// model every interval, from the same OpenTelemetry data the other readers
// export. Register it on the MeterProvider that the Recorder records on.
//
// Each line is logged with the message StatsMessage and these attributes:
//
//   - model_name, and engines: the number of engines aggregated in the line
//     (every data-parallel engine of the model is summed into one line);
//   - interval_s: seconds since the previous line (or since NewStatsLog);
//   - prompt_throughput_tps: prompt tokens computed here per second, from the
//     increase of the local_compute source only (tokens found in the prefix
//     cache or received from another node are not throughput);
//   - generation_throughput_tps: generation tokens per second;
//   - running, waiting: the request gauges, summed over engines;
//   - preemptions: preemptions during the interval;
//   - kv_cache_usage_pct: KV cache usage of the fullest engine (the maximum
//     over engines, since the fullest engine is the one that preempts);
//   - prefix_cache_hit_rate_pct: increase of hits / increase of queries
//     during the interval, over all engines (vLLM uses its last 1000
//     requests; an interval is what cumulative counters give); 0 without
//     queries;
//   - external_prefix_cache_hit_rate_pct: the same for the KV connector's
//     cache, only with a KV connector (its counters exist: WithKVConnector or
//     connector data in a step) or once the external cache was queried.
//
// Rates and percentages are rounded to one decimal, as vLLM prints them. Like
// vLLM, a line of a model that produced no tokens in this interval nor the
// previous one is logged at Debug level instead of Info.
//
// The reader understands both naming schemes: the vLLM family names given by
// views.VLLM (vllm:generation_tokens, vllm:prompt_tokens_by_source, ...) and
// the instrument names used without views (vllm.generation_tokens,
// vllm.prompt_tokens with its source attribute, ...). It is cumulative, keeps
// no histograms, and logging happens on the reader's goroutine: recording
// never waits for it.
func NewStatsLog(logger *slog.Logger, opts ...StatsLogOption) sdkmetric.Reader {
	cfg := statsLogConfig{interval: DefaultStatsInterval, now: time.Now}
	for _, o := range opts {
		o.applyStatsLog(&cfg)
	}
	if logger == nil {
		logger = slog.Default()
	}
	exp := &statsExporter{logger: logger, now: cfg.now, last: cfg.now(), active: map[string]bool{}}
	return sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.interval))
}

// quantity is one number the stats line is computed from.
type quantity uint8

const (
	qPromptComputed quantity = iota // counter, local_compute source only
	qGeneration                     // counter
	qPreemptions                    // counter
	qPrefixQueries                  // counter
	qPrefixHits                     // counter
	qExtQueries                     // counter
	qExtHits                        // counter
	qRunning                        // gauge, summed
	qWaiting                        // gauge, summed
	qKVUsage                        // gauge, maximum
	qConnector                      // a KV-connector-only counter: its presence says a connector is there
	numQuantities
)

// statsStreams maps the stream names the reader may see, with and without
// views.VLLM, to their quantity. vllm:prompt_tokens (the total over sources)
// is deliberately absent: throughput counts computed tokens only.
var statsStreams = func() map[string]quantity {
	m := map[string]quantity{
		instrument.NamePromptTokens: qPromptComputed,
		views.PromptTokensBySource:  qPromptComputed,
	}
	for q, name := range map[quantity]string{
		qGeneration:    instrument.NameGenerationTokens,
		qPreemptions:   instrument.NameNumPreemptions,
		qPrefixQueries: instrument.NamePrefixCacheQueries,
		qPrefixHits:    instrument.NamePrefixCacheHits,
		qExtQueries:    instrument.NameExternalPrefixCacheQueries,
		qExtHits:       instrument.NameExternalPrefixCacheHits,
		qRunning:       instrument.NameNumRequestsRunning,
		qWaiting:       instrument.NameNumRequestsWaiting,
		qKVUsage:       instrument.NameKVCacheUsage,
		qConnector:     instrument.NameNIXLNumFailedTransfers,
	} {
		m[name] = q
		for _, d := range instrument.Descriptors() {
			if d.Name == name {
				m[views.VLLMName(d)] = q
			}
		}
	}
	return m
}()

var (
	sourceKey     = attribute.Key(instrument.KeySource)
	modelKey      = attribute.Key(instrument.KeyModelName)
	engineKey     = attribute.Key(instrument.KeyEngine)
	computedValue = stats.LocalCompute.String()
)

// modelTotals holds one model's values at one collection: counters as
// cumulative totals, running and waiting summed, KV usage as the maximum.
type modelTotals struct {
	v       [numQuantities]float64
	engines map[string]struct{}
	hasExt  bool
}

// statsExporter turns collections into stats lines. The periodic reader
// calls Export from one goroutine at a time; the mutex guards anyway.
type statsExporter struct {
	logger *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	last   time.Time
	prev   map[string]*modelTotals
	active map[string]bool // whether the model's previous line had throughput
}

func (e *statsExporter) Temporality(sdkmetric.InstrumentKind) metricdata.Temporality {
	return metricdata.CumulativeTemporality
}

func (e *statsExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	if k == sdkmetric.InstrumentKindHistogram {
		return sdkmetric.AggregationDrop{}
	}
	return sdkmetric.DefaultAggregationSelector(k)
}

func (e *statsExporter) ForceFlush(context.Context) error { return nil }

func (e *statsExporter) Shutdown(context.Context) error { return nil }

// Export logs one line per model. It must not keep rm: the reader reuses it.
func (e *statsExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	cur := totals(rm)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	elapsed := now.Sub(e.last).Seconds()
	models := make([]string, 0, len(cur))
	for m := range cur {
		models = append(models, m)
	}
	slices.Sort(models)
	for _, model := range models {
		c, p := cur[model], e.prev[model]
		if p == nil {
			p = &modelTotals{} // counters start at zero with the reader
		}
		inc := func(q quantity) float64 { return max(c.v[q]-p.v[q], 0) }
		rate := func(q quantity) float64 {
			if elapsed <= 0 {
				return 0
			}
			return inc(q) / elapsed
		}
		prompt, gen := rate(qPromptComputed), rate(qGeneration)
		attrs := []slog.Attr{
			slog.String(StatsKeyModelName, model),
			slog.Int(StatsKeyEngines, len(c.engines)),
			slog.Float64(StatsKeyIntervalSeconds, round1(elapsed)),
			slog.Float64(StatsKeyPromptThroughput, round1(prompt)),
			slog.Float64(StatsKeyGenerationThroughput, round1(gen)),
			slog.Int64(StatsKeyRunning, int64(c.v[qRunning])),
			slog.Int64(StatsKeyWaiting, int64(c.v[qWaiting])),
			slog.Int64(StatsKeyPreemptions, int64(inc(qPreemptions))),
			slog.Float64(StatsKeyKVCacheUsage, round1(100*c.v[qKVUsage])),
			slog.Float64(StatsKeyPrefixCacheHitRate, round1(percent(inc(qPrefixHits), inc(qPrefixQueries)))),
		}
		if c.hasExt {
			attrs = append(attrs, slog.Float64(StatsKeyExternalPrefixCacheHitRate,
				round1(percent(inc(qExtHits), inc(qExtQueries)))))
		}
		active := prompt > 0 || gen > 0
		level := slog.LevelInfo
		if !active && !e.active[model] {
			level = slog.LevelDebug
		}
		e.active[model] = active
		e.logger.LogAttrs(ctx, level, StatsMessage, attrs...)
	}
	e.prev, e.last = cur, now
	return nil
}

// totals sums the quantities of one collection by model.
func totals(rm *metricdata.ResourceMetrics) map[string]*modelTotals {
	out := map[string]*modelTotals{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			q, ok := statsStreams[m.Name]
			if !ok {
				continue
			}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				addPoints(out, q, data.DataPoints)
			case metricdata.Sum[float64]:
				addPoints(out, q, data.DataPoints)
			case metricdata.Gauge[int64]:
				addPoints(out, q, data.DataPoints)
			case metricdata.Gauge[float64]:
				addPoints(out, q, data.DataPoints)
			}
		}
	}
	return out
}

func addPoints[N int64 | float64](out map[string]*modelTotals, q quantity, points []metricdata.DataPoint[N]) {
	for _, dp := range points {
		if q == qPromptComputed {
			if src, ok := dp.Attributes.Value(sourceKey); !ok || src.AsString() != computedValue {
				continue
			}
		}
		model, _ := dp.Attributes.Value(modelKey)
		t := out[model.AsString()]
		if t == nil {
			t = &modelTotals{engines: map[string]struct{}{}}
			out[model.AsString()] = t
		}
		if engine, ok := dp.Attributes.Value(engineKey); ok {
			t.engines[engine.AsString()] = struct{}{}
		}
		v := float64(dp.Value)
		switch q {
		case qKVUsage:
			t.v[q] = max(t.v[q], v)
		case qConnector:
			// The external prefix cache families always exist (0 without a
			// connector, as vllm/v1/metrics/loggers.py registers them); the
			// connector's own counters say
			// whether there is one.
			t.hasExt = true
		case qExtQueries, qExtHits:
			t.hasExt = t.hasExt || v > 0
			t.v[q] += v
		default:
			t.v[q] += v
		}
	}
}

// percent returns 100*part/whole, 0 when whole is 0.
func percent(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return 100 * part / whole
}

// round1 rounds to one decimal.
func round1(v float64) float64 { return math.Round(v*10) / 10 }
