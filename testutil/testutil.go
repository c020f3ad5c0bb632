// Package testutil reads what a Recorder recorded, for tests: a
// MeterProvider with the vLLM views and a manual reader, and the value of
// one series by its family name and labels, without parsing exposition text.
//
// Families are named as views.Families and a Prometheus scrape name them:
// counters end in _total ("vllm:generation_tokens_total"); the GenAI
// histograms of views.Semconv keep their OpenTelemetry names. A family or
// series that is not there fails the test at once (tb.Fatalf), saying what
// is there instead.
package testutil

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/views"
)

// Reader is a MeterProvider read on demand. Use it from the goroutine of the
// test that created it: a lookup that fails calls tb.Fatalf.
type Reader struct {
	tb       testing.TB
	provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
	frozen   []metricdata.Metrics // a Snapshot's collection
	snapshot bool
}

// New returns a Reader whose provider has the views of views.VLLM(opts...).
// The provider is shut down when the test ends; bad options fail the test.
func New(tb testing.TB, opts ...views.Option) *Reader {
	tb.Helper()
	vs, err := views.VLLM(opts...)
	if err != nil {
		tb.Fatalf("testutil.New: %v", err)
	}
	return NewWithViews(tb, vs...)
}

// NewWithViews returns a Reader whose provider has exactly the given views,
// for example views.VLLM's and views.Semconv's together, or none (streams
// then keep their instrument names, counters with _total added).
func NewWithViews(tb testing.TB, vs ...sdkmetric.View) *Reader {
	tb.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vs...))
	tb.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	return &Reader{tb: tb, provider: provider, reader: reader}
}

// Provider returns the MeterProvider to record on, for
// instrument.WithMeterProvider.
func (r *Reader) Provider() metric.MeterProvider { return r.provider }

// Snapshot returns a Reader of what the provider holds now: its Value,
// Histogram and Families read that one collection, so that a test checking
// many series collects once, not once for each (what the provider records
// later is not in it). Its Provider is r's.
func (r *Reader) Snapshot() *Reader {
	r.tb.Helper()
	return &Reader{tb: r.tb, provider: r.provider, reader: r.reader, frozen: r.collect(), snapshot: true}
}

// Value returns the value of a counter or gauge series. labels are the
// series' whole label set as name/value pairs, in any order:
// Value("vllm:generation_tokens_total", "model_name", "m", "engine", "0").
func (r *Reader) Value(family string, labels ...string) float64 {
	r.tb.Helper()
	m, want, ok := r.find(family, labels)
	if !ok {
		return 0
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return value(r, family, want, d.DataPoints)
	case metricdata.Sum[float64]:
		return value(r, family, want, d.DataPoints)
	case metricdata.Gauge[int64]:
		return value(r, family, want, d.DataPoints)
	case metricdata.Gauge[float64]:
		return value(r, family, want, d.DataPoints)
	}
	r.tb.Fatalf("testutil: %s is a %s, not a counter or gauge: use Histogram", family, kind(m))
	return 0
}

// Histogram is one histogram series as collected.
type Histogram struct {
	Count uint64
	Sum   float64
	// Bounds are the buckets' upper bounds, without +Inf.
	Bounds []float64
	// Counts has one count per bucket, len(Bounds)+1: Counts[i] counts the
	// values in (Bounds[i-1], Bounds[i]], the last those above every bound.
	// They are not cumulative, unlike Prometheus' le buckets.
	Counts []uint64
}

// Histogram returns a histogram series, labels as for Value. A histogram
// series exists from its first observation on.
func (r *Reader) Histogram(family string, labels ...string) Histogram {
	r.tb.Helper()
	m, want, ok := r.find(family, labels)
	if !ok {
		return Histogram{}
	}
	switch d := m.Data.(type) {
	case metricdata.Histogram[int64]:
		return histogram(r, family, want, d.DataPoints)
	case metricdata.Histogram[float64]:
		return histogram(r, family, want, d.DataPoints)
	}
	r.tb.Fatalf("testutil: %s is a %s, not a histogram: use Value", family, kind(m))
	return Histogram{}
}

// Families returns the names of the families collected now, sorted: every
// counter and gauge of a Recorder, and the histograms observed so far.
func (r *Reader) Families() []string {
	r.tb.Helper()
	var names []string
	for _, m := range r.collect() {
		names = append(names, exposed(m))
	}
	slices.Sort(names)
	return names
}

