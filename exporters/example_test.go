package exporters_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// scrapeLines returns the lines of a /metrics scrape that start with prefix.
func scrapeLines(body, prefix string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Setup builds the MeterProvider from the environment: with
// OTEL_METRICS_EXPORTER and the OTLP endpoint variables unset, it serves a
// vLLM-compatible /metrics and pushes nothing.
func ExampleSetup() {
	ctx := context.Background()
	p, err := exporters.Setup(ctx, exporters.WithServiceName("llm-server"))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown(ctx) // flushes the OTLP reader, when there is one

	rec, err := instrument.NewRecorder(
		instrument.WithMeterProvider(p.MeterProvider()),
		instrument.WithModelName("llama"),
	)
	if err != nil {
		log.Fatal(err)
	}
	rec.RecordIteration(ctx, 0, &stats.Iteration{GenerationTokens: 5})

	// In a server: http.Handle("/metrics", p.Handler()).
	w := httptest.NewRecorder()
	p.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range scrapeLines(w.Body.String(), "vllm:generation_tokens_total{") {
		fmt.Println(line)
	}
	// Output:
	// vllm:generation_tokens_total{engine="0",model_name="llama"} 5
}

// NewPrometheus gives a reader for a MeterProvider built by hand and the
// handler that serves its scrape.
func ExampleNewPrometheus() {
	prom, err := exporters.NewPrometheus()
	if err != nil {
		log.Fatal(err)
	}
	vllmViews, err := views.VLLM()
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vllmViews...))
	defer mp.Shutdown(context.Background())

	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("llama"))
	if err != nil {
		log.Fatal(err)
	}
	it := stats.Iteration{PromptTokens: stats.PromptTokens{Computed: 30, LocalCacheHit: 70}}
	rec.RecordIteration(context.Background(), 0, &it)

	w := httptest.NewRecorder()
	prom.Handler.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range scrapeLines(w.Body.String(), "vllm:prompt_tokens") {
		fmt.Println(line)
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
