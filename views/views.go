// Package views holds the OpenTelemetry SDK Views that shape the Recorder's
// instruments into exported streams.
//
// VLLM renames every stream to vLLM's exact family name and label set, so a
// Prometheus scrape (through the OTel Prometheus exporter, without scope
// labels or target_info) is what vLLM dashboards, autoscalers and inference
// gateways read. It derives both vllm:prompt_tokens (the total over sources)
// and vllm:prompt_tokens_by_source from the one prompt-tokens instrument.
// Semconv adds the OpenTelemetry GenAI server histograms.
//
// Without any of these views a MeterProvider still exports every instrument
// under its own OpenTelemetry name (vllm.prompt_tokens, ...), with all its
// attributes and vLLM's buckets as advisory boundaries; a Prometheus scrape
// then shows vllm_prompt_tokens_total{source=...} and so on.
package views

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
)

// ErrOption reports an option that names an unknown family, gives invalid
// bucket boundaries or an allow-list that would merge what must stay apart.
var ErrOption = errors.New("views: invalid option")

// Family names that do not follow the rule of VLLMName.
const (
	PromptTokensBySource = "vllm:prompt_tokens_by_source"
	kvCacheUsage         = "vllm:kv_cache_usage_perc"
	iterationTokens      = "vllm:iteration_tokens_total"
)

// PromptTokensCachedBySource is the family of cached prompt tokens by tier,
// which VLLM derives from the cached-tokens instrument beside its total.
const PromptTokensCachedBySource = "vllm:prompt_tokens_cached_by_source"

// promptTokensTotalDescription is the description of vllm:prompt_tokens: the
// instrument's own describes the breakdown by source, which that family sums away.
const promptTokensTotalDescription = "Prompt tokens of requests that produced their first output, over all sources " +
	"(computed here, local prefix cache hits and KV received through a connector)."

// bySource are the instruments with a source attribute that VLLM exports as
// two families: the total (source summed away, under VLLMName) and the
// breakdown (source kept, under bySource). The total's description replaces
// the instrument's, which describes the breakdown.
var bySource = []struct{ instrument, family, totalDescription string }{
	{instrument.NamePromptTokens, PromptTokensBySource, promptTokensTotalDescription},
	{instrument.NamePromptTokensCached, PromptTokensCachedBySource, "Prompt tokens not computed here: " +
		"local prefix cache hits plus KV received through a connector, over all tiers."},
}

// splitBySource returns the bySource entry of an instrument, if any.
func splitBySource(name string) (family, totalDescription string, ok bool) {
	for _, b := range bySource {
		if b.instrument == name {
			return b.family, b.totalDescription, true
		}
	}
	return "", "", false
}

// ratioUnit replaces the unit "1" of the KV cache usage gauge: the Prometheus
// exporter appends _ratio to gauges in unit "1", and vLLM's name has none.
const ratioUnit = "{fraction}"

// unsuffixed are the instruments with a unit whose vLLM names carry no unit
// suffix: vLLM's KV offloading transfer families (vllm:kv_offload_load_time
// counts seconds, vllm:kv_offload_load_size observes bytes), and the byte
// families whose names hold "bytes" before their end
// (vllm:nixl_bytes_transferred, vllm:estimated_read_bytes_per_gpu). VLLMName
// adds no "_seconds" to them and their streams take the unit as an
// annotation ("{s}", "{By}"), which neither the Prometheus exporter nor an
// OTLP translation with suffixes (Prometheus 3's OTLP receiver with
// NoUTF8EscapingWithSuffixes, which appends "_bytes" to a name that does not
// end in it) turns into a suffix.
var unsuffixed = []string{instrument.NameKVOffloadLoadTime, instrument.NameKVOffloadStoreTime,
	instrument.NameKVOffloadLoadSize, instrument.NameKVOffloadStoreSize,
	instrument.NameNIXLBytesTransferred, instrument.NameEstimatedReadBytesPerGPU, instrument.NameEstimatedWriteBytesPerGPU}

// VLLMName returns the vLLM stream name of an instrument of package
// instrument, as OTLP carries it: "vllm:" and the name after "vllm.", with
// "_seconds" for instruments in seconds; vllm.kv_cache_usage and
// vllm.iteration_tokens keep vLLM's own names, and the KV offloading
// transfer families have no unit suffix (unsuffixed). A scrape shows
// counters with "_total" (Families), and options name families that way.
// The HTTP server families take the instrumentator's names (HTTPFamilies).
// An instrument outside the vllm namespace (the P/D router families, which
// vLLM does not define) keeps its OpenTelemetry name.
func VLLMName(d instrument.Descriptor) string {
	switch d.Name {
	case instrument.NameKVCacheUsage:
		return kvCacheUsage
	case instrument.NameIterationTokens:
		return iterationTokens
	}
	if name, ok := httpNames[d.Name]; ok {
		return name
	}
	if !strings.HasPrefix(d.Name, "vllm.") {
		return d.Name
	}
	name := "vllm:" + strings.TrimPrefix(d.Name, "vllm.")
	if d.Unit == "s" && !slices.Contains(unsuffixed, d.Name) {
		name += "_seconds"
	}
	return name
}

