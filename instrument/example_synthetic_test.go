package instrument_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// metricsStack is one MeterProvider with the vLLM views, its Prometheus
// handler and a Recorder on it.
type metricsStack struct {
	provider *sdkmetric.MeterProvider
	rec      *instrument.Recorder
	engine   *instrument.Engine
	handler  http.Handler
}

func newMetricsStack() (*metricsStack, error) {
	vs, err := views.VLLM()
	if err != nil {
		return nil, err
	}
	prom, err := prometheus.New(prometheus.WithProviderViews(vs...))
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vs...))
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("llama"))
	if err != nil {
		return nil, err
	}
	engine, err := rec.Engine(0)
	if err != nil {
		return nil, err
	}
	return &metricsStack{provider: mp, rec: rec, engine: engine, handler: prom.Handler}, nil
}

// close closes the Recorder and shuts its provider down.
func (s *metricsStack) close() {
	if err := s.rec.Close(); err != nil {
		log.Print(err)
	}
	if err := s.provider.Shutdown(context.Background()); err != nil {
		log.Print(err)
	}
}

// printScrape scrapes h and prints the lines that start with a prefix.
func printScrape(h http.Handler, prefixes ...string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range scrapeLines(w.Body.String(), prefixes...) {
		fmt.Println(line)
	}
}

// A simulator's fake-metrics mode serves a chosen load picture on the
// Engine that real requests record on: histograms by bucket counts,
// counters by totals, LoRA states at chosen times, gauges with the setters.
func ExampleEngine_Synthetic() {
	s, err := newMetricsStack()
	if err != nil {
		log.Fatal(err)
	}
	defer s.close()

	syn := s.engine.Synthetic()
	for _, err := range []error{
		// 3 requests at or under 5 ms, 5 over 5 ms and at or under 10 ms,
		// 1 over 10 ms and at or under 20 ms.
		syn.ObserveBuckets(instrument.NameTimeToFirstToken, []int64{0, 3, 5, 1}),
		syn.AddCount(instrument.NameRequestSuccess, 20, instrument.Label{Name: instrument.KeyFinishedReason, Value: "stop"}),
		syn.AddCount(instrument.NamePromptTokens, 59, instrument.Label{Name: instrument.KeySource, Value: "local_compute"}),
		syn.AddCount(instrument.NamePromptTokens, 80, instrument.Label{Name: instrument.KeySource, Value: "local_cache_hit"}),
		// A LoRA state at a chosen time.
		syn.SetLoRA(stats.LoRA{MaxLoRA: 1, Running: []string{"sql-lora"}}, time.Unix(1_764_633_600, 0)),
		// Refused, and nothing recorded: the sim's own finish reason is
		// not one of vLLM's.
		syn.AddCount(instrument.NameRequestSuccess, 1, instrument.Label{Name: instrument.KeyFinishedReason, Value: "remote_decode"}),
	} {
		if err != nil {
			fmt.Println("refused:", err)
		}
	}
	s.engine.SetWaiting(4, 0)

	printScrape(s.handler,
		`vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.0`,
		"vllm:time_to_first_token_seconds_count",
		`vllm:request_success_total{engine="0",finished_reason="stop"`,
		"vllm:prompt_tokens_total", "vllm:prompt_tokens_by_source_total",
		"vllm:num_requests_waiting{", "vllm:lora_requests_info")
	// Output:
	// refused: instrument: Synthetic.AddCount vllm.request_success: label finished_reason="remote_decode" is not one of its values: invalid label
	// vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.7646336e+09
	// vllm:num_requests_waiting{engine="0",model_name="llama"} 4
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama",source="external_kv_transfer"} 0
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama",source="local_cache_hit"} 80
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama",source="local_compute"} 59
	// vllm:prompt_tokens_total{engine="0",model_name="llama"} 139
	// vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 20
	// vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.001"} 0
	// vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.005"} 3
	// vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.01"} 8
	// vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.02"} 9
	// vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.04"} 9
	// vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.06"} 9
	// vllm:time_to_first_token_seconds_bucket{engine="0",model_name="llama",le="0.08"} 9
	// vllm:time_to_first_token_seconds_count{engine="0",model_name="llama"} 9
}

// Cumulative data cannot go down. A new picture whose counts all grow is
// served by adding the differences; one that lowers a count is served by a
// new MeterProvider and Recorder whose handler replaces the old one: a
// scrape sees a restart (a counter reset, which rate() and increase()
// handle).
func ExampleSynthetic_reset() {
	var current atomic.Pointer[metricsStack]
	// In a server: http.Handle("/metrics", handler).
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current.Load().handler.ServeHTTP(w, r)
	})
	stop := instrument.Label{Name: instrument.KeyFinishedReason, Value: "stop"}
	serve := func(s *metricsStack, stops int64) {
		if err := s.engine.Synthetic().AddCount(instrument.NameRequestSuccess, stops, stop); err != nil {
			log.Fatal(err)
		}
	}

	first, err := newMetricsStack()
	if err != nil {
		log.Fatal(err)
	}
	serve(first, 20)
	current.Store(first)
	printScrape(handler, `vllm:request_success_total{engine="0",finished_reason="stop"`)

	// 20 -> 25: add the difference.
	serve(first, 25-20)
	printScrape(handler, `vllm:request_success_total{engine="0",finished_reason="stop"`)

	// 25 -> 5: a new stack, served in place of the old one.
	second, err := newMetricsStack()
	if err != nil {
		log.Fatal(err)
	}
	serve(second, 5)
	current.Store(second)
	first.close()
	defer second.close()
	printScrape(handler, `vllm:request_success_total{engine="0",finished_reason="stop"`)
	// Output:
	// vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 20
	// vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 25
	// vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 5
}
