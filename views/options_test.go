package views_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/views"
)

// scrapeWith records the scenario through the given views and parses the scrape.
func scrapeWith(t *testing.T, vs []sdkmetric.View, err error) map[string]*dto.MetricFamily {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	x := newExported(t, vs, scenarioOptions...)
	recordScenario(t, x.rec)
	return families(t, x.scrape())
}

func TestWithBuckets(t *testing.T) {
	vs, err := views.VLLM(views.WithBuckets("vllm:e2e_request_latency_seconds", 1, 10, 60))
	fams := scrapeWith(t, vs, err)
	for _, m := range fams["vllm:e2e_request_latency_seconds"].GetMetric() {
		if got := finiteBounds(m); !slices.Equal(got, []float64{1, 10, 60}) {
			t.Errorf("vllm:e2e_request_latency_seconds has le %v, want [1 10 60]", got)
		}
	}
	// The other latency families keep vLLM's list.
	for _, m := range fams["vllm:request_queue_time_seconds"].GetMetric() {
		if got := finiteBounds(m); !slices.Equal(got, specBuckets["latency"]) {
			t.Errorf("vllm:request_queue_time_seconds has le %v, want %v", got, specBuckets["latency"])
		}
	}
	if len(fams["vllm:e2e_request_latency_seconds"].GetMetric()) != 2 {
		t.Errorf("vllm:e2e_request_latency_seconds has %d series, want one per engine", len(fams["vllm:e2e_request_latency_seconds"].GetMetric()))
	}
}

func TestSemconvWithBuckets(t *testing.T) {
	got := collectSemconv(t, views.WithBuckets(views.GenAIServerRequestDuration, 0.5, 5))
	if len(got[views.GenAIServerRequestDuration]) == 0 {
		t.Fatalf("%s is missing", views.GenAIServerRequestDuration)
	}
	for _, p := range got[views.GenAIServerRequestDuration] {
		if !slices.Equal(p.bounds, []float64{0.5, 5}) {
			t.Errorf("%s has boundaries %v, want [0.5 5]", views.GenAIServerRequestDuration, p.bounds)
		}
	}
}

// WithAttributes keeps only model_name on vllm:generation_tokens: both
// engines' series merge, and no other family loses its engine label.
func TestWithAttributes(t *testing.T) {
	vs, err := views.VLLM(views.WithAttributes("vllm:generation_tokens", "model_name"))
	fams := scrapeWith(t, vs, err)
	gen := fams["vllm:generation_tokens_total"].GetMetric()
	// Engine 0 generated 4 + 3 + 3 + 2 = 12 tokens, engine 1 three: 15.
	if len(gen) != 1 || !slices.Equal(labelNames(gen[0]), []string{"model_name"}) || gen[0].GetCounter().GetValue() != 15 {
		t.Errorf("vllm:generation_tokens_total = %v, want one series {model_name} = 15", gen)
	}
	for _, name := range []string{"vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total", "vllm:num_requests_running"} {
		for _, m := range fams[name].GetMetric() {
			if labelValue(m, "engine") == "" {
				t.Errorf("%s lost its engine label: %v", name, m)
			}
		}
	}
}

func TestOptionErrors(t *testing.T) {
	const e2e = "vllm:e2e_request_latency_seconds"
	for _, c := range []struct {
		name string
		call func() ([]sdkmetric.View, error)
	}{
		{"unknown family", func() ([]sdkmetric.View, error) { return views.VLLM(views.WithBuckets("vllm:nope", 1)) }},
		{"counter family", func() ([]sdkmetric.View, error) { return views.VLLM(views.WithBuckets("vllm:generation_tokens", 1)) }},
		{"gauge family", func() ([]sdkmetric.View, error) { return views.VLLM(views.WithBuckets("vllm:kv_cache_usage_perc", 1)) }},
		{"decreasing", func() ([]sdkmetric.View, error) { return views.VLLM(views.WithBuckets(e2e, 2, 1)) }},
		{"repeated", func() ([]sdkmetric.View, error) { return views.VLLM(views.WithBuckets(e2e, 1, 1)) }},
		{"NaN", func() ([]sdkmetric.View, error) { return views.VLLM(views.WithBuckets(e2e, 1, math.NaN())) }},
		{"infinite", func() ([]sdkmetric.View, error) { return views.VLLM(views.WithBuckets(e2e, 1, math.Inf(1))) }},
		{"attributes of an unknown family", func() ([]sdkmetric.View, error) {
			return views.VLLM(views.WithAttributes("vllm:nope", "model_name"))
		}},
		{"Semconv: a vLLM family", func() ([]sdkmetric.View, error) { return views.Semconv(views.WithBuckets(e2e, 1)) }},
		{"Semconv: attributes of a vLLM family", func() ([]sdkmetric.View, error) {
			return views.Semconv(views.WithAttributes("vllm:generation_tokens", "model_name"))
		}},
		{"Semconv: negative infinity", func() ([]sdkmetric.View, error) {
			return views.Semconv(views.WithBuckets(views.GenAIServerTimeToFirstToken, math.Inf(-1), 1))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, err := c.call()
			if vs != nil || !errors.Is(err, views.ErrOption) {
				t.Errorf("got %d views, error %v; want none and ErrOption", len(vs), err)
			}
		})
	}
}
