package views_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// The advised bucket boundaries of the GenAI server metrics, transcribed from
// the compatibility reference.
var semconvBuckets = map[string][]float64{
	"gen_ai.server.request.duration": {0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
		20.48, 40.96, 81.92},
	"gen_ai.server.time_to_first_token": {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0},
	"gen_ai.server.time_per_output_token": {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5},
}

// semconvPoint is one collected data point of a GenAI histogram.
type semconvPoint struct {
	attrs  attribute.Set
	count  uint64
	sum    float64
	bounds []float64
}

// collectSemconv records the scenario on a MeterProvider with only the
// Semconv views, on a Recorder with WithGenAISemconv, and returns the GenAI
// histograms' points by stream name.
func collectSemconv(t *testing.T, opts ...views.Option) map[string][]semconvPoint {
	t.Helper()
	return collectSemconvWith(t, []instrument.Option{instrument.WithGenAI("chat", "acme"), instrument.WithGenAISemconv()}, opts...)
}

// collectSemconvWith is collectSemconv with the given Recorder options.
func collectSemconvWith(t *testing.T, recOpts []instrument.Option, opts ...views.Option) map[string][]semconvPoint {
	t.Helper()
	vs, err := views.Semconv(opts...)
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(slices.Concat([]instrument.Option{instrument.WithMeterProvider(mp),
		instrument.WithModelName(modelName)}, recOpts, scenarioOptions)...)
	if err != nil {
		t.Fatal(err)
	}
	recordScenario(t, rec)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string][]semconvPoint{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if _, ok := semconvBuckets[m.Name]; !ok {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Errorf("%s is a %T, want a float64 histogram", m.Name, m.Data)
				continue
			}
			for _, dp := range h.DataPoints {
				got[m.Name] = append(got[m.Name], semconvPoint{dp.Attributes, dp.Count, dp.Sum, dp.Bounds})
			}
		}
	}
	return got
}

func TestSemconv(t *testing.T) {
	got := collectSemconv(t)
	genAI := []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "acme"), attribute.String("gen_ai.request.model", modelName)}
	failed := attribute.NewSet(append(genAI, attribute.String("error.type", "_OTHER"))...)
	ok := attribute.NewSet(genAI...)
	// Both engines merge: the GenAI streams carry neither model_name nor engine.
	// Durations: c 0.3 + b1 0.4 + a 1.5 + b2 1.5 (engine 0) + e 2.3 (engine 1) = 6.0;
	// d failed after 0.33. TTFT: a, b1, b2, d at 0.3 and e at 0.2 = 1.4. TPOT of
	// the requests that did not fail and made more than one token (c made one):
	// b1 0.1/2, a 1.2/4, b2 1.2/2, e 2.1/2 = 2.0.
	want := []struct {
		name  string
		attrs attribute.Set
		count uint64
		sum   float64
	}{
		{"gen_ai.server.request.duration", ok, 5, 6.0},
		{"gen_ai.server.request.duration", failed, 1, 0.33},
		{"gen_ai.server.time_to_first_token", ok, 5, 1.4},
		{"gen_ai.server.time_per_output_token", ok, 4, 2.0},
	}
	for _, w := range want {
		label := w.name + "{" + w.attrs.Encoded(attribute.DefaultEncoder()) + "}"
		i := slices.IndexFunc(got[w.name], func(p semconvPoint) bool { return p.attrs.Equals(&w.attrs) })
		if i < 0 {
			t.Errorf("%s is missing", label)
			continue
		}
		if p := got[w.name][i]; p.count != w.count || !approx(p.sum, w.sum) {
			t.Errorf("%s = count %d sum %v, want count %d sum %v", label, p.count, p.sum, w.count, w.sum)
		}
	}
	for name, points := range got {
		for _, p := range points {
			if !slices.Equal(p.bounds, semconvBuckets[name]) {
				t.Errorf("%s has boundaries %v, want %v", name, p.bounds, semconvBuckets[name])
			}
			keys := map[attribute.Key]bool{}
			for _, kv := range p.attrs.ToSlice() {
				keys[kv.Key] = true
			}
			if keys["model_name"] || keys["engine"] || !keys["gen_ai.operation.name"] || !keys["gen_ai.provider.name"] ||
				!keys["gen_ai.request.model"] || (keys["error.type"] && !p.attrs.Equals(&failed)) {
				t.Errorf("%s has a series with attributes %s", name, p.attrs.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
	// Time to first token happens before any failure and the time per output
	// token counts successful requests only: neither has error.type.
	for _, name := range []string{"gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token"} {
		if n := len(got[name]); n != 1 {
			t.Errorf("%s has %d series, want 1", name, n)
		}
	}
}

// Without instrument.WithGenAISemconv the Recorder records no GenAI server
// metric: the Semconv views then export none.
func TestSemconvNeedsTheOption(t *testing.T) {
	if got := collectSemconvWith(t, nil); len(got) != 0 {
		t.Errorf("GenAI server histograms without WithGenAISemconv: %v", got)
	}
}

// approx reports whether two float sums are equal up to rounding.
func approx(a, b float64) bool { return a-b <= 1e-9 && b-a <= 1e-9 }
