package views_test

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// vllmKinds are vLLM's histogram bucket kinds and the histograms of each,
// as vllm/v1/metrics/loggers.py @5b846bf6 builds them: each kind's list is
// histogram_buckets(kind, overrides=custom_buckets), custom_buckets being
// --custom-histogram-buckets (observability_config.custom_histogram_buckets).
var vllmKinds = map[views.BucketKind][]string{
	"request_latency": {"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
		"vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"},
	"time_to_first_token":     {"vllm:time_to_first_token_seconds"},
	"inter_token_latency":     {"vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds"},
	"iteration_tokens":        {"vllm:iteration_tokens_total"},
	"request_params_n":        {"vllm:request_params_n"},
	"request_num_preemptions": {"vllm:request_num_preemptions"},
	"request_tokens": {"vllm:request_prompt_tokens", "vllm:request_generation_tokens",
		"vllm:request_max_num_generation_tokens", "vllm:request_params_max_tokens", "vllm:request_prefill_kv_computed_tokens"},
	"kv_cache_residency": {"vllm:kv_block_lifetime_seconds", "vllm:kv_block_idle_before_evict_seconds",
		"vllm:kv_block_reuse_gap_seconds"},
}

// The kinds are vLLM's, one to one, each with vLLM's histograms.
func TestBucketKinds(t *testing.T) {
	kinds := views.BucketKinds()
	if want := slices.Sorted(maps.Keys(vllmKinds)); !slices.Equal(slices.Sorted(slices.Values(kinds)), want) {
		t.Fatalf("kinds %v, want vLLM's %v", kinds, want)
	}
	for _, k := range kinds {
		if got := k.Families(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(vllmKinds[k]))) {
			t.Errorf("kind %s: families %v, want %v", k, got, vllmKinds[k])
		}
	}
}

// WithCustomHistogramBuckets replaces the buckets of every histogram of each
// kind it names, on every engine, and of no other histogram: each series of
// the scenario's scrape, against the scrape without the option.
func TestWithCustomHistogramBuckets(t *testing.T) {
	vs, err := views.VLLM()
	def := scrapeWith(t, vs, err)
	bounds := []float64{1, 2, 3}
	for kind, fams := range vllmKinds {
		t.Run(string(kind), func(t *testing.T) {
			vs, err := views.VLLM(views.WithCustomHistogramBuckets(map[views.BucketKind][]float64{kind: bounds}))
			got := scrapeWith(t, vs, err)
			observed := 0
			for name, mf := range got {
				if mf.GetType() != dto.MetricType_HISTOGRAM {
					continue
				}
				for i, m := range mf.GetMetric() {
					if slices.Contains(fams, name) {
						observed++
						if b := finiteBounds(m); !slices.Equal(b, bounds) {
							t.Errorf("%s series %d: bounds %v, want %v", name, i, b, bounds)
						}
					} else if b, want := finiteBounds(m), finiteBounds(def[name].GetMetric()[i]); !slices.Equal(b, want) {
						t.Errorf("%s series %d, not of kind %s: bounds %v, want its own %v", name, i, kind, b, want)
					}
				}
			}
			if observed == 0 {
				t.Errorf("the scenario observes no histogram of kind %s", kind)
			}
		})
	}
}

// aggregationOf returns the aggregation the views give the stream of an
// instrument's histogram; nil when none names it.
func aggregationOf(t *testing.T, vs []sdkmetric.View, instrumentName, stream string) sdkmetric.Aggregation {
	t.Helper()
	in := sdkmetric.Instrument{Name: instrumentName, Kind: sdkmetric.InstrumentKindHistogram,
		Scope: instrumentation.Scope{Name: instrument.ScopeName, Version: instrument.Version}}
	for _, v := range vs {
		if s, ok := v(in); ok && s.Name == stream {
			return s.Aggregation
		}
	}
	t.Fatalf("no view makes stream %s of %s", stream, instrumentName)
	return nil
}

