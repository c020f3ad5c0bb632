package exporters

import (
	"slices"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// Zero series from start-up. vLLM creates every per-engine child at
// start-up, so each of its histogram families is in the scrape at zero from
// the first scrape; OpenTelemetry cannot make a histogram point without a
// measurement. The Prometheus handler completes the gather instead: for each
// live engine of the registry's SeriesSet whose series the gather shows under
// vLLM's names, it adds every histogram family the engine exports from
// start-up that has no series for it, at zero. OTLP keeps OpenTelemetry's
// semantics (see docs/design.md).

// startupFamilies are what the completion needs of views.Families: the
// histogram families, and the anchors, the always-present families with
// model_name and engine only, whose series show an engine's labels as
// exported (constant, scope and resource labels included) from the first
// collection after NewRecorder.
var startupFamilies = sync.OnceValues(func() (histograms []views.Family, anchors []string) {
	for _, f := range views.Families() {
		switch {
		case f.Type == instrument.Histogram.String():
			histograms = append(histograms, f)
		case f.Instrument.Feature == instrument.Always &&
			slices.Equal(f.Labels, []string{instrument.KeyModelName, instrument.KeyEngine}):
			anchors = append(anchors, f.Name)
		}
	}
	return histograms, anchors
})

// maxNativeSchema is the finest schema of a Prometheus native histogram; the
// OpenTelemetry exporter merges the buckets of finer scales down to it.
const maxNativeSchema = 8

// nativeSchemas returns, for each histogram family that the views export
// with the base-2 exponential aggregation, the schema its points start at
// (the view's highest scale, as the exporter clamps it).
func nativeSchemas(vs []sdkmetric.View) map[string]int32 {
	histograms, _ := startupFamilies()
	out := map[string]int32{}
	for _, f := range histograms {
		d := f.Instrument
		in := sdkmetric.Instrument{Name: d.Name, Description: d.Description, Kind: sdkmetric.InstrumentKindHistogram,
			Unit: d.Unit, Scope: instrumentation.Scope{Name: instrument.ScopeName, Version: instrument.Version}}
		for _, v := range vs {
			s, ok := v(in)
			if !ok || s.Name != f.Name {
				continue
			}
			if a, ok := s.Aggregation.(sdkmetric.AggregationBase2ExponentialHistogram); ok {
				out[f.Name] = min(a.MaxScale, maxNativeSchema)
			}
		}
	}
	return out
}

// completeStartup returns mfs (sorted by name, as Gather returns them) with
// the zero histogram series of engines that it lacks; native holds the
// zero-series schema of the families exported as native histograms.
func completeStartup(mfs []*dto.MetricFamily, engines []instrument.EngineSeries, native map[string]int32) []*dto.MetricFamily {
	if len(engines) == 0 {
		return mfs
	}
	histograms, anchors := startupFamilies()
	gathered := mfs
	find := func(name string) *dto.MetricFamily {
		i, ok := slices.BinarySearchFunc(gathered, name, func(mf *dto.MetricFamily, n string) int {
			return strings.Compare(mf.GetName(), n)
		})
		if !ok {
			return nil
		}
		return gathered[i]
	}
	// What the gathered series of each histogram family show of its views.
	type family struct {
		mf *dto.MetricFamily
		// observed: the family has gathered series; then bounds are those
		// of its first (views.WithBuckets overrides show there), and
		// model_name or engine are kept only if one of them has it
		// (views.WithAttributes may drop them).
		observed              bool
		bounds                []float64
		keepModel, keepEngine bool
		// schema is set for a native histogram family: from its first
		// gathered series, or from its view (native).
		schema *int32
	}
	fams := make([]family, len(histograms))
	for i, f := range histograms {
		mf := find(f.Name)
		fams[i] = family{mf: mf, keepModel: true, keepEngine: true}
		if s, ok := native[f.Name]; ok {
			fams[i].schema = &s
		}
		if mf == nil || mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.Metric) == 0 {
			continue
		}
		h := mf.Metric[0].GetHistogram()
		fams[i] = family{mf: mf, observed: true, bounds: bucketBounds(h), schema: h.Schema,
			keepModel: hasLabel(mf, instrument.KeyModelName), keepEngine: hasLabel(mf, instrument.KeyEngine)}
	}
	added := false
	for _, e := range engines {
		var template []*dto.LabelPair
		for _, name := range anchors {
			if template = engineSeries(find(name), e.Labels); template != nil {
				break
			}
		}
		if template == nil {
			continue // not exported here under vLLM's names (no views, or another registry)
		}
		for i, f := range histograms {
			fam := &fams[i]
			if !e.Has(f.Instrument.Feature) || (fam.mf != nil && fam.mf.GetType() != dto.MetricType_HISTOGRAM) {
				continue
			}
			labels := template
			if !fam.keepModel || !fam.keepEngine {
				labels = slices.DeleteFunc(slices.Clone(template), func(l *dto.LabelPair) bool {
					return !fam.keepModel && l.GetName() == instrument.KeyModelName ||
						!fam.keepEngine && l.GetName() == instrument.KeyEngine
				})
			}
			for _, labels := range withPriorities(labels, e.Has(instrument.PriorityScheduling) && f.Instrument.Priority) {
				if fam.mf != nil && hasSeries(fam.mf, labels) {
					continue
				}
				bounds := fam.bounds
				if !fam.observed {
					bounds = e.Bounds(f.Instrument)
				}
				if fam.mf == nil {
					fam.mf = &dto.MetricFamily{Name: &f.Name, Help: &f.Instrument.Description, Type: dto.MetricType_HISTOGRAM.Enum()}
					mfs = append(mfs, fam.mf)
				}
				if fam.schema != nil {
					fam.mf.Metric = append(fam.mf.Metric, zeroNativeHistogram(labels, *fam.schema))
				} else {
					fam.mf.Metric = append(fam.mf.Metric, zeroHistogram(labels, bounds))
				}
				added = true
			}
		}
	}
	if added && len(mfs) > len(gathered) {
		slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
	return mfs
}

// withPriorities returns the label sets of an engine's series of a family:
// labels itself, or under priority scheduling one set per priority label
// value, as the Recorder creates request_success's series.
func withPriorities(labels []*dto.LabelPair, priority bool) [][]*dto.LabelPair {
	if !priority {
		return [][]*dto.LabelPair{labels}
	}
	var out [][]*dto.LabelPair
	for _, b := range stats.PriorityBuckets() {
		name, value := instrument.KeyPriority, b.String()
		set := append(slices.Clone(labels), &dto.LabelPair{Name: &name, Value: &value})
		slices.SortFunc(set, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
		out = append(out, set)
	}
	return out
}

// hasLabel reports whether a series of mf has the label name.
func hasLabel(mf *dto.MetricFamily, name string) bool {
	return slices.ContainsFunc(mf.Metric, func(m *dto.Metric) bool {
		return slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == name })
	})
}

