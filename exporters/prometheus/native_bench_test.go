package prometheus

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

var latencyAggregations = []struct {
	name string
	opts []views.Option
}{
	{"classic", nil},
	{"exponential", []views.Option{views.WithExponentialLatency()}},
}

// BenchmarkRecordLatency records a decode step's 64 inter-token latencies
// (spread over 10 ms to 1 s) into the classic or the exponential histogram;
// ns/op is per step, ns/latency per observation.
func BenchmarkRecordLatency(b *testing.B) {
	for _, a := range latencyAggregations {
		b.Run(a.name, func(b *testing.B) {
			_, rec := nativeProvider(b, true, a.opts...)
			e, _ := rec.Engine(0)
			it := &stats.Iteration{ITL: make([]float64, 64)}
			for i := range it.ITL {
				it.ITL[i] = 0.01 + 0.99*float64(i)/63
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				e.RecordIteration(ctx, it)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(it.ITL)), "ns/latency")
		})
	}
}

// BenchmarkScrapeNative scrapes (protobuf, as Prometheus with native
// histograms asks) two engines whose latency families are classic or
// native, after 1000 requests of TTFT, e2e and the other latencies.
func BenchmarkScrapeNative(b *testing.B) {
	for _, a := range latencyAggregations {
		b.Run(a.name, func(b *testing.B) {
			prom, rec := nativeProvider(b, true, a.opts...)
			ctx := context.Background()
			for rank := range 2 {
				e, _ := rec.Engine(rank)
				for i := range 1000 {
					v := 0.01 * float64(1+i%997)
					it := &stats.Iteration{TTFT: []float64{v}, ITL: []float64{v / 10},
						Finished: []stats.FinishedRequest{{Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 5,
							E2ELatency: 2 * v, QueueTime: v / 4, PrefillTime: v / 2, InferenceTime: v, DecodeTime: v / 2, TimePerOutputToken: v / 8}}}
					e.RecordIteration(ctx, it)
				}
			}
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept", protobufAccept)
			var size int
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				prom.Handler.ServeHTTP(w, req)
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}
