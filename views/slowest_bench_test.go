package views_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/views"
)

// BenchmarkReservoirOffer records one latency value (ns/op is per value)
// with a sampled span on a float64 histogram of the SDK, classic (vLLM's
// TTFT buckets) or exponential, with SlowestExemplars or the SDK's default
// reservoir; "no_exemplars" is the same record with exemplars off, the
// floor. The values cycle through 1,000 TTFTs from 20 ms to 3 s.
func BenchmarkReservoirOffer(b *testing.B) {
	var ttft []float64
	for _, f := range views.Families() {
		if f.Name == ttftFamily {
			ttft = f.Buckets
		}
	}
	if ttft == nil {
		b.Fatalf("no %s family", ttftFamily)
	}
	values := typicalTTFTs(1000, 3)
	ctx, _ := requestContext(1)
	for _, agg := range []struct {
		name string
		agg  sdkmetric.Aggregation
	}{
		{"classic", sdkmetric.AggregationExplicitBucketHistogram{Boundaries: ttft}},
		{"native", sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: views.DefaultExponentialMaxSize,
			MaxScale: views.DefaultExponentialMaxScale}},
	} {
		for _, res := range []struct {
			name     string
			selector sdkmetric.ExemplarReservoirProviderSelector
			off      bool
		}{
			{"slowest", views.SlowestExemplars, false},
			{"sdk", sdkmetric.DefaultExemplarReservoirProviderSelector, false},
			{"no_exemplars", nil, true},
		} {
			b.Run(agg.name+"/"+res.name, func(b *testing.B) {
				opts := []sdkmetric.Option{sdkmetric.WithReader(sdkmetric.NewManualReader()),
					sdkmetric.WithView(sdkmetric.NewView(sdkmetric.Instrument{Name: "latency"},
						sdkmetric.Stream{Aggregation: agg.agg, ExemplarReservoirProviderSelector: res.selector}))}
				if res.off {
					opts = append(opts, sdkmetric.WithExemplarFilter(func(context.Context) bool { return false }))
				}
				mp := sdkmetric.NewMeterProvider(opts...)
				b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
				h, err := mp.Meter("bench").Float64Histogram("latency", metric.WithUnit("s"))
				if err != nil {
					b.Fatal(err)
				}
				rec := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("model_name", modelName)))}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					h.Record(ctx, values[i], rec...)
					i++
					if i == len(values) {
						i = 0
					}
				}
			})
		}
	}
}
