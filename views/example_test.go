package views_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// serveVLLM returns a /metrics server exposing a Recorder's instruments under
// vLLM's names, and the Recorder, with the given view and Recorder options.
func serveVLLM(opts []views.Option, recOpts ...instrument.Option) (*httptest.Server, *instrument.Recorder, func()) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	vs, err := views.VLLM(opts...)
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(vs...))
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(mp),
		instrument.WithModelName("llama-3.1-8b")}, recOpts...)...)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return srv, rec, func() { srv.Close(); _ = mp.Shutdown(context.Background()) }
}

// printLines prints the lines of a scrape that start with one of the prefixes.
func printLines(srv *httptest.Server, prefixes ...string) {
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				fmt.Println(line)
			}
		}
	}
}

// A step in which one request of 1000 prompt tokens emits its first token:
// 600 tokens came from the local prefix cache, 300 through the KV connector,
// 100 were computed. The step did 100 + 1 tokens of work.
func ExampleVLLM() {
	srv, rec, stop := serveVLLM(nil)
	defer stop()

	split, err := stats.SplitPrompt(1000, 600, 300)
	if err != nil {
		panic(err)
	}
	step := stats.Iteration{PromptTokens: split, GenerationTokens: 1}
	rec.RecordIteration(context.Background(), 0, &step)

	printLines(srv, "vllm:iteration_tokens_total_sum", "vllm:prompt_tokens_by_source_total")
	// Output:
	// vllm:iteration_tokens_total_sum{engine="0",model_name="llama-3.1-8b"} 101
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama-3.1-8b",source="external_kv_transfer"} 300
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama-3.1-8b",source="local_cache_hit"} 600
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama-3.1-8b",source="local_compute"} 100
}

// End-to-end latency buckets capped at one minute instead of vLLM's 7680 s.
func ExampleWithBuckets() {
	srv, rec, stop := serveVLLM([]views.Option{views.WithBuckets("vllm:e2e_request_latency_seconds", 1, 10, 60)})
	defer stop()

	finished := stats.FinishedRequest{Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 5, E2ELatency: 4.5}
	rec.RecordFinished(context.Background(), 0, &finished)

	printLines(srv, "vllm:e2e_request_latency_seconds_bucket")
	// Output:
	// vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="1"} 0
	// vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="10"} 1
	// vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="60"} 1
	// vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="+Inf"} 1
}

// Generated tokens per model over all engines: the engine label dropped from
// one counter family, named as the scrape shows it. The two engines' series
// sum into one.
// A scrape for consumers written for vLLM 0.10: its GPU-named cache
// families and vllm:time_per_output_token_seconds beside the current ones,
// with the same values.
func ExampleWithVersion() {
	srv, rec, stop := serveVLLM([]views.Option{views.WithVersion("0.10")})
	defer stop()

	rec.RecordScheduler(context.Background(), 0, &stats.Scheduler{Running: 1, KVCacheUsage: 0.25,
		PrefixCache: stats.CacheQueries{Queries: 1000, Hits: 600}})

	printLines(srv, "vllm:gpu_", "vllm:kv_cache_usage_perc{", "vllm:prefix_cache_hits_total{")
	// Output:
	// vllm:gpu_cache_usage_perc{engine="0",model_name="llama-3.1-8b"} 0.25
	// vllm:gpu_prefix_cache_hits_total{engine="0",model_name="llama-3.1-8b"} 600
	// vllm:gpu_prefix_cache_queries_total{engine="0",model_name="llama-3.1-8b"} 1000
	// vllm:kv_cache_usage_perc{engine="0",model_name="llama-3.1-8b"} 0.25
	// vllm:prefix_cache_hits_total{engine="0",model_name="llama-3.1-8b"} 600
}

