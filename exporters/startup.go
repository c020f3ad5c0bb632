package exporters

import (
	"slices"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"

	"github.com/infermetrics/infermetrics/instrument"
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

// completeStartup returns mfs (sorted by name, as Gather returns them) with
// the zero histogram series of engines that it lacks.
func completeStartup(mfs []*dto.MetricFamily, engines []instrument.EngineSeries) []*dto.MetricFamily {
	if len(engines) == 0 {
		return mfs
	}
	histograms, anchors := startupFamilies()
	gathered := len(mfs)
	// find returns the family of a name, and whether it was gathered (not
	// added for an earlier engine).
	find := func(name string) (*dto.MetricFamily, bool) {
		if i, ok := slices.BinarySearchFunc(mfs[:gathered], name, func(mf *dto.MetricFamily, n string) int {
			return strings.Compare(mf.GetName(), n)
		}); ok {
			return mfs[i], true
		}
		for _, mf := range mfs[gathered:] {
			if mf.GetName() == name {
				return mf, false
			}
		}
		return nil, false
	}
	for _, e := range engines {
		var template []*dto.LabelPair
		for _, name := range anchors {
			if mf, _ := find(name); mf != nil {
				template = engineSeries(mf, e.Labels)
			}
			if template != nil {
				break
			}
		}
		if template == nil {
			continue // not exported here under vLLM's names (no views, another registry)
		}
		for _, f := range histograms {
			if !e.Has(f.Instrument.Feature) {
				continue
			}
			mf, gatheredFamily := find(f.Name)
			if mf == nil {
				mf = &dto.MetricFamily{Name: &f.Name, Help: &f.Instrument.Description, Type: dto.MetricType_HISTOGRAM.Enum()}
				mfs = append(mfs, mf)
			}
			if mf.GetType() != dto.MetricType_HISTOGRAM {
				continue
			}
			labels, bounds := template, e.Bounds(f.Instrument)
			if len(mf.Metric) > 0 {
				// Label names as the family's views export them.
				if labels = project(template, mf.Metric[0].Label); labels == nil || hasSeries(mf, labels) {
					continue
				}
				if gatheredFamily { // views.WithBuckets overrides show there
					bounds = bucketBounds(mf.Metric[0].GetHistogram())
				}
			}
			mf.Metric = append(mf.Metric, zeroHistogram(labels, bounds))
		}
	}
	if len(mfs) > gathered {
		slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
	return mfs
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

// project returns the template's labels with the names of like, in like's
// order; nil when like has a label the template lacks (a label of the family
// the completion cannot know the value of).
func project(template, like []*dto.LabelPair) []*dto.LabelPair {
	out := make([]*dto.LabelPair, 0, len(like))
	for _, l := range like {
		i := slices.IndexFunc(template, func(p *dto.LabelPair) bool { return p.GetName() == l.GetName() })
		if i < 0 {
			return nil
		}
		out = append(out, template[i])
	}
	return out
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