// collect returns every stream collected now (a Snapshot's: then).
func (r *Reader) collect() []metricdata.Metrics {
	r.tb.Helper()
	if r.snapshot {
		return r.frozen
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.tb.Fatalf("testutil: collecting: %v", err)
	}
	var ms []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		ms = append(ms, sm.Metrics...)
	}
	return ms
}

// find returns the family's stream and the label set of the labels pairs,
// failing the test (ok false) when either is wrong.
func (r *Reader) find(family string, labels []string) (m metricdata.Metrics, want attribute.Set, ok bool) {
	r.tb.Helper()
	if len(labels)%2 != 0 {
		r.tb.Fatalf("testutil: %s: labels must be name/value pairs, got %d strings %q", family, len(labels), labels)
		return m, want, false
	}
	kvs := make([]attribute.KeyValue, 0, len(labels)/2)
	for i := 0; i < len(labels); i += 2 {
		kvs = append(kvs, attribute.String(labels[i], labels[i+1]))
	}
	want = attribute.NewSet(kvs...)
	if want.Len() != len(kvs) {
		r.tb.Fatalf("testutil: %s: a label is given twice in %q", family, labels)
		return m, want, false
	}
	var names []string
	for _, m := range r.collect() {
		if exposed(m) == family {
			return m, want, true
		}
		names = append(names, exposed(m))
	}
	slices.Sort(names)
	if slices.Contains(names, family+"_total") {
		r.tb.Fatalf("testutil: no family %s; did you mean %s? Counters end in _total", family, family+"_total")
		return m, want, false
	}
	r.tb.Fatalf("testutil: no family %s; the provider has %s", family, list(names))
	return m, want, false
}

// exposed is the family name of a collected stream: the stream name, with
// _total after a counter's, as views.Families and the Prometheus exposition
// name it.
func exposed(m metricdata.Metrics) string {
	if kind(m) == "counter" && !strings.HasSuffix(m.Name, "_total") {
		return m.Name + "_total"
	}
	return m.Name
}

// kind names the kind of a collected stream.
func kind(m metricdata.Metrics) string {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return sumKind(d.IsMonotonic)
	case metricdata.Sum[float64]:
		return sumKind(d.IsMonotonic)
	case metricdata.Gauge[int64], metricdata.Gauge[float64]:
		return "gauge"
	case metricdata.Histogram[int64], metricdata.Histogram[float64]:
		return "histogram"
	}
	return fmt.Sprintf("%T", m.Data)
}

func sumKind(monotonic bool) string {
	if monotonic {
		return "counter"
	}
	return "up-down counter"
}

func value[N int64 | float64](r *Reader, family string, want attribute.Set, points []metricdata.DataPoint[N]) float64 {
	r.tb.Helper()
	i := r.index(family, want, len(points), func(i int) attribute.Set { return points[i].Attributes })
	if i < 0 {
		return 0
	}
	return float64(points[i].Value)
}

func histogram[N int64 | float64](r *Reader, family string, want attribute.Set, points []metricdata.HistogramDataPoint[N]) Histogram {
	r.tb.Helper()
	i := r.index(family, want, len(points), func(i int) attribute.Set { return points[i].Attributes })
	if i < 0 {
		return Histogram{}
	}
	p := points[i]
	return Histogram{Count: p.Count, Sum: float64(p.Sum), Bounds: slices.Clone(p.Bounds), Counts: slices.Clone(p.BucketCounts)}
}

// index returns the index of the point with exactly the wanted labels,
// failing the test with the series there are when there is none (-1).
func (r *Reader) index(family string, want attribute.Set, n int, attrs func(int) attribute.Set) int {
	r.tb.Helper()
	var have []string
	for i := range n {
		// Compared as rendered, so that "5" finds an int attribute 5.
		a := braces(attrs(i))
		if a == braces(want) {
			return i
		}
		have = append(have, a)
	}
	slices.Sort(have)
	r.tb.Fatalf("testutil: %s has no series %s; it has %s", family, braces(want), list(have))
	return -1
}

// braces renders a label set as a scrape does: {engine="0",model_name="m"}.
func braces(s attribute.Set) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, kv := range s.ToSlice() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", kv.Key, kv.Value.String())
	}
	b.WriteByte('}')
	return b.String()
}

// list joins names for a message, "none" when there are none.
func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