type config struct {
	buckets     []bucketsOption
	kindBuckets []kindBucketsOption // WithCustomHistogramBuckets
	attributes  []attributesOption
	exponential []string // families with the exponential aggregation
	expLatency  bool     // every latency family too (WithExponentialLatency)
	resolution  *sdkmetric.AggregationBase2ExponentialHistogram
	sdkExemplar bool   // the SDK's reservoirs on the latency families too (WithSDKExemplarReservoirs)
	inference   bool   // the GenAI client durations under the conventions' inference names (WithGenAIInferenceNames)
	version     string // WithVersion's; empty without it
}

type bucketsOption struct {
	family string
	bounds []float64
}

type attributesOption struct {
	family string
	keys   []string
}

// Option adjusts a family of VLLM or Semconv. Options name a family as it
// is exposed: for VLLM as Families and a Prometheus scrape name it (counters
// end in _total, "vllm:generation_tokens_total"); for Semconv by its
// OpenTelemetry name ("gen_ai.server.request.duration").
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithBuckets replaces the bucket boundaries of one histogram family (for
// example "vllm:e2e_request_latency_seconds" or
// "gen_ai.server.request.duration"). Boundaries must be finite and
// increasing, and there must be at least one: to keep the default buckets,
// omit the option.
func WithBuckets(family string, bounds ...float64) Option {
	return optionFunc(func(c *config) {
		c.buckets = append(c.buckets, bucketsOption{family, append([]float64(nil), bounds...)})
	})
}

// WithAttributes keeps only the given attribute keys on one counter or
// histogram family (an allow-list), whose series then sum over what is
// dropped; for example WithAttributes("vllm:generation_tokens_total",
// "model_name") drops the engine label. The list must keep the model label
// (model_name; gen_ai.request.model for Semconv), so that the series of two
// models never merge. Gauges take no allow-list: merged gauge series keep one
// value and lose the others. Keys that are not labels of the family are
// taken as constant attributes of the Recorder (instrument.WithAttributes).
func WithAttributes(family string, keys ...string) Option {
	return optionFunc(func(c *config) {
		c.attributes = append(c.attributes, attributesOption{family, append([]string(nil), keys...)})
	})
}

// Defaults of the base-2 exponential aggregation of WithExponential and
// WithExponentialLatency: the OpenTelemetry SDK's own (and those of
// OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION). At most 160
// buckets span a range of values of 2^(160/2^scale): the SDK starts at
// scale 20 and lowers the scale until the observations fit, so latencies
// from 1 ms to 100 s (a ratio of 10^5, 17 doublings) end at scale 3, where a
// bucket is 2^(1/8) = 9.05% wide: a quantile estimated inside it is off by
// less than that (4.4% from the bucket's geometric middle), where vLLM's
// 1-2-5 buckets leave up to 100% (between 10 and 20 s). Prometheus serves at
// most scale 8; the exporter merges finer buckets down to it.
const (
	DefaultExponentialMaxSize  = 160
	DefaultExponentialMaxScale = 20
)

// latencyUnit is the unit of the latency histograms, which
// WithExponentialLatency selects.
const latencyUnit = "s"

// WithExponential exports the given histogram families with the SDK's
// base-2 exponential aggregation (DefaultExponentialMaxSize buckets,
// DefaultExponentialMaxScale; see WithExponentialResolution) instead of
// explicit buckets: OTLP carries them as exponential histograms, and the
// Prometheus exporter serves them as native histograms, which only the
// protobuf exposition shows (a text scrape sees _count, _sum and a single
// le="+Inf" bucket). vLLM's dashboards read classic buckets: the default
// stays classic. A family may not take both WithBuckets and WithExponential.
func WithExponential(families ...string) Option {
	return optionFunc(func(c *config) { c.exponential = append(c.exponential, families...) })
}

// WithExponentialLatency is WithExponential for every latency histogram
// (unit seconds: TTFT, inter-token latency, e2e, queue, prefill, decode,
// inference, time per output token; for Semconv its three histograms). A
// family given WithBuckets keeps its explicit buckets.
func WithExponentialLatency() Option {
	return optionFunc(func(c *config) { c.expLatency = true })
}

// WithExponentialResolution sets the most buckets (at least 2) and the
// highest scale (-4 to 20; Prometheus cannot serve a lower one) of the
// families exported with the exponential aggregation. Fewer buckets cost
// less memory per series and scrape; the scale only caps the resolution of
// narrow distributions.
func WithExponentialResolution(maxSize, maxScale int32) Option {
	return optionFunc(func(c *config) {
		c.resolution = &sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: maxSize, MaxScale: maxScale}
	})
}