// engineSeries returns the labels of the series of mf that belongs to the
// engine with labels want: the series holding the most of want's labels, with
// their values, and then the fewest others (an engine with one more constant
// attribute than another has its own series). nil when none matches.
func engineSeries(mf *dto.MetricFamily, want []instrument.Label) []*dto.LabelPair {
	var best []*dto.LabelPair
	bestHeld := -1
	for _, m := range mf.GetMetric() {
		held, ok := 0, true
		for _, l := range want {
			i := slices.IndexFunc(m.Label, func(p *dto.LabelPair) bool { return p.GetName() == l.Name })
			if i < 0 {
				continue // dropped by the family's attribute filter
			}
			if m.Label[i].GetValue() != l.Value {
				ok = false
				break
			}
			held++
		}
		if ok && (held > bestHeld || held == bestHeld && len(m.Label) < len(best)) {
			best, bestHeld = m.Label, held
		}
	}
	return best
}

// hasSeries reports whether mf has a series with exactly these labels.
func hasSeries(mf *dto.MetricFamily, labels []*dto.LabelPair) bool {
	return slices.ContainsFunc(mf.Metric, func(m *dto.Metric) bool {
		return slices.EqualFunc(m.Label, labels, func(a, b *dto.LabelPair) bool {
			return a.GetName() == b.GetName() && a.GetValue() == b.GetValue()
		})
	})
}

// bucketBounds returns the upper bounds of a histogram's buckets.
func bucketBounds(h *dto.Histogram) []float64 {
	bounds := make([]float64, 0, len(h.GetBucket()))
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	return bounds
}

// zeroHistogram is a histogram series with no observation.
func zeroHistogram(labels []*dto.LabelPair, bounds []float64) *dto.Metric {
	var zero uint64
	var sum float64
	h := &dto.Histogram{SampleCount: &zero, SampleSum: &sum, Bucket: make([]*dto.Bucket, len(bounds))}
	for i := range bounds {
		h.Bucket[i] = &dto.Bucket{CumulativeCount: &zero, UpperBound: &bounds[i]}
	}
	return &dto.Metric{Label: labels, Histogram: h}
}

// zeroNativeHistogram is a native histogram series with no observation, as
// the exporter writes an empty exponential histogram: zero threshold 0 and
// one empty span, which marks it as native.
func zeroNativeHistogram(labels []*dto.LabelPair, schema int32) *dto.Metric {
	var zero uint64
	var sum, threshold float64
	var offset int32
	var length uint32
	return &dto.Metric{Label: labels, Histogram: &dto.Histogram{SampleCount: &zero, SampleSum: &sum,
		Schema: &schema, ZeroThreshold: &threshold, ZeroCount: &zero,
		PositiveSpan: []*dto.BucketSpan{{Offset: &offset, Length: &length}}}}
}
