package views_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// Exemplars of vLLM's and the GenAI server TTFT carry the trace and span
// IDs and no dropped attribute.
func TestExemplarsCarryIDsOnly(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllmAndSemconv(t)...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("m"),
		instrument.WithGenAISemconv())
	if err != nil {
		t.Fatal(err)
	}
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sid := trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	rec.RecordIteration(context.Background(), 0, &stats.Iteration{GenerationTokens: 1,
		TTFT: []float64{0.3}, TTFTContexts: []context.Context{ctx}})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "vllm:time_to_first_token_seconds" && m.Name != views.GenAIServerTimeToFirstToken {
				continue
			}
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				for _, ex := range dp.Exemplars {
					seen[m.Name] = true
					if trace.TraceID(ex.TraceID) != tid || trace.SpanID(ex.SpanID) != sid {
						t.Errorf("%s: exemplar trace %x span %x, want %s %s", m.Name, ex.TraceID, ex.SpanID, tid, sid)
					}
					if len(ex.FilteredAttributes) != 0 {
						t.Errorf("%s: exemplar carries the dropped attributes %v", m.Name, ex.FilteredAttributes)
					}
				}
			}
		}
	}
	if len(seen) != 2 {
		t.Errorf("exemplars on %v, want both TTFT streams", seen)
	}
}
