package instrument_test

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

// sampledContext returns a context carrying a sampled span context with
// fixed IDs built from b: no tracing SDK is needed for exemplars.
func sampledContext(b byte) context.Context {
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range tid {
		tid[i] = b
	}
	for i := range sid {
		sid[i] = b + 1
	}
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
}

// exemplarTraces returns the trace and span IDs (hex) of every exemplar of
// a collected float64 histogram stream.
func exemplarTraces(t *testing.T, h *harness, name string) [][2]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			hist, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s: %T, want a float64 histogram", name, m.Data)
			}
			for _, dp := range hist.DataPoints {
				for _, ex := range dp.Exemplars {
					out = append(out, [2]string{hex.EncodeToString(ex.TraceID), hex.EncodeToString(ex.SpanID)})
				}
			}
		}
	}
	return out
}

// The exemplars of a request's latencies name the request's span, not the
// span of the step that recorded them.
func TestExemplarsNameTheRequest(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	step, req := sampledContext(0x10), sampledContext(0x20)
	wantReq := [2]string{"20202020202020202020202020202020", "2121212121212121"}
	wantStep := [2]string{"10101010101010101010101010101010", "1111111111111111"}

	t0 := time.Unix(1000, 0)
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10, Context: req})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Scheduled(t0.Add(time.Second), 0, 0) }); err != nil {
		t.Fatal(err)
	}
	var it stats.Iteration
	// An untraced request in the same step keeps the step's context.
	other := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 5})
	if err := other.Err(); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(other.Refused, func() { other.Scheduled(t0, 0, 0) }); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(it.Refused, func() { it.Output(other, t0.Add(100*time.Millisecond), 1) }); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(it.Refused, func() { it.Output(tl, t0.Add(30*time.Second), 1) }); err != nil { // a slow first token: its own bucket
		t.Fatal(err)
	}
	if err := eventtest.Err(it.Refused, func() { it.Finish(tl, t0.Add(40*time.Second), stats.FinishStop) }); err != nil {
		t.Fatal(err)
	}
	e.RecordIteration(step, &it)

	ttft := exemplarTraces(t, h, "vllm:time_to_first_token_seconds")
	if len(ttft) != 2 || !containsPair(ttft, wantReq) || !containsPair(ttft, wantStep) {
		t.Errorf("TTFT exemplars %v, want the request's %v and the step's %v", ttft, wantReq, wantStep)
	}
	for _, name := range []string{"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
		"vllm:request_prefill_time_seconds", "vllm:request_inference_time_seconds"} {
		if got := exemplarTraces(t, h, name); len(got) != 1 || got[0] != wantReq {
			t.Errorf("%s exemplars %v, want the request's %v only", name, got, wantReq)
		}
	}
}

func containsPair(ps [][2]string, p [2]string) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// An ITL value recorded through AddOutput carries its request's context; a
// step mixing traced and untraced requests keeps the lists parallel.
func TestIterationContextsParallel(t *testing.T) {
	var it stats.Iteration
	req := sampledContext(1)
	for i, ctx := range []context.Context{nil, req, nil} {
		if err := it.AddOutput(stats.Output{GenerationTokens: 1, ITL: 0.01 * float64(i+1), Context: ctx}); err != nil {
			t.Fatal(err)
		}
	}
	if len(it.ITLContexts) != 3 || it.ITLContexts[0] != nil || it.ITLContexts[1] != req || it.ITLContexts[2] != nil {
		t.Errorf("ITLContexts %v, want [nil req nil]", it.ITLContexts)
	}
	if len(it.TTFTContexts) != 0 {
		t.Errorf("TTFTContexts %v, want none", it.TTFTContexts)
	}
}
