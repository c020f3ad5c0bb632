package views

import (
	"context"
	"math"
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/trace"
)

// Doublings of SlowestExemplars without explicit buckets: range i holds
// the values from 2^(minDoubling+i) to 2^(minDoubling+i+1), for latencies in
// seconds from about 1 ms (2^-10 s) to about 2.3 hours (2^13 s); values
// below and above share the first and the last range.
const (
	minDoubling = -10
	doublings   = 24
)

// SlowestExemplars is an exemplar reservoir selector (for a View's
// Stream.ExemplarReservoirProviderSelector) that keeps, in each collection
// interval, the slowest (largest) measurement of every bucket of an explicit
// bucket histogram, and of every doubling of the value (1-2 ms, 2-4 ms, ...,
// up to about 2 hours) for the exponential aggregation and any other: the
// slowest measurement of an interval is always an exemplar, and the others
// spread over the distribution. The SDK's default reservoirs sample at
// random instead: 20 measurements per interval for an exponential histogram,
// so a lone slow request of n is kept with a probability of about 20/n, and
// one per bucket for explicit buckets, so the slowest of the top bucket is
// kept with a probability of 1 in the measurements that fell in it.
//
// An interval ends at each collection (a scrape, an OTLP export); an
// exemplar of an earlier one stays until a measurement of the same range
// replaces it, as with the SDK's reservoirs. Like IDOnlyExemplars, it keeps
// the trace and span IDs, time and value, without dropped attributes.
// VLLM and Semconv give it to their latency families unless
// WithSDKExemplarReservoirs is given. Offering a measurement allocates
// nothing.
func SlowestExemplars(agg sdkmetric.Aggregation) exemplar.ReservoirProvider {
	var bounds []float64
	if a, ok := agg.(sdkmetric.AggregationExplicitBucketHistogram); ok && len(a.Boundaries) > 0 {
		bounds = slices.Sorted(slices.Values(a.Boundaries))
	}
	n := doublings
	if bounds != nil {
		n = len(bounds) + 1
	}
	return func(attribute.Set) exemplar.Reservoir {
		return &slowest{bounds: bounds, held: make([]held, n), interval: 1}
	}
}

// slowest is the reservoir of SlowestExemplars. It is not safe for
// concurrent use: the SDK serialises the calls of a reservoir that does not
// declare itself safe.
type slowest struct {
	bounds   []float64 // explicit bucket upper bounds; nil: by doubling
	held     []held    // one per bucket or doubling
	interval uint64    // the current collection interval, from 1
}

// held is the measurement a range keeps.
type held struct {
	interval uint64 // the interval it was offered in; 0: none yet
	value    float64
	v        exemplar.Value
	t        time.Time
	span     trace.SpanContext
}

// rangeOf returns the bucket or doubling of a value.
func (r *slowest) rangeOf(v float64) int {
	if r.bounds != nil {
		return sort.SearchFloat64s(r.bounds, v)
	}
	if v <= 0 {
		return 0
	}
	_, e := math.Frexp(v) // v in [2^(e-1), 2^e)
	return min(max(e-1-minDoubling, 0), len(r.held)-1)
}

// Offer keeps the measurement if it is the first of its range in this
// interval or slower than the one kept. NaN is never kept.
func (r *slowest) Offer(ctx context.Context, t time.Time, v exemplar.Value, _ []attribute.KeyValue) {
	var f float64
	switch v.Type() {
	case exemplar.Float64ValueType:
		f = v.Float64()
	case exemplar.Int64ValueType:
		f = float64(v.Int64())
	default:
		return
	}
	if math.IsNaN(f) {
		return
	}
	h := &r.held[r.rangeOf(f)]
	if h.interval == r.interval && f <= h.value {
		return
	}
	*h = held{interval: r.interval, value: f, v: v, t: t, span: trace.SpanContextFromContext(ctx)}
}

// Collect returns the kept exemplars in time order (Prometheus stores the
// exemplars of a series in time order and drops one older than the last)
// and starts a new interval.
func (r *slowest) Collect(dest *[]exemplar.Exemplar) {
	out := (*dest)[:0]
	for i := range r.held {
		h := &r.held[i]
		if h.interval == 0 {
			continue
		}
		e := exemplar.Exemplar{Time: h.t, Value: h.v}
		if h.span.HasTraceID() {
			id := h.span.TraceID()
			e.TraceID = id[:]
		}
		if h.span.HasSpanID() {
			id := h.span.SpanID()
			e.SpanID = id[:]
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b exemplar.Exemplar) int { return a.Time.Compare(b.Time) })
	*dest = out
	r.interval++
}