// WithSDKExemplarReservoirs gives the latency histograms the SDK's default
// exemplar reservoirs (random samples: one per bucket, or 20 per interval
// for the exponential aggregation) instead of SlowestExemplars, which keeps
// the slowest measurement of each bucket or doubling of every collection
// interval. Streams that drop attributes still keep IDs only
// (IDOnlyExemplars).
func WithSDKExemplarReservoirs() Option {
	return optionFunc(func(c *config) { c.sdkExemplar = true })
}

// exponentialOf returns the aggregation of a family exported exponentially:
// one named by WithExponential, or a latency histogram under
// WithExponentialLatency without WithBuckets of its own.
func (c *config) exponentialOf(family string, d instrument.Descriptor) (sdkmetric.Aggregation, bool) {
	named := slices.Contains(c.exponential, family)
	if _, explicit := c.bucketsOf(family, d.Name); !named && (explicit || !c.expLatency ||
		d.Kind != instrument.Histogram || d.Unit != latencyUnit) {
		return nil, false
	}
	a := sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: DefaultExponentialMaxSize, MaxScale: DefaultExponentialMaxScale}
	if c.resolution != nil {
		a.MaxSize, a.MaxScale = c.resolution.MaxSize, c.resolution.MaxScale
	}
	return a, true
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// bucketsOf returns the boundaries set for a family of an instrument: its
// own (WithBuckets), or its instrument's kind's (WithCustomHistogramBuckets).
func (c *config) bucketsOf(family, instrumentName string) ([]float64, bool) {
	if bounds, ok := c.familyBucketsOf(family); ok {
		return bounds, true
	}
	return c.kindBucketsOf(instrumentName)
}

// familyBucketsOf returns the boundaries WithBuckets set for a family, the
// last option winning.
func (c *config) familyBucketsOf(family string) ([]float64, bool) {
	for i := len(c.buckets) - 1; i >= 0; i-- {
		if c.buckets[i].family == family {
			return c.buckets[i].bounds, true
		}
	}
	return nil, false
}

// attributesOf returns the allow-list set for a family, the last option winning.
func (c *config) attributesOf(family string) ([]string, bool) {
	for i := len(c.attributes) - 1; i >= 0; i-- {
		if c.attributes[i].family == family {
			return c.attributes[i].keys, true
		}
	}
	return nil, false
}

// optionFamily is what the options need to know of a family.
type optionFamily struct {
	name  string // as options name it: the exposed name
	kind  instrument.Kind
	model string // the label an allow-list must keep
}

// familySet is the families of one views constructor, for checking options.
type familySet struct {
	fn       string // "views.VLLM" or "views.Semconv"
	families []optionFamily
}

func (s familySet) find(name string) (optionFamily, bool) {
	i := slices.IndexFunc(s.families, func(f optionFamily) bool { return f.name == name })
	if i < 0 {
		return optionFamily{}, false
	}
	return s.families[i], true
}

// vllmFamilies are the families VLLM's options name, from Families.
func vllmFamilies() familySet {
	s := familySet{fn: "views.VLLM"}
	for _, f := range Families() {
		s.families = append(s.families, optionFamily{f.Name, f.Instrument.Kind, instrument.KeyModelName})
	}
	return s
}

// semconvFamilySet are the families Semconv's options name.
func semconvFamilySet() familySet {
	s := familySet{fn: "views.Semconv"}
	for _, f := range slices.Concat(ServerFamilies(), ClientFamilies()) {
		s.families = append(s.families, optionFamily{f.Name, instrument.Histogram, instrument.KeyGenAIRequestModel})
	}
	return s
}

// minPrometheusScale is the lowest scale of a Prometheus native histogram;
// the exporter drops points of a lower one.
const minPrometheusScale = -4

