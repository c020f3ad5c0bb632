package views_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// aggregations records the scenario through vs on a ManualReader and returns
// each stream's aggregation: "exponential" or "explicit" for histograms, with
// the scale of the first exponential point.
func aggregations(t *testing.T, vs []sdkmetric.View, err error, opts ...instrument.Option) (map[string]string, map[string]int32) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(mp),
		instrument.WithModelName(modelName)}, append(slices.Clone(scenarioOptions), opts...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	recordScenario(t, rec)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	kinds, scales := map[string]string{}, map[string]int32{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64], metricdata.Histogram[int64]:
				kinds[m.Name] = "explicit"
			case metricdata.ExponentialHistogram[float64]:
				kinds[m.Name] = "exponential"
				scales[m.Name] = d.DataPoints[0].Scale
			case metricdata.ExponentialHistogram[int64]:
				kinds[m.Name] = "exponential"
				scales[m.Name] = d.DataPoints[0].Scale
			}
		}
	}
	return kinds, scales
}

// WithExponential turns the named family only into an exponential histogram;
// WithExponentialLatency every histogram in seconds and no token histogram.
func TestWithExponential(t *testing.T) {
	const ttft = "vllm:time_to_first_token_seconds"
	vs, err := views.VLLM(views.WithExponential(ttft))
	kinds, scales := aggregations(t, vs, err)
	for name, kind := range kinds {
		if want := map[bool]string{true: "exponential", false: "explicit"}[name == ttft]; kind != want {
			t.Errorf("WithExponential(%q): %s is %s, want %s", ttft, name, kind, want)
		}
	}
	if kinds[ttft] != "exponential" {
		t.Fatalf("%s missing or not exponential: %v", ttft, kinds)
	}
	// The scenario's TTFTs span less than a doubling or two: the 160
	// buckets keep a fine scale, clamped by nothing here (Prometheus's
	// exporter clamps to 8).
	if s := scales[ttft]; s < 5 || s > views.DefaultExponentialMaxScale {
		t.Errorf("%s scale %d, want between 5 and %d", ttft, s, views.DefaultExponentialMaxScale)
	}

	vs, err = views.VLLM(views.WithExponentialLatency(), views.WithBuckets("vllm:e2e_request_latency_seconds", 1, 10))
	kinds, _ = aggregations(t, vs, err)
	latency := 0
	for _, f := range views.Families() {
		if f.Type != "histogram" {
			continue
		}
		want := "explicit"
		if f.Instrument.Unit == "s" && f.Name != "vllm:e2e_request_latency_seconds" {
			want = "exponential"
			latency++
		}
		if got, ok := kinds[f.Name]; ok && got != want {
			t.Errorf("WithExponentialLatency: %s (unit %q) is %s, want %s", f.Name, f.Instrument.Unit, got, want)
		}
	}
	if latency < 8 {
		t.Errorf("%d latency families, want at least TTFT, ITL, TPOT, e2e, queue, inference, prefill and decode", latency)
	}
}

func TestWithExponentialResolution(t *testing.T) {
	const e2e = "vllm:e2e_request_latency_seconds"
	vs, err := views.VLLM(views.WithExponential(e2e), views.WithExponentialResolution(4, 2))
	_, scales := aggregations(t, vs, err)
	if s, ok := scales[e2e]; !ok || s > 2 {
		t.Errorf("%s scale %d (present %v), want at most 2", e2e, s, ok)
	}
}

func TestSemconvExponential(t *testing.T) {
	vs, err := views.Semconv(views.WithExponentialLatency())
	kinds, _ := aggregations(t, vs, err, instrument.WithGenAI("chat", "acme"), instrument.WithGenAISemconv())
	for _, name := range []string{views.GenAIServerRequestDuration, views.GenAIServerTimeToFirstToken, views.GenAIServerTimePerOutputToken} {
		if kinds[name] != "exponential" {
			t.Errorf("Semconv(WithExponentialLatency()): %s is %q, want exponential", name, kinds[name])
		}
	}
	vs, err = views.Semconv(views.WithExponential(views.GenAIServerTimeToFirstToken))
	kinds, _ = aggregations(t, vs, err, instrument.WithGenAI("chat", "acme"), instrument.WithGenAISemconv())
	if kinds[views.GenAIServerTimeToFirstToken] != "exponential" || kinds[views.GenAIServerRequestDuration] != "explicit" {
		t.Errorf("Semconv(WithExponential(ttft)): %v", kinds)
	}
}

func TestExponentialOptionErrors(t *testing.T) {
	const e2e = "vllm:e2e_request_latency_seconds"
	for _, c := range []option{
		{"unknown family", views.VLLM, views.WithExponential("vllm:nope")},
		{"Prometheus name without _seconds", views.VLLM, views.WithExponential("vllm:e2e_request_latency")},
		{"counter", views.VLLM, views.WithExponential("vllm:generation_tokens_total")},
		{"gauge", views.VLLM, views.WithExponential("vllm:num_requests_running")},
		{"Semconv: a vLLM family", views.Semconv, views.WithExponential(e2e)},
		{"no buckets", views.VLLM, views.WithExponentialResolution(1, 20)},
		{"scale below Prometheus's", views.VLLM, views.WithExponentialResolution(160, -5)},
		{"scale above the SDK's", views.VLLM, views.WithExponentialResolution(160, 21)},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, err := c.fn(c.opt)
			if vs != nil || !errors.Is(err, views.ErrOption) {
				t.Errorf("got %d views, error %v; want none and ErrOption", len(vs), err)
			}
		})
	}
	t.Run("buckets and exponential", func(t *testing.T) {
		vs, err := views.VLLM(views.WithBuckets(e2e, 1, 2), views.WithExponential(e2e))
		if vs != nil || !errors.Is(err, views.ErrOption) {
			t.Errorf("got %d views, error %v; want none and ErrOption", len(vs), err)
		}
	})
}
