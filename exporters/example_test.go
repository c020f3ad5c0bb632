package exporters_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
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
	printScrape(p, "vllm:generation_tokens_total{")
	// Output:
	// vllm:generation_tokens_total{engine="0",model_name="llama"} 5
}

// printScrape prints the lines of p's /metrics that start with prefix.
func printScrape(p *exporters.Provider, prefix string) {
	w := httptest.NewRecorder()
	p.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range scrapeLines(w.Body.String(), prefix) {
		fmt.Println(line)
	}
}

// WithMeterProviderOptions passes options of the SDK to the MeterProvider
// Setup builds. The one it is there for, the SDK's opt-out of its
// per-measurement de-duplication of map attribute values
// (sdkmetric.WithAllowKeyDuplication), is in no release up to sdk/metric
// 1.47.0; any other option goes the same way, as this exemplar filter
// (Setup's default is none: exemplars off).
func ExampleWithMeterProviderOptions() {
	ctx := context.Background()
	p, err := exporters.Setup(ctx, exporters.WithMeterProviderOptions(sdkmetric.WithExemplarFilter(exemplar.TraceBasedFilter)))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown(ctx)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("llama"))
	if err != nil {
		log.Fatal(err)
	}
	rec.RecordIteration(ctx, 0, &stats.Iteration{GenerationTokens: 5})
	printScrape(p, "vllm:generation_tokens_total{")
	// Output:
	// vllm:generation_tokens_total{engine="0",model_name="llama"} 5
}