// A scrape for consumers written for vLLM 0.16 to 0.18, which read
// vllm:prompt_tokens_recomputed_total: one per request that computed only
// the last token of its prompt (the rest was cached).
func ExampleWithVersion_recomputed() {
	srv, rec, stop := serveVLLM([]views.Option{views.WithVersion("0.17")})
	defer stop()

	for _, computed := range []int64{1, 40} {
		rec.RecordFinished(context.Background(), 0, &stats.FinishedRequest{Reason: stats.FinishStop,
			PromptTokens: 64, PrefillComputedTokens: computed, GenerationTokens: 5})
	}

	printLines(srv, "vllm:prompt_tokens_recomputed_total{")
	// Output:
	// vllm:prompt_tokens_recomputed_total{engine="0",model_name="llama-3.1-8b"} 1
}

// The value of vLLM's --custom-histogram-buckets flag, decoded: every
// histogram of the request_latency kind (e2e, queue, inference, prefill and
// decode time) takes its buckets.
func ExampleWithCustomHistogramBuckets() {
	var overrides map[views.BucketKind][]float64
	if err := json.Unmarshal([]byte(`{"request_latency": [1, 10, 60]}`), &overrides); err != nil {
		panic(err)
	}
	srv, rec, stop := serveVLLM([]views.Option{views.WithCustomHistogramBuckets(overrides)})
	defer stop()

	finished := stats.FinishedRequest{Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 5,
		E2ELatency: 4.5, QueueTime: 0.2}
	rec.RecordFinished(context.Background(), 0, &finished)

	printLines(srv, "vllm:request_queue_time_seconds_bucket")
	// Output:
	// vllm:request_queue_time_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="1"} 1
	// vllm:request_queue_time_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="10"} 1
	// vllm:request_queue_time_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="60"} 1
	// vllm:request_queue_time_seconds_bucket{engine="0",model_name="llama-3.1-8b",le="+Inf"} 1
}

// The families of a bucket kind, as vLLM gives them one list.
func ExampleBucketKind_Families() {
	fmt.Println(views.BucketKindInterTokenLatency.Families())
	// Output:
	// [vllm:inter_token_latency_seconds vllm:request_time_per_output_token_seconds]
}

func ExampleWithAttributes() {
	srv, rec, stop := serveVLLM([]views.Option{views.WithAttributes("vllm:generation_tokens_total", "model_name")},
		instrument.WithEngines(0, 1))
	defer stop()

	for rank, tokens := range []int64{7, 5} {
		rec.RecordIteration(context.Background(), rank, &stats.Iteration{GenerationTokens: tokens})
	}

	printLines(srv, "vllm:generation_tokens_total")
	// Output:
	// vllm:generation_tokens_total{model_name="llama-3.1-8b"} 12
}

// The OpenTelemetry GenAI server histograms beside vLLM's families: the
// Recorder records them only with instrument.WithGenAISemconv. A request of
// five tokens whose first came after 0.3 s and the last after 1.5 s.
func ExampleSemconv() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	vllm, err := views.VLLM()
	if err != nil {
		panic(err)
	}
	semconv, err := views.Semconv()
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(append(vllm, semconv...)...))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("llama-3.1-8b"),
		instrument.WithGenAI("chat", "self_hosted"), instrument.WithGenAISemconv())
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	step := stats.Iteration{GenerationTokens: 1, TTFT: []float64{0.3}, Finished: []stats.FinishedRequest{{
		Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 5,
		E2ELatency: 1.5, DecodeTime: 1.2, TimePerOutputToken: 0.3}}}
	rec.RecordIteration(context.Background(), 0, &step)

	printLines(srv, "gen_ai_server_request_duration_seconds_sum", "gen_ai_server_time_to_first_token_seconds_sum",
		"gen_ai_server_time_per_output_token_seconds_sum")
	// Output:
	// gen_ai_server_request_duration_seconds_sum{gen_ai_operation_name="chat",gen_ai_provider_name="self_hosted",gen_ai_request_model="llama-3.1-8b"} 1.5
	// gen_ai_server_time_per_output_token_seconds_sum{gen_ai_operation_name="chat",gen_ai_provider_name="self_hosted",gen_ai_request_model="llama-3.1-8b"} 0.3
	// gen_ai_server_time_to_first_token_seconds_sum{gen_ai_operation_name="chat",gen_ai_provider_name="self_hosted",gen_ai_request_model="llama-3.1-8b"} 0.3
}