// check reports the first bad option, in the order given: an unknown family,
// buckets of a family that is not a histogram, no or bad boundaries, an
// exponential aggregation of a family that is not a histogram or has
// buckets, a bad resolution, an allow-list of a gauge, or one without the
// model label.
func (c *config) check(own, other familySet) error {
	for _, o := range c.buckets {
		where := fmt.Sprintf("WithBuckets(%q)", o.family)
		f, ok := own.find(o.family)
		if !ok {
			return unknownFamily(where, o.family, own, other)
		}
		if f.kind != instrument.Histogram {
			return fmt.Errorf("%w: %s: %s is a %s; only histograms have buckets", ErrOption, where, o.family, f.kind)
		}
		if err := checkBounds(where, o.bounds); err != nil {
			return err
		}
	}
	if err := c.checkKinds(); err != nil {
		return err
	}
	for _, name := range c.exponential {
		where := fmt.Sprintf("WithExponential(%q)", name)
		f, ok := own.find(name)
		if !ok {
			return unknownFamily(where, name, own, other)
		}
		if f.kind != instrument.Histogram {
			return fmt.Errorf("%w: %s: %s is a %s; only histograms have an exponential aggregation", ErrOption, where, name, f.kind)
		}
		if _, ok := c.familyBucketsOf(name); ok {
			return fmt.Errorf("%w: %s: the family also has WithBuckets; give it explicit buckets or the "+
				"exponential aggregation, not both", ErrOption, where)
		}
	}
	if r := c.resolution; r != nil && (r.MaxSize < 2 || r.MaxScale < minPrometheusScale || r.MaxScale > DefaultExponentialMaxScale) {
		return fmt.Errorf("%w: WithExponentialResolution(%d, %d): want at least 2 buckets and a scale from %d to %d "+
			"(Prometheus serves no scale below %d)", ErrOption, r.MaxSize, r.MaxScale,
			minPrometheusScale, DefaultExponentialMaxScale, minPrometheusScale)
	}
	for _, o := range c.attributes {
		where := fmt.Sprintf("WithAttributes(%q)", o.family)
		f, ok := own.find(o.family)
		if !ok {
			return unknownFamily(where, o.family, own, other)
		}
		if f.kind == instrument.Gauge {
			return fmt.Errorf("%w: %s: %s is a gauge: series merged by dropping labels would keep one value "+
				"and lose the others; only counters and histograms, whose merged series are sums, take an allow-list",
				ErrOption, where, o.family)
		}
		if !slices.Contains(o.keys, f.model) {
			list := fmt.Sprintf("the allow-list %q", o.keys)
			if len(o.keys) == 0 {
				list = "an empty allow-list drops every label; it"
			}
			return fmt.Errorf("%w: %s: %s must keep %s, or the series of different models "+
				"(which NewRecorder keeps apart) merge; dropping the other labels sums over them, "+
				"for example WithAttributes(%q, %q)", ErrOption, where, list, f.model, o.family, f.model)
		}
	}
	return nil
}

// checkBounds reports bucket boundaries that are none, or not finite and
// increasing.
func checkBounds(where string, bounds []float64) error {
	if len(bounds) == 0 {
		return fmt.Errorf("%w: %s: no boundaries would make a single +Inf bucket; "+
			"give at least one, or omit the option to keep the default buckets", ErrOption, where)
	}
	for i, b := range bounds {
		if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= bounds[i-1]) {
			return fmt.Errorf("%w: %s: boundaries must be finite and increasing: %v", ErrOption, where, bounds)
		}
	}
	return nil
}

// unknownFamily reports a family that own does not have, suggesting the name
// meant: the exposed name of a family named another way ("_total" missing,
// the instrument or Prometheus name), or the constructor that has it.
func unknownFamily(where, name string, own, other familySet) error {
	hint := "; the families are listed by views.Families and in docs/metrics.md"
	if f, ok := similar(name, own); ok {
		hint = fmt.Sprintf("; did you mean %q? Options name a family as exposed: counters end in _total, "+
			"GenAI families keep their OpenTelemetry name", f)
	} else if f, ok := similar(name, other); ok {
		hint = fmt.Sprintf("; %q is a family of %s: give the option there", f, other.fn)
	}
	return fmt.Errorf("%w: %s: %s has no family %q%s", ErrOption, where, own.fn, name, hint)
}

// similar returns the family of s whose name is the given one up to
// separators and the _total and _seconds suffixes.
func similar(name string, s familySet) (string, bool) {
	key := func(n string) string {
		n = strings.NewReplacer(".", "_", ":", "_").Replace(n)
		return strings.TrimSuffix(strings.TrimSuffix(n, "_total"), "_seconds")
	}
	for _, f := range s.families {
		if key(f.name) == key(name) {
			return f.name, true
		}
	}
	return "", false
}

