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

// ErrOption reports an option that names an unknown family or gives invalid
// bucket boundaries.
var ErrOption = errors.New("views: invalid option")

// Family names that do not follow the rule of VLLMName.
const (
	PromptTokensBySource = "vllm:prompt_tokens_by_source"
	kvCacheUsage         = "vllm:kv_cache_usage_perc"
	iterationTokens      = "vllm:iteration_tokens_total"
)

// promptTokensTotalDescription is the description of vllm:prompt_tokens: the
// instrument's own describes the breakdown by source, which that family sums away.
const promptTokensTotalDescription = "Prompt tokens of requests that produced their first output, over all sources " +
	"(computed here, local prefix cache hits and KV received through a connector)."

// ratioUnit replaces the unit "1" of the KV cache usage gauge: the Prometheus
// exporter appends _ratio to gauges in unit "1", and vLLM's name has none.
const ratioUnit = "{fraction}"

// VLLMName returns the vLLM family name of an instrument of package
// instrument: "vllm:" and the name after "vllm.", with "_seconds" for
// instruments in seconds; vllm.kv_cache_usage and vllm.iteration_tokens keep
// vLLM's own names. Counter families get "_total" in the exposition.
func VLLMName(d instrument.Descriptor) string {
	switch d.Name {
	case instrument.NameKVCacheUsage:
		return kvCacheUsage
	case instrument.NameIterationTokens:
		return iterationTokens
	}
	name := "vllm:" + strings.TrimPrefix(d.Name, "vllm.")
	if d.Unit == "s" {
		name += "_seconds"
	}
	return name
}

type config struct {
	buckets    map[string][]float64
	attributes map[string][]string
}

// Option adjusts a family of VLLM or Semconv.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithBuckets replaces the bucket boundaries of one histogram family, named
// as exported (for example "vllm:e2e_request_latency_seconds" or
// "gen_ai.server.request.duration"). Boundaries must be finite and increasing.
func WithBuckets(family string, bounds ...float64) Option {
	return optionFunc(func(c *config) { c.buckets[family] = append([]float64(nil), bounds...) })
}

// WithAttributes keeps only the given attribute keys on one family (an
// allow-list); for example WithAttributes("vllm:generation_tokens",
// "model_name") drops the engine label.
func WithAttributes(family string, keys ...string) Option {
	return optionFunc(func(c *config) { c.attributes[family] = append([]string(nil), keys...) })
}

func newConfig(opts []Option) config {
	c := config{buckets: map[string][]float64{}, attributes: map[string][]string{}}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// check reports options naming unknown families, bucket options on families
// that are not histograms, and bad boundaries.
func (c *config) check(families, histograms []string) error {
	for family, bounds := range c.buckets {
		if !slices.Contains(histograms, family) {
			return fmt.Errorf("%w: WithBuckets: unknown histogram family %q", ErrOption, family)
		}
		for i, b := range bounds {
			if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= bounds[i-1]) {
				return fmt.Errorf("%w: WithBuckets(%q): boundaries must be finite and increasing: %v", ErrOption, family, bounds)
			}
		}
	}
	for family := range c.attributes {
		if !slices.Contains(families, family) {
			return fmt.Errorf("%w: WithAttributes: unknown family %q", ErrOption, family)
		}
	}
	return nil
}

// stream builds the view of one exported family from one instrument.
func (c *config) stream(d instrument.Descriptor, family string, filter attribute.Filter) sdkmetric.View {
	s := sdkmetric.Stream{Name: family, Description: d.Description, AttributeFilter: filter}
	if keys, ok := c.attributes[family]; ok {
		s.AttributeFilter = allow(keys)
	}
	if bounds, ok := c.buckets[family]; ok {
		s.Aggregation = sdkmetric.AggregationExplicitBucketHistogram{Boundaries: bounds}
	}
	if d.Unit == "1" && d.Kind == instrument.Gauge {
		s.Unit = ratioUnit
	}
	return sdkmetric.NewView(sdkmetric.Instrument{
		Name:  d.Name,
		Scope: instrumentation.Scope{Name: instrument.ScopeName},
	}, s)
}

// VLLM returns the views that export every instrument under vLLM's family
// name, label set and buckets. The OpenTelemetry GenAI attributes are
// dropped; constant attributes of the Recorder are kept.
func VLLM(opts ...Option) ([]sdkmetric.View, error) {
	c := newConfig(opts)
	var families, histograms []string
	for _, d := range instrument.Descriptors() {
		families = append(families, VLLMName(d))
		if d.Kind == instrument.Histogram {
			histograms = append(histograms, VLLMName(d))
		}
	}
	families = append(families, PromptTokensBySource)
	if err := c.check(families, histograms); err != nil {
		return nil, err
	}
	var views []sdkmetric.View
	for _, d := range instrument.Descriptors() {
		if d.Name == instrument.NamePromptTokens {
			total := d
			total.Description = promptTokensTotalDescription
			views = append(views,
				c.stream(total, VLLMName(d), deny(d, instrument.KeySource)),
				c.stream(d, PromptTokensBySource, deny(d)))
			continue
		}
		views = append(views, c.stream(d, VLLMName(d), deny(d)))
	}
	return views, nil
}

// semconvOnly are the attribute keys kept for views.Semconv and dropped from
// the vLLM families.
var semconvOnly = []string{instrument.KeyGenAIOperationName, instrument.KeyGenAIProviderName,
	instrument.KeyGenAIRequestModel, instrument.KeyErrorType}

// deny drops the GenAI attributes and the extra keys from an instrument's
// streams. It is nil when the instrument carries none of them: a filter makes
// the SDK rebuild the attribute set of every measurement, about half the cost
// of recording one.
func deny(d instrument.Descriptor, extra ...string) attribute.Filter {
	keys := slices.DeleteFunc(slices.Concat(semconvOnly, extra),
		func(k string) bool { return !slices.Contains(d.Attributes, k) })
	if len(keys) == 0 {
		return nil
	}
	return func(kv attribute.KeyValue) bool { return !slices.Contains(keys, string(kv.Key)) }
}

func allow(keys []string) attribute.Filter {
	return func(kv attribute.KeyValue) bool { return slices.Contains(keys, string(kv.Key)) }
}
