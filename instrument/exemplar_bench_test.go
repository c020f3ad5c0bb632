package instrument_test

import (
	"context"
	"testing"

	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// BenchmarkExemplarReservoirs records the decode step of BenchmarkExemplars
// with a sampled span per request, classic and native (exponential)
// latency histograms, with the views' default reservoir for the latency
// families (views.SlowestExemplars) and with the SDK's
// (views.WithSDKExemplarReservoirs). It reports the latency values offered
// to a reservoir per step (values/op): TTFT, ITL and the six per-request
// latencies of each finished request.
func BenchmarkExemplarReservoirs(b *testing.B) {
	traced := tracedDecodeStep()
	offered := float64(len(traced.TTFT) + len(traced.ITL) + 6*len(traced.Finished))
	for _, c := range []struct {
		name string
		opts []views.Option
	}{
		{"classic/slowest", nil},
		{"classic/sdk", []views.Option{views.WithSDKExemplarReservoirs()}},
		{"native/slowest", []views.Option{views.WithExponentialLatency()}},
		{"native/sdk", []views.Option{views.WithExponentialLatency(), views.WithSDKExemplarReservoirs()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, _ := benchOursViews(b, c.opts)
			step := traced // a step is recorded once: each op records a copy
			e.RecordIteration(context.Background(), &step)
			b.ReportAllocs()
			for b.Loop() {
				step = traced
				e.RecordIteration(context.Background(), &step)
			}
			b.ReportMetric(offered, "values/op")
		})
	}
}

// tracedDecodeStep is benchvariants.DecodeStep with a sampled span on
// every request's TTFT, ITL and finish.
func tracedDecodeStep() stats.Iteration {
	traced := benchvariants.DecodeStep()
	traced.TTFTContexts = make([]context.Context, len(traced.TTFT))
	for i := range traced.TTFTContexts {
		traced.TTFTContexts[i] = sampledContext(byte(i))
	}
	traced.ITLContexts = make([]context.Context, len(traced.ITL))
	for i := range traced.ITLContexts {
		traced.ITLContexts[i] = sampledContext(byte(i))
	}
	for i := range traced.Finished {
		traced.Finished[i].Context = sampledContext(byte(i))
	}
	return traced
}
