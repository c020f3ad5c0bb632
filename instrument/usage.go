package instrument

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// Names of the usage families: who used a model and what it cost, by
// attribution dimension (WithAttribution) and with a price table
// (WithPriceTable). vLLM has no such family, so like the P/D router
// families they follow OpenTelemetry's naming rules and keep these names in
// every export (infermetrics_usage_tokens_total in a Prometheus scrape).
const (
	NameUsageTokens           = "infermetrics.usage.tokens"
	NameUsageRequests         = "infermetrics.usage.requests"
	NameUsageCost             = "infermetrics.usage.cost"
	NameUsageCostUncached     = "infermetrics.usage.cost.uncached"
	NameUsageUnpricedRequests = "infermetrics.usage.unpriced_requests"
	NameUsageRequestDuration  = "infermetrics.usage.request.duration"
	NameUsageTimeToFirstToken = "infermetrics.usage.time_to_first_token"
	NameAttributionOverflow   = "infermetrics.attribution.overflow"
)

// CostUnit is the unit of the cost families: the price table's currency,
// US dollars for LiteLLM's.
const CostUnit = "{USD}"

// Usage says the usage families' series appear with the first request
// recorded on a Recorder built WithAttribution or WithPriceTable.
const Usage Feature = ServerOperations + 1

const perUsage = "each request of a front end (RecordRequest) on a Recorder built WithAttribution or WithPriceTable"

// usageCatalog is the catalog of the usage families, which UsageDescriptors
// returns; lookup finds them with the others. Beside model_name, engine and
// the constant attributes, each but the overflow counter carries one
// attribute per attribution dimension.
var usageCatalog = []Descriptor{
	{Name: NameUsageTokens, Kind: Counter, Integer: true, Unit: "{token}", Feature: Usage,
		Recorded: perUsage + ", when the response reported usage: each kind it reported", Attributes: []string{KeyKind},
		Description: "Tokens of requests by kind: input (the prompt not read from or written to a prompt cache), " +
			"cache_read, cache_write, output, reasoning (a part of output), input_audio, input_image (parts of the prompt), " +
			"output_audio, output_image (parts of output); a kind the response did not report is not counted."},
	{Name: NameUsageRequests, Kind: Counter, Integer: true, Unit: "{request}", Feature: Usage,
		Recorded: perUsage, Attributes: []string{KeyFinishedReason, KeyErrorType},
		Description: "Requests by finish reason and, for those that failed or were aborted for a known cause, error.type " +
			"(absent for the others; _OTHER for a failure of unknown cause)."},
	{Name: NameUsageCost, Kind: Counter, Unit: CostUnit, Feature: Usage,
		Recorded:    perUsage + ", requests whose model has a price",
		Description: "Cost of requests at the price table's prices for each token kind, in its currency."},
	{Name: NameUsageCostUncached, Kind: Counter, Unit: CostUnit, Feature: Usage,
		Recorded: perUsage + ", requests whose model has a price",
		Description: "What the same requests would have cost without a prompt cache (cache reads and writes at the input price): " +
			"minus the cost, what caching saved, negative when cache writes cost more than the reads saved."},
	{Name: NameUsageUnpricedRequests, Kind: Counter, Integer: true, Unit: "{request}", Feature: Usage,
		Recorded:    perUsage + ", requests with usage whose model has no price, WithPriceTable",
		Description: "Requests with usage whose model has no price in the price table: their cost is not counted."},
	{Name: NameUsageRequestDuration, Kind: Histogram, Unit: "s", Buckets: genAIDurationBuckets, Feature: Usage,
		Recorded:    perUsage,
		Description: "Time from a request's arrival to the end of its response."},
	{Name: NameUsageTimeToFirstToken, Kind: Histogram, Unit: "s", Buckets: genAIServerTTFTBuckets, Feature: Usage,
		Recorded:    perUsage + ", streamed with a content chunk",
		Description: "Time from a request's arrival to its first content chunk."},
	{Name: NameAttributionOverflow, Kind: Counter, Integer: true, Unit: "{request}", Feature: Usage,
		Recorded: perUsage + ", whose value of a dimension was new past its cap", Attributes: []string{KeyDimension},
		Description: "Requests recorded with a dimension's value " + AttributionOverflow + ", new past the dimension's cap, by dimension; " +
			OverflowCombinations + " counts those whose combination of values was new past the cap on combinations."},
}

