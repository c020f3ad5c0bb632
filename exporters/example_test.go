package exporters_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

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
	w := httptest.NewRecorder()
	p.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range scrapeLines(w.Body.String(), "vllm:generation_tokens_total{") {
		fmt.Println(line)
	}
	// Output:
	// vllm:generation_tokens_total{engine="0",model_name="llama"} 5
}
