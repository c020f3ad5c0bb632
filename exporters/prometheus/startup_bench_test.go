package prometheus

import (
	"context"
	"fmt"
	"testing"

	dto "github.com/prometheus/client_model/go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// BenchmarkCompleteStartup times the start-up completion alone, on the
// gather of n fresh engines (every histogram series is added at zero): the
// part of a scrape that was quadratic in the engines. One op completes a
// fresh copy of the gather; linear means 4x the time for 4x the engines.
// One engine is the part of every scrape that does not grow with them.
func BenchmarkCompleteStartup(b *testing.B) {
	for _, n := range []int{1, 64, 256, 1024} {
		b.Run(fmt.Sprintf("engines=%d", n), func(b *testing.B) {
			p, err := New()
			if err != nil {
				b.Fatal(err)
			}
			vs, err := views.VLLM()
			if err != nil {
				b.Fatal(err)
			}
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.Reader), sdkmetric.WithView(vs...), sdkmetric.WithCardinalityLimit(1<<20))
			b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			ranks := make([]int, n)
			for i := range ranks {
				ranks[i] = i
			}
			rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.Wrap(mp)), instrument.WithModelName("m"), instrument.WithEngines(ranks...))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = rec.Close() })
			mfs, err := p.Registry.Gather()
			if err != nil {
				b.Fatal(err)
			}
			engines := p.series.Engines()
			before := countSeries(mfs)
			if after := countSeries(completeStartup(cloneFamilies(mfs), engines, viewFamilies{})); after <= before {
				b.Fatalf("the completion added no series (%d before, %d after)", before, after)
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				in := cloneFamilies(mfs)
				b.StartTimer()
				completeStartup(in, engines, viewFamilies{})
			}
		})
	}
}

func countSeries(mfs []*dto.MetricFamily) (n int) {
	for _, mf := range mfs {
		n += len(mf.Metric)
	}
	return n
}

// cloneFamilies copies the family structs and their series slices, which
// completeStartup appends to.
func cloneFamilies(mfs []*dto.MetricFamily) []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, len(mfs))
	for i, mf := range mfs {
		c := &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit}
		c.Metric = append([]*dto.Metric(nil), mf.Metric...)
		out[i] = c
	}
	return out
}