// UsageDescriptors returns the usage families the Recorder creates beside
// those of Descriptors, in a stable order. Only a Recorder built
// WithAttribution or WithPriceTable records them.
func UsageDescriptors() []Descriptor { return copyDescriptors(usageCatalog) }

// WithAttribution records the usage families of each request
// (Engine.RecordRequest) by the dimensions of a, with the request's values
// (stats.ObservedRequest.Attribution, in the order of a's dimensions),
// bounded as a says. Give every Recorder of a process the same Attribution:
// its caps are over all of them. A nil a records no dimension. Each usage
// family then holds up to a.MaxSetsPerRecorder() attribute sets per
// Recorder: keep the provider's cardinality limit per stream
// (exporters.WithCardinalityLimit; the SDK's default is 2000) above their
// sum, or the SDK merges the sets past it into its overflow series.
func WithAttribution(a *Attribution) Option {
	return optionFunc(func(c *config) { c.attribution = a })
}

// WithPriceTable says the requests recorded are priced
// (stats.ObservedRequest.Cost): the usage families are recorded, by model
// alone without WithAttribution, and a request with usage whose cost is
// not known is counted as unpriced (infermetrics.usage.unpriced_requests).
func WithPriceTable() Option {
	return optionFunc(func(c *config) { c.priced = true })
}

// usageInstruments are the usage families' instruments.
type usageInstruments struct {
	tokens, requests, unpriced, overflow metric.Int64Counter
	cost, uncached                       metric.Float64Counter
	duration, ttft                       metric.Float64Histogram
}

func (b *builder) usageInstruments() usageInstruments {
	return usageInstruments{
		tokens:   b.int64Counter(NameUsageTokens),
		requests: b.int64Counter(NameUsageRequests),
		unpriced: b.int64Counter(NameUsageUnpricedRequests),
		overflow: b.int64Counter(NameAttributionOverflow),
		cost:     b.float64Counter(NameUsageCost),
		uncached: b.float64Counter(NameUsageCostUncached),
		duration: b.float64Histogram(NameUsageRequestDuration),
		ttft:     b.float64Histogram(NameUsageTimeToFirstToken),
	}
}

