package prometheus_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// New gives a reader for a MeterProvider built by hand and the handler that
// serves its scrape; recording on the provider through Wrap lets the
// handler show every histogram family at zero from start-up.
func ExampleNew() {
	prom, err := prometheus.New()
	if err != nil {
		log.Fatal(err)
	}
	vllmViews, err := views.VLLM()
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vllmViews...))
	defer mp.Shutdown(context.Background())

	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("llama"))
	if err != nil {
		log.Fatal(err)
	}
	it := stats.Iteration{PromptTokens: stats.PromptTokens{Computed: 30, LocalCacheHit: 70}}
	rec.RecordIteration(context.Background(), 0, &it)

	// In a server: http.Handle("/metrics", prom.Handler).
	w := httptest.NewRecorder()
	prom.Handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(w.Body.String()) {
		if strings.HasPrefix(line, "vllm:prompt_tokens") {
			fmt.Print(line)
		}
	}
	// Output:
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama",source="external_kv_transfer"} 0
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama",source="local_cache_hit"} 70
	// vllm:prompt_tokens_by_source_total{engine="0",model_name="llama",source="local_compute"} 30
	// vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="llama",source="device"} 70
	// vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="llama",source="disk"} 0
	// vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="llama",source="external_unspecified"} 0
	// vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="llama",source="host"} 0
	// vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="llama",source="p2p"} 0
	// vllm:prompt_tokens_cached_total{engine="0",model_name="llama"} 70
	// vllm:prompt_tokens_total{engine="0",model_name="llama"} 100
}

// NewProvider sets up a program that only serves a scrape in one call: the
// MeterProvider with the views (here those of vLLM 0.10, whose retired
// vllm:time_per_output_token_seconds is kept), the Prometheus reader and
// its handler, which shows every histogram family of each engine at zero
// from start-up, the retired ones included.
func ExampleNewProvider() {
	ctx := context.Background()
	p, err := prometheus.NewProvider(ctx, prometheus.WithViewOptions(views.WithVersion("0.10")))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown(ctx)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("llama"))
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Close()

	// In a server: http.Handle("/metrics", p.Handler()).
	w := httptest.NewRecorder()
	p.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(w.Body.String()) {
		for _, family := range []string{"time_to_first_token", "inter_token_latency", "time_per_output_token", "e2e_request_latency"} {
			if strings.HasPrefix(line, "vllm:"+family+"_seconds_count") {
				fmt.Print(line)
			}
		}
	}
	// Output:
	// vllm:e2e_request_latency_seconds_count{engine="0",model_name="llama"} 0
	// vllm:inter_token_latency_seconds_count{engine="0",model_name="llama"} 0
	// vllm:time_per_output_token_seconds_count{engine="0",model_name="llama"} 0
	// vllm:time_to_first_token_seconds_count{engine="0",model_name="llama"} 0
}
