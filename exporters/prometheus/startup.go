package prometheus

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
// histogram families, the legacy ones after them (views.WithVersion, which
// the completion adds only where the views export them), and the anchors,
// the always-present families with model_name and engine only, whose series
// show an engine's labels as exported (constant, scope and resource labels
// included) from the first collection after NewRecorder.
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
	for _, f := range views.LegacyFamilies() {
		if f.Type == instrument.Histogram.String() {
			histograms = append(histograms, f.Family)
		}
	}
	return histograms, anchors
})

// viewFamilies is what the completion needs of the provider's views.
type viewFamilies struct {
	native map[string]int32     // schema of the zero series of the families exported as native histograms
	bounds map[string][]float64 // bucket bounds of the families whose views set them (views.WithBuckets, WithCustomHistogramBuckets)
	legacy map[string]struct{}  // the legacy histogram families the views export (views.WithVersion)
}

// isLegacy reports whether a histogram family of startupFamilies is one of
// an older vLLM version.
func isLegacy(name string) bool {
	_, ok := legacyNames()[name]
	return ok
}

// legacyNames are the names of views.LegacyFamilies, built once: building
// that list took most of a small registry's scrape, once per histogram family.
var legacyNames = sync.OnceValue(func() map[string]struct{} {
	names := map[string]struct{}{}
	for _, f := range views.LegacyFamilies() {
		names[f.Name] = struct{}{}
	}
	return names
})

// maxNativeSchema is the finest schema of a Prometheus native histogram; the
// OpenTelemetry exporter merges the buckets of finer scales down to it.
const maxNativeSchema = 8

// providerFamilies returns the legacy histogram families the views export;
// for each histogram family that they export with the base-2 exponential
// aggregation, the schema its points start at (the view's highest scale,
// as the exporter clamps it); and for each that they export with bucket
// bounds of their own, those bounds.
func providerFamilies(vs []sdkmetric.View) viewFamilies {
	histograms, _ := startupFamilies()
	out := viewFamilies{native: map[string]int32{}, bounds: map[string][]float64{}, legacy: map[string]struct{}{}}
	for _, f := range histograms {
		d := f.Instrument
		in := sdkmetric.Instrument{Name: d.Name, Description: d.Description, Kind: sdkmetric.InstrumentKindHistogram,
			Unit: d.Unit, Scope: instrumentation.Scope{Name: instrument.ScopeName, Version: instrument.Version}}
		for _, v := range vs {
			s, ok := v(in)
			if !ok || s.Name != f.Name {
				continue
			}
			if isLegacy(f.Name) {
				out.legacy[f.Name] = struct{}{}
			}
			switch a := s.Aggregation.(type) {
			case sdkmetric.AggregationBase2ExponentialHistogram:
				out.native[f.Name] = min(a.MaxScale, maxNativeSchema)
			case sdkmetric.AggregationExplicitBucketHistogram:
				if a.Boundaries != nil {
					out.bounds[f.Name] = slices.Sorted(slices.Values(a.Boundaries))
				}
			}
		}
	}
	return out
}

