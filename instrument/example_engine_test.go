package instrument_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// The step loop of an engine with continuous batching, chunked prefill (a
// 256-token budget per step), a preemption, speculative decoding and n = 2
// sampling. Each step: schedule, run the model, one call per request event,
// then record the step and start the next.
func ExampleEngine_RecordIteration() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	vllmViews, err := views.VLLM()
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllmViews...))
	defer provider.Shutdown(ctx)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(provider),
		instrument.WithModelName("llama-3.1-8b"), instrument.WithSpecDecoding(2))
	if err != nil {
		log.Fatal(err)
	}
	engine, err := rec.Engine(0)
	if err != nil {
		log.Fatal(err)
	}

	// A 600-token prompt whose first 200 tokens are in the prefix cache, and
	// a 40-token prompt sampled twice (one Timeline per child).
	start := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	a := stats.NewTimeline(stats.Request{Arrival: start, PromptTokens: 600})
	b := stats.NewTimelines(stats.Request{Arrival: start, PromptTokens: 40, N: 2})

	// No metrics call returns an error: what the Recorder refuses is counted
	// on infermetrics.invalid_events and reported to its error handler.
	var step stats.Iteration
	now := start
	endStep := func(s stats.Scheduler) {
		engine.RecordScheduler(ctx, &s)
		engine.RecordIteration(ctx, &step)
		step.Reset()
		now = now.Add(20 * time.Millisecond)
	}

	// Step 1: a computes 256 of its 400 uncached tokens: no output yet, so
	// the step counts 0 tokens done; all 400 count in a's first-output step.
	a.Scheduled(now, 200, 0)
	endStep(stats.Scheduler{Running: 1, WaitingCapacity: 2, PrefixCache: stats.CacheQueries{Queries: 600, Hits: 200}})

	// Step 2: a computes its last 144 tokens; b's children join the batch.
	// All three emit their first token: the step counts their prompts.
	b[0].Scheduled(now, 0, 0)
	b[1].Scheduled(now, 0, 0)
	step.Output(a, now, 1)
	step.Output(b[0], now, 1)
	step.Output(b[1], now, 1)
	endStep(stats.Scheduler{Running: 3, KVCacheUsage: 0.6, PrefixCache: stats.CacheQueries{Queries: 80}})

	// Step 3: a's two draft tokens are accepted, plus the bonus token; the
	// KV cache is full, so b[1] is preempted.
	step.Output(a, now, 3)
	step.Output(b[0], now, 1)
	step.Preempt(b[1], now)
	endStep(stats.Scheduler{Running: 2, WaitingCapacity: 1, KVCacheUsage: 1,
		SpecDecoding: &stats.SpecDecoding{Drafts: 1, DraftTokens: 2, AcceptedTokens: 2, AcceptedPerPosition: []int64{1, 1}}})

	// Step 4: b[1] is scheduled again (its re-prefill is not counted); a
	// stops, b[0] reaches its length limit.
	b[1].Scheduled(now, 32, 0)
	step.Output(a, now, 1)
	step.Output(b[0], now, 1)
	step.Output(b[1], now, 1)
	step.Finish(a, now, stats.FinishStop)
	step.Finish(b[0], now, stats.FinishLength)
	endStep(stats.Scheduler{Running: 3, KVCacheUsage: 0.5})

	// Step 5: b[1] finishes, the last child of b.
	step.Output(b[1], now, 1)
	step.Finish(b[1], now, stats.FinishLength)
	endStep(stats.Scheduler{})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, s := range []string{"local_compute", "local_cache_hit", "external_kv_transfer"} {
		fmt.Printf("prompt tokens from %s: %d\n", s, counterValue(rm, "vllm:prompt_tokens_by_source", "source", s))
	}
	fmt.Println("generation tokens:", counterValue(rm, "vllm:generation_tokens"))
	count, sum := histogramOf(rm, "vllm:iteration_tokens_total")
	fmt.Printf("iteration tokens: %d steps, %d tokens\n", count, sum)
	fmt.Println("requests stopped:", counterValue(rm, "vllm:request_success", "finished_reason", "stop"))
	fmt.Println("requests at their length limit:", counterValue(rm, "vllm:request_success", "finished_reason", "length"))
	count, sum = histogramOf(rm, "vllm:request_params_n")
	fmt.Printf("request_params_n: %d requests, n summing to %d\n", count, sum)
	fmt.Println("invalid events:", counterValue(rm, instrument.NameInvalidEvents)) // -1: no series, none refused
	// Output:
	// prompt tokens from local_compute: 480
	// prompt tokens from local_cache_hit: 200
	// prompt tokens from external_kv_transfer: 0
	// generation tokens: 11
	// iteration tokens: 5 steps, 491 tokens
	// requests stopped: 1
	// requests at their length limit: 2
	// request_params_n: 2 requests, n summing to 3
	// invalid events: -1
}

// counterValue returns the value of the integer counter series name{key=value}
// (any series of name without a key).
func counterValue(rm metricdata.ResourceMetrics, name string, kv ...string) int64 {
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
			for _, dp := range d.DataPoints {
				if hasAttribute(dp.Attributes, kv) {
					return dp.Value
				}
			}
		}
	}
	return -1
}

// histogramOf returns the count and sum of the integer histogram name.
func histogramOf(rm metricdata.ResourceMetrics, name string) (count uint64, sum int64) {
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if d, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == name {
			return d.DataPoints[0].Count, d.DataPoints[0].Sum
		}
	}
	return 0, -1
}

func hasAttribute(set attribute.Set, kv []string) bool {
	if len(kv) < 2 {
		return true
	}
	v, ok := set.Value(attribute.Key(kv[0]))
	return ok && v.AsString() == kv[1]
}