// usageMeasure is one attribute set of the usage families, as the options
// their counters and histograms take.
type usageMeasure struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newUsageMeasure(kv ...attribute.KeyValue) *usageMeasure {
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	return &usageMeasure{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
}

// usageSets are an engine's attribute sets of one combination of
// dimension values: the plain one, built with it, and those with a kind or
// a finish reason and error type, built on first use (most combinations
// see few of them).
type usageSets struct {
	kv     []attribute.KeyValue // the engine's base and the combination's values
	plain  *usageMeasure
	kinds  [stats.NumTokenKinds]atomic.Pointer[usageMeasure]
	byCall [5][stats.NumErrorTypes]atomic.Pointer[usageMeasure] // finish reason, error type
}

// lazy returns the measure of p, building it from the combination's
// attributes and kv on first use.
func (s *usageSets) lazy(p *atomic.Pointer[usageMeasure], kv ...attribute.KeyValue) *usageMeasure {
	if m := p.Load(); m != nil {
		return m
	}
	m := newUsageMeasure(append(s.kv[:len(s.kv):len(s.kv)], kv...)...)
	if p.CompareAndSwap(nil, m) {
		return m
	}
	return p.Load()
}

// usageSeries are an engine's usage state: its attribute sets by
// combination (at most the Attribution's cap and the overflowed one, or the
// one without dimensions) and the overflow counter's by dimension.
type usageSeries struct {
	on       bool         // WithAttribution or WithPriceTable
	priced   bool         // WithPriceTable
	attr     *Attribution // nil: no dimension
	mu       sync.RWMutex
	sets     map[combo]*usageSets
	overflow []*usageMeasure // by dimension, then OverflowCombinations
}

// buildUsage readies an engine's usage state.
func (e *Engine) buildUsage(cfg *config) {
	u := &e.usage
	u.on, u.priced, u.attr = cfg.attribution != nil || cfg.priced, cfg.priced, cfg.attribution
	if u.attr == nil {
		return
	}
	for _, name := range append(u.attr.names(), OverflowCombinations) {
		u.overflow = append(u.overflow, newUsageMeasure(append(e.base[:len(e.base):len(e.base)],
			attribute.String(KeyDimension, name))...))
	}
}

// checkUsage refuses a request with more attribution values than the
// Recorder has dimensions.
func (e *Engine) checkUsage(r *stats.ObservedRequest) error {
	dims := 0
	if e.usage.attr != nil {
		dims = len(e.usage.attr.dims)
	}
	if len(r.Attribution) > dims {
		return fmt.Errorf("instrument: %d attribution values, the Recorder has %d dimensions (WithAttribution): %w",
			len(r.Attribution), dims, stats.ErrOutOfRange)
	}
	return nil
}

// setsOf returns the attribute sets of a combination, built once.
func (e *Engine) setsOf(c combo) *usageSets {
	u := &e.usage
	u.mu.RLock()
	s := u.sets[c]
	u.mu.RUnlock()
	if s != nil {
		return s
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.sets[c]; s != nil {
		return s
	}
	kv := e.base[:len(e.base):len(e.base)]
	if u.attr != nil {
		for i, d := range u.attr.dims {
			kv = append(kv, attribute.String(d.Name, c[i]))
		}
	}
	s = &usageSets{kv: kv, plain: newUsageMeasure(kv...)}
	if u.sets == nil {
		u.sets = map[combo]*usageSets{}
	}
	u.sets[c] = s
	return s
}

// recordUsage records a valid, bounded request on the usage families. The
// int64 counters need no total of their own: each series sums a part of
// what the engine's totals of requests, prompt and generation tokens
// bound.
func (e *Engine) recordUsage(ctx context.Context, r *stats.ObservedRequest) {
	u := &e.usage
	if !u.on {
		return
	}
	in := &e.inst.usage
	var c combo
	if u.attr != nil {
		var over uint
		c, over = u.attr.fold(r.Attribution)
		for i := range u.overflow {
			if over&(1<<i) != 0 {
				in.overflow.Add(ctx, 1, u.overflow[i].add...)
			}
		}
	}
	s := e.setsOf(c)
	in.requests.Add(ctx, 1, e.callMeasure(s, r.Reason, r.ErrorType).add...)
	in.duration.Record(ctx, r.E2ELatency, s.plain.rec...)
	if r.FirstToken {
		in.ttft.Record(ctx, r.TimeToFirstToken, s.plain.rec...)
	}
	if !r.UsageKnown {
		return
	}
	tokens := r.Tokens()
	for k := range tokens.Tokens {
		if n, ok := tokens.Get(stats.TokenKind(k)); ok && n > 0 {
			m := s.lazy(&s.kinds[k], attribute.String(KeyKind, stats.TokenKind(k).String()))
			in.tokens.Add(ctx, n, m.add...)
		}
	}
	switch {
	case r.Cost.Known:
		in.cost.Add(ctx, r.Cost.Charged, s.plain.add...)
		in.uncached.Add(ctx, r.Cost.Uncached, s.plain.add...)
	case u.priced:
		in.unpriced.Add(ctx, 1, s.plain.add...)
	}
}

// callMeasure returns the requests family's attribute set of a finish
// reason and error type: error.type only for a request that failed or was
// aborted for a known cause, _OTHER for a failure of unknown cause.
func (e *Engine) callMeasure(s *usageSets, reason stats.FinishReason, t stats.ErrorType) *usageMeasure {
	t = errorTypeOf(reason, t)
	p := &s.byCall[reason][t]
	if m := p.Load(); m != nil {
		return m
	}
	kv := []attribute.KeyValue{attribute.String(KeyFinishedReason, reason.String())}
	if t != stats.ErrorNone {
		kv = append(kv, attribute.String(KeyErrorType, t.String()))
	}
	return s.lazy(p, kv...)
}

// MaxSetsPerRecorder returns the most attribute sets one usage family holds
// for one Recorder built WithAttribution(a) (for a nil a, WithPriceTable
// alone): its combinations of values, the cap and the overflowed one, times
// the finish reasons and error types of infermetrics.usage.requests, the
// family with most. A MeterProvider whose cardinality limit per stream
// (exporters.WithCardinalityLimit; the SDK's default is 2000) is above the
// sum over its Recorders keeps every series apart, none in the SDK's
// overflow series.
func (a *Attribution) MaxSetsPerRecorder() int {
	combos := 1
	if a != nil {
		combos = a.combos.max + 1
	}
	calls := 0
	for _, r := range stats.FinishReasons() {
		switch r {
		case stats.FinishAbort: // ErrorNone and every cause
			calls += stats.NumErrorTypes
		case stats.FinishError: // every cause, ErrorNone recorded as ErrorOther
			calls += stats.NumErrorTypes - 1
		default:
			calls++
		}
	}
	return combos * calls
}