// completeStartup returns mfs (sorted by name, as Gather returns them) with
// the zero histogram series of engines that it lacks; vf says which legacy
// families the views export, the zero-series schema of the families
// exported as native histograms and the bounds of those the views give
// buckets of their own.
func completeStartup(mfs []*dto.MetricFamily, engines []instrument.EngineSeries, vf viewFamilies) []*dto.MetricFamily {
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
	fams := make([]startupFamily, len(histograms))
	for i, f := range histograms {
		mf := find(f.Name)
		fams[i] = startupFamily{mf: mf, keepModel: true, keepEngine: true}
		if _, exported := vf.legacy[f.Name]; !exported && isLegacy(f.Name) {
			fams[i].skip = true
			continue
		}
		if s, ok := vf.native[f.Name]; ok {
			fams[i].schema = &s
		}
		fams[i].bounds, fams[i].viewBounds = vf.bounds[f.Name]
		if mf == nil || mf.GetType() != dto.MetricType_HISTOGRAM || len(mf.Metric) == 0 {
			continue
		}
		h := mf.Metric[0].GetHistogram()
		fams[i] = startupFamily{mf: mf, observed: true, bounds: bucketBounds(h), schema: h.Schema,
			keepModel: hasLabel(mf, instrument.KeyModelName), keepEngine: hasLabel(mf, instrument.KeyEngine)}
	}
	anchorIdx := make([]*anchorIndex, len(anchors))
	added := false
	for _, e := range engines {
		var template []*dto.LabelPair
		for i, name := range anchors {
			if anchorIdx[i] == nil {
				anchorIdx[i] = newAnchorIndex(find(name))
			}
			if template = anchorIdx[i].engineSeries(e.Labels); template != nil {
				break
			}
		}
		if template == nil {
			continue // not exported here under vLLM's names (no views, or another registry)
		}
		for i, f := range histograms {
			fam := &fams[i]
			if fam.skip || !e.Has(f.Instrument.Feature) || (fam.mf != nil && fam.mf.GetType() != dto.MetricType_HISTOGRAM) {
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
				if fam.mf != nil && fam.has(labels) {
					continue
				}
				bounds := fam.bounds
				if !fam.observed && !fam.viewBounds {
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
				fam.add(labels)
				added = true
			}
		}
	}
	if added && len(mfs) > len(gathered) {
		slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
	return mfs
}

// startupFamily is what the gathered series of a histogram family show of
// its views, and the series it has.
type startupFamily struct {
	mf   *dto.MetricFamily
	skip bool // a legacy family the views do not export
	// observed: the family has gathered series; then bounds are those
	// of its first (views.WithBuckets overrides show there), and
	// model_name or engine are kept only if one of them has it
	// (views.WithAttributes may drop them).
	observed              bool
	bounds                []float64
	viewBounds            bool // bounds are the views' (vf.bounds), the family unobserved
	keepModel, keepEngine bool
	// schema is set for a native histogram family: from its first
	// gathered series, or from its view (native).
	schema *int32
	// series holds the label keys of mf's series (seriesKey), built
	// on first use: one lookup per engine keeps the completion linear
	// in the engines.
	series map[string]struct{}
}

// has reports whether the family has a series with exactly these labels.
func (f *startupFamily) has(labels []*dto.LabelPair) bool {
	if f.series == nil {
		f.series = make(map[string]struct{}, len(f.mf.Metric))
		for _, m := range f.mf.Metric {
			f.series[seriesKey(m.Label)] = struct{}{}
		}
	}
	_, ok := f.series[seriesKey(labels)]
	return ok
}

// add notes a series added with these labels.
func (f *startupFamily) add(labels []*dto.LabelPair) {
	if f.series != nil {
		f.series[seriesKey(labels)] = struct{}{}
	}
}

// seriesKey is a series' labels as one string, names and values separated
// by bytes no valid UTF-8 label holds.
func seriesKey(labels []*dto.LabelPair) string {
	n := 0
	for _, l := range labels {
		n += len(l.GetName()) + len(l.GetValue()) + 2
	}
	b := make([]byte, 0, n)
	for _, l := range labels {
		b = append(append(append(append(b, l.GetName()...), 0xfe), l.GetValue()...), 0xff)
	}
	return string(b)
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

// anchorIndex holds an anchor family's series by their engine label, so
// that finding each engine's series reads only the series that can be its
// own: linear, not quadratic, in the engines.
type anchorIndex struct {
	mf       *dto.MetricFamily
	byEngine map[string][]int // indices of the series with an engine label, by its value
	noEngine []int            // indices of the series without one (dropped by a filter)
}

func newAnchorIndex(mf *dto.MetricFamily) *anchorIndex {
	x := &anchorIndex{mf: mf, byEngine: map[string][]int{}}
	for i, m := range mf.GetMetric() {
		j := slices.IndexFunc(m.Label, func(p *dto.LabelPair) bool { return p.GetName() == instrument.KeyEngine })
		if j < 0 {
			x.noEngine = append(x.noEngine, i)
		} else {
			v := m.Label[j].GetValue()
			x.byEngine[v] = append(x.byEngine[v], i)
		}
	}
	return x
}

// engineSeries returns the labels of the series of the anchor that belongs
// to the engine with labels want: the series holding the most of want's
// labels, with their values, and then the fewest others (an engine with one
// more constant attribute than another has its own series), the first of
// equals. nil when none matches. A series with another engine label value
// cannot match, so only those with want's value or none are read.
func (x *anchorIndex) engineSeries(want []instrument.Label) []*dto.LabelPair {
	metrics := x.mf.GetMetric()
	var best []*dto.LabelPair
	bestHeld := -1
	consider := func(m *dto.Metric) {
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
	k := slices.IndexFunc(want, func(l instrument.Label) bool { return l.Name == instrument.KeyEngine })
	if k < 0 {
		for _, m := range metrics {
			consider(m)
		}
		return best
	}
	// Both lists are in gather order: merge them to keep "the first of equals".
	a, b := x.byEngine[want[k].Value], x.noEngine
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || len(a) > 0 && a[0] < b[0] {
			consider(metrics[a[0]])
			a = a[1:]
		} else {
			consider(metrics[b[0]])
			b = b[1:]
		}
	}
	return best
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