// exposedName is the name a scrape shows for a stream of an instrument of
// the given kind: counters carry "_total". Options and Families use it.
func exposedName(stream string, kind instrument.Kind) string {
	if kind == instrument.Counter {
		return stream + "_total"
	}
	return stream
}

// stream builds the view of one exported family from one instrument.
func (c *config) stream(d instrument.Descriptor, family string, filter attribute.Filter) sdkmetric.View {
	return c.streamAs(d, family, family, filter)
}

// streamAs is stream exporting the family under another name: its options
// still name it family.
func (c *config) streamAs(d instrument.Descriptor, family, name string, filter attribute.Filter) sdkmetric.View {
	s := sdkmetric.Stream{Name: name, Description: d.Description, AttributeFilter: filter}
	exposed := exposedName(family, d.Kind)
	if keys, ok := c.attributesOf(exposed); ok {
		s.AttributeFilter = allow(keys)
	}
	if bounds, ok := c.bucketsOf(exposed, d.Name); ok {
		s.Aggregation = sdkmetric.AggregationExplicitBucketHistogram{Boundaries: bounds}
	}
	if a, ok := c.exponentialOf(exposed, d); ok {
		s.Aggregation = a
	}
	switch {
	case d.Kind == instrument.Histogram && d.Unit == latencyUnit && !c.sdkExemplar:
		s.ExemplarReservoirProviderSelector = SlowestExemplars
	case s.AttributeFilter != nil:
		s.ExemplarReservoirProviderSelector = IDOnlyExemplars
	}
	if d.Unit == "1" && d.Kind == instrument.Gauge {
		s.Unit = ratioUnit
	}
	if slices.Contains(unsuffixed, d.Name) {
		s.Unit = "{" + d.Unit + "}"
	}
	return sdkmetric.NewView(sdkmetric.Instrument{
		Name:  d.Name,
		Scope: instrumentation.Scope{Name: instrument.ScopeName},
	}, s)
}

// VLLM returns the views that export every instrument under vLLM's family
// name, label set and buckets; constant attributes of the Recorder are kept.
// The latency histograms keep the slowest measurement of each bucket (or
// doubling, when exponential) of every collection interval as exemplars
// (SlowestExemplars; WithSDKExemplarReservoirs for the SDK's).
// The GenAI server and client metrics are Semconv's.
func VLLM(opts ...Option) ([]sdkmetric.View, error) {
	c := newConfig(opts)
	legacyOf, err := c.legacyOf()
	if err != nil {
		return nil, err
	}
	own := vllmFamilies()
	for _, l := range legacyOf {
		f := l.family()
		own.families = append(own.families, optionFamily{f.Name, f.Instrument.Kind, instrument.KeyModelName})
	}
	if err := c.check(own, semconvFamilySet()); err != nil {
		return nil, err
	}
	var views []sdkmetric.View
	for _, l := range legacyOf {
		views = append(views, c.stream(l.family().Instrument, l.name, nil))
	}
	// The instruments of legacy families without a successor are exported
	// only for the versions that had them.
	for _, d := range instrument.LegacyDescriptors() {
		if !slices.ContainsFunc(legacyOf, func(l legacy) bool { return l.instrument == d.Name }) {
			views = append(views, sdkmetric.NewView(sdkmetric.Instrument{Name: d.Name, Scope: instrumentation.Scope{Name: instrument.ScopeName}},
				sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}}))
		}
	}
	for _, d := range instrument.Descriptors() {
		if family, desc, ok := splitBySource(d.Name); ok {
			total := d
			total.Description = desc
			views = append(views,
				c.stream(total, VLLMName(d), deny(instrument.KeySource)),
				c.stream(d, family, nil))
			continue
		}
		views = append(views, c.stream(d, VLLMName(d), nil))
	}
	for _, d := range instrument.HTTPDescriptors() {
		views = append(views, c.stream(d, VLLMName(d), nil))
	}
	for _, f := range UsageFamilies() {
		views = append(views, c.stream(f.Instrument, f.Instrument.Name, nil))
	}
	return views, nil
}

// deny drops the given keys from an instrument's streams. It is nil
// without keys: a filter makes the SDK rebuild the attribute set of every
// measurement, about half the cost of recording one, and a sampled exemplar
// allocate the dropped attributes.
func deny(keys ...string) attribute.Filter {
	if len(keys) == 0 {
		return nil
	}
	return func(kv attribute.KeyValue) bool { return !slices.Contains(keys, string(kv.Key)) }
}

func allow(keys []string) attribute.Filter {
	return func(kv attribute.KeyValue) bool { return slices.Contains(keys, string(kv.Key)) }
}
