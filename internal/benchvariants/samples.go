package benchvariants

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Sample is one series' value as a Prometheus scrape shows it.
type Sample struct {
	Type  string // counter, gauge or histogram
	Value float64
	Count uint64
	Sum   float64
	// Buckets are the cumulative counts by finite upper bound.
	Buckets map[float64]uint64
}

func (s Sample) String() string {
	if s.Type != "histogram" {
		return fmt.Sprintf("%s %v", s.Type, s.Value)
	}
	bounds := make([]float64, 0, len(s.Buckets))
	for b := range s.Buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	var b strings.Builder
	for _, le := range bounds {
		fmt.Fprintf(&b, " %v:%d", le, s.Buckets[le])
	}
	return fmt.Sprintf("histogram count=%d sum=%v buckets=[%s ]", s.Count, s.Sum, b.String())
}

// Samples maps a series key, the exposition family name and its sorted
// labels (for example vllm:generation_tokens_total{engine="0",model_name="m"}),
// to its sample.
type Samples map[string]Sample

// Key returns the series key of a family and its labels.
func Key(family string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(family + "{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteString("}")
	return b.String()
}

// FromOTel maps collected OpenTelemetry data the way the Prometheus exporter
// names it: monotonic sums get "_total", histograms get cumulative buckets.
func FromOTel(rm *metricdata.ResourceMetrics) Samples {
	out := Samples{}
	labels := func(set attribute.Set) map[string]string {
		m := map[string]string{}
		for _, kv := range set.ToSlice() {
			m[string(kv.Key)] = kv.Value.String()
		}
		return m
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				sums(out, m.Name, d, labels)
			case metricdata.Sum[float64]:
				sums(out, m.Name, d, labels)
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out[Key(m.Name, labels(dp.Attributes))] = Sample{Type: "gauge", Value: float64(dp.Value)}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					out[Key(m.Name, labels(dp.Attributes))] = Sample{Type: "gauge", Value: dp.Value}
				}
			case metricdata.Histogram[int64]:
				histograms(out, m.Name, d, labels)
			case metricdata.Histogram[float64]:
				histograms(out, m.Name, d, labels)
			}
		}
	}
	return out
}

func sums[N int64 | float64](out Samples, name string, d metricdata.Sum[N], labels func(attribute.Set) map[string]string) {
	typ := "gauge"
	if d.IsMonotonic {
		name += "_total"
		typ = "counter"
	}
	for _, dp := range d.DataPoints {
		out[Key(name, labels(dp.Attributes))] = Sample{Type: typ, Value: float64(dp.Value)}
	}
}

func histograms[N int64 | float64](out Samples, name string, d metricdata.Histogram[N], labels func(attribute.Set) map[string]string) {
	for _, dp := range d.DataPoints {
		s := Sample{Type: "histogram", Count: dp.Count, Sum: float64(dp.Sum), Buckets: map[float64]uint64{}}
		var cum uint64
		for i, b := range dp.Bounds {
			cum += dp.BucketCounts[i]
			s.Buckets[b] = cum
		}
		out[Key(name, labels(dp.Attributes))] = s
	}
}

// FromFamilies maps gathered client_golang families or a parsed scrape.
func FromFamilies(families []*dto.MetricFamily) Samples {
	out := Samples{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			key := Key(mf.GetName(), labels)
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = Sample{Type: "counter", Value: m.GetCounter().GetValue()}
			case dto.MetricType_GAUGE:
				out[key] = Sample{Type: "gauge", Value: m.GetGauge().GetValue()}
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				s := Sample{Type: "histogram", Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: map[float64]uint64{}}
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						s.Buckets[b.GetUpperBound()] = b.GetCumulativeCount()
					}
				}
				out[key] = s
			default:
				out[key] = Sample{Type: mf.GetType().String()}
			}
		}
	}
	return out
}

// FromText parses a Prometheus text scrape.
func FromText(body string) (Samples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	list := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		list = append(list, f)
	}
	return FromFamilies(list), nil
}

// loraFamily holds the Unix time of the last LoRA update: its values are
// compared within loraSlack seconds.
const (
	loraFamily = "vllm:lora_requests_info"
	loraSlack  = 60
)

// Diff lists the differences between two sets of samples, one line each,
// sorted; nil when they agree. A histogram with no observation on one side
// and no series on the other agrees (client_golang shows bound histogram
// children before their first observation, OpenTelemetry does not). Sums of
// floating-point histograms are compared up to rounding and the LoRA info
// gauge, whose value is the time of the update, within a minute.
func Diff(a, b Samples, nameA, nameB string) []string {
	var out []string
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		x, inA := a[k]
		y, inB := b[k]
		switch {
		case !inA && !(y.Type == "histogram" && y.Count == 0):
			out = append(out, fmt.Sprintf("%s only in %s: %v", k, nameB, y))
		case !inB && !(x.Type == "histogram" && x.Count == 0):
			out = append(out, fmt.Sprintf("%s only in %s: %v", k, nameA, x))
		case inA && inB && !sameSample(k, x, y):
			out = append(out, fmt.Sprintf("%s differs:\n  %s: %v\n  %s: %v", k, nameA, x, nameB, y))
		}
	}
	sort.Strings(out)
	return out
}

func sameSample(key string, x, y Sample) bool {
	if x.Type != y.Type || x.Count != y.Count || !closeTo(x.Sum, y.Sum) || len(x.Buckets) != len(y.Buckets) {
		return false
	}
	for le, n := range x.Buckets {
		if m, ok := y.Buckets[le]; !ok || m != n {
			return false
		}
	}
	if strings.HasPrefix(key, loraFamily+"{") {
		return math.Abs(x.Value-y.Value) <= loraSlack
	}
	return x.Value == y.Value
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// NonZero counts the counter series with a value above zero and the
// histogram series with observations: what makes a comparison not vacuous.
func (s Samples) NonZero() (counters, histograms int) {
	for _, x := range s {
		switch {
		case x.Type == "counter" && x.Value > 0:
			counters++
		case x.Type == "histogram" && x.Count > 0:
			histograms++
		}
	}
	return counters, histograms
}

// Families returns the family names of the samples.
func (s Samples) Families() map[string]bool {
	out := map[string]bool{}
	for k := range s {
		out[k[:strings.IndexByte(k, '{')]] = true
	}
	return out
}

// notModelled are the families the OpenTelemetry variants (naive,
// precomputed) do not record: they came with newer vLLM versions, after the
// variants were written; ClientGolang records them. The agreement checks
// leave them out for those variants (see Modelled).
// vllm:prompt_tokens_cached_by_source is among them: those variants record
// the cached tokens without a tier.
var notModelled = []string{"vllm:prompt_tokens_cached_by_source_total",
	"vllm:estimated_flops_per_gpu_total", "vllm:estimated_read_bytes_per_gpu_total",
	"vllm:estimated_write_bytes_per_gpu_total", "vllm:nixl_num_notifications_after_expiry_total",
	"vllm:num_requests_kv_fetch_by_stage", "vllm:admission_rejections_total"}

// Modelled returns the samples of the families the OpenTelemetry variants record.
func Modelled(s Samples) Samples {
	out := Samples{}
	for k, v := range s {
		family, _, _ := strings.Cut(k, "{")
		if !slices.Contains(notModelled, family) {
			out[k] = v
		}
	}
	return out
}