// A family's own option wins over its kind's, whatever the order:
// WithBuckets and WithExponential; WithExponentialLatency leaves a kind
// given buckets explicit; an older version's family of a kind's instrument
// takes the kind's buckets.
func TestCustomHistogramBucketsPrecedence(t *testing.T) {
	kind := map[views.BucketKind][]float64{"request_latency": {1, 2, 3}, "inter_token_latency": {0.5, 5}}
	for name, opts := range map[string][]views.Option{
		"kind first": {views.WithCustomHistogramBuckets(kind), views.WithBuckets("vllm:e2e_request_latency_seconds", 7, 70)},
		"kind last":  {views.WithBuckets("vllm:e2e_request_latency_seconds", 7, 70), views.WithCustomHistogramBuckets(kind)},
	} {
		vs, err := views.VLLM(append(opts, views.WithExponential("vllm:request_queue_time_seconds"),
			views.WithExponentialLatency(), views.WithVersion("0.11"))...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range []struct {
			instrument, stream string
			want               []float64 // nil: exponential
		}{
			{instrument.NameE2ERequestLatency, "vllm:e2e_request_latency_seconds", []float64{7, 70}},
			{instrument.NameRequestInferenceTime, "vllm:request_inference_time_seconds", []float64{1, 2, 3}},
			{instrument.NameInterTokenLatency, "vllm:inter_token_latency_seconds", []float64{0.5, 5}},
			{instrument.NameInterTokenLatency, "vllm:time_per_output_token_seconds", []float64{0.5, 5}},
			{instrument.NameTimeToFirstToken, "vllm:time_to_first_token_seconds", nil}, // no kind given: WithExponentialLatency
			{instrument.NameRequestQueueTime, "vllm:request_queue_time_seconds", nil},  // WithExponential names it
		} {
			switch a := aggregationOf(t, vs, c.instrument, c.stream).(type) {
			case sdkmetric.AggregationExplicitBucketHistogram:
				if !slices.Equal(a.Boundaries, c.want) || c.want == nil {
					t.Errorf("%s: %s bounds %v, want %v", name, c.stream, a.Boundaries, c.want)
				}
			case sdkmetric.AggregationBase2ExponentialHistogram:
				if c.want != nil {
					t.Errorf("%s: %s exponential, want bounds %v", name, c.stream, c.want)
				}
			default:
				t.Errorf("%s: %s aggregation %T", name, c.stream, a)
			}
		}
	}
}

// vLLM's --custom-histogram-buckets JSON decodes into the option's map.
func TestCustomHistogramBucketsFromJSON(t *testing.T) {
	var overrides map[views.BucketKind][]float64
	if err := json.Unmarshal([]byte(`{"request_latency": [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0]}`), &overrides); err != nil {
		t.Fatal(err)
	}
	r := scenarioReader(t, views.WithCustomHistogramBuckets(overrides))
	if got := r.Histogram("vllm:request_decode_time_seconds", "model_name", modelName, "engine", "0"); !slices.Equal(got.Bounds, overrides["request_latency"]) {
		t.Errorf("bounds %v, want %v", got.Bounds, overrides["request_latency"])
	}
}

// A kind vLLM does not have, and boundaries WithBuckets would refuse, are
// refused whole; so is the option on Semconv, which has none of vLLM's
// histograms.
func TestCustomHistogramBucketsErrors(t *testing.T) {
	for _, c := range []struct {
		overrides map[views.BucketKind][]float64
		mention   string
	}{
		{map[views.BucketKind][]float64{"request_latencies": {1}}, "request_latency"},
		{map[views.BucketKind][]float64{"ttft": {1}}, "time_to_first_token"},
		{map[views.BucketKind][]float64{"request_latency": {}}, "at least one"},
		{map[views.BucketKind][]float64{"request_latency": nil}, "at least one"},
		{map[views.BucketKind][]float64{"request_tokens": {2, 1}}, "increasing"},
		{map[views.BucketKind][]float64{"kv_cache_residency": {1, math.NaN()}}, "finite"},
		{map[views.BucketKind][]float64{"iteration_tokens": {1, math.Inf(1)}}, "finite"},
	} {
		_, err := views.VLLM(views.WithCustomHistogramBuckets(c.overrides))
		if !errors.Is(err, views.ErrOption) || !strings.Contains(err.Error(), c.mention) || !strings.Contains(err.Error(), "WithCustomHistogramBuckets") {
			t.Errorf("%v: %v, want ErrOption naming the option and %q", c.overrides, err, c.mention)
		}
	}
	if _, err := views.Semconv(views.WithCustomHistogramBuckets(map[views.BucketKind][]float64{"request_latency": {1}})); !errors.Is(err, views.ErrOption) {
		t.Errorf("Semconv with WithCustomHistogramBuckets: %v, want ErrOption", err)
	}
	if _, err := views.VLLM(views.WithCustomHistogramBuckets(nil)); err != nil {
		t.Errorf("no overrides: %v, want none", err)
	}
}
