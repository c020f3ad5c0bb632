package instrument_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// docs/engines.md's whole program ("Start here"), this file's imports and
// this function's body (TestEnginesGuideIsExample keeps them identical): a
// MeterProvider with the vLLM views and a vLLM-identical /metrics, set up in
// one call (prometheus.NewProvider), a Recorder of two data-parallel engines,
// one request recorded on each, and a scrape.
func Example() {
	ctx := context.Background()
	provider, err := prometheus.NewProvider(ctx) // vLLM's views, and what vLLM serves on /metrics
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Shutdown(ctx)
	rec, err := instrument.NewRecorder(
		instrument.WithMeterProvider(provider.MeterProvider()), // default: the global MeterProvider
		instrument.WithModelName("my-model"),                   // required
		instrument.WithEngines(0, 1),                           // default: engine 0 alone
	)
	if err != nil {
		log.Fatal(err) // a bad option: errors are for construction only
	}
	defer rec.Close() // flushes the provider; runs before provider.Shutdown
	mux := http.NewServeMux()
	mux.Handle("/metrics", provider.Handler()) // serve mux, or add the handler to yours

	for rank := range 2 {
		engine, err := rec.Engine(rank) // one per data-parallel engine, kept
		if err != nil {
			log.Fatal(err)
		}
		// Per request, a stats.Timeline; per step, one call per event, then
		// record. None returns an error: invalid input is refused, counted on
		// infermetrics.invalid_events and reported to otel.Handle.
		req := stats.NewTimeline(stats.Request{Arrival: time.Now(), PromptTokens: 512})
		req.Scheduled(time.Now(), 0, 0)
		var step stats.Iteration
		step.Output(req, time.Now(), 1)
		engine.RecordScheduler(ctx, &stats.Scheduler{Running: 1})
		engine.RecordIteration(ctx, &step)
		step.Reset()
	}

	scrape := httptest.NewRecorder()
	mux.ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(scrape.Body.String()) {
		if strings.HasPrefix(line, "vllm:prompt_tokens_total{") {
			fmt.Print(line)
		}
	}
	// Output:
	// vllm:prompt_tokens_total{engine="0",model_name="my-model"} 512
	// vllm:prompt_tokens_total{engine="1",model_name="my-model"} 512
}
