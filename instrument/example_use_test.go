package instrument_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// The setup of README.md's "Use" section (kept identical by
// TestReadmeUseIsExample): the vLLM views and a vLLM-identical /metrics on
// the service's MeterProvider, a Recorder, and one request recorded.
func Example() {
	ctx := context.Background()
	prom, err := exporters.NewPrometheus() // serves what vLLM serves on /metrics
	if err != nil {
		log.Fatal(err)
	}
	vllmViews, err := views.VLLM()
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vllmViews...))
	defer provider.Shutdown(ctx)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(provider)),
		instrument.WithModelName("my-model"))
	if err != nil {
		log.Fatal(err)
	}
	engine, err := rec.Engine(0) // one per data-parallel engine, kept
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", prom.Handler)

	// Per request, a stats.Timeline; per step, one call per event, then record.
	req, err := stats.NewTimeline(stats.Request{Arrival: time.Now(), PromptTokens: 512})
	if err != nil {
		log.Fatal(err)
	}
	if err := req.Scheduled(time.Now(), 0, 0); err != nil {
		log.Fatal(err)
	}
	var step stats.Iteration
	if err := step.Output(req, time.Now(), 1); err != nil {
		log.Fatal(err)
	}
	if err := engine.RecordScheduler(ctx, &stats.Scheduler{Running: 1}); err != nil {
		log.Fatal(err)
	}
	if err := engine.RecordIteration(ctx, &step); err != nil {
		log.Fatal(err)
	}
	step.Reset()

	scrape := httptest.NewRecorder()
	mux.ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(scrape.Body.String()) {
		if strings.HasPrefix(line, "vllm:prompt_tokens_total{") || strings.HasPrefix(line, "vllm:iteration_tokens_total_sum{") {
			fmt.Print(line)
		}
	}
	// Output:
	// vllm:iteration_tokens_total_sum{engine="0",model_name="my-model"} 513
	// vllm:prompt_tokens_total{engine="0",model_name="my-model"} 512
}

// TestReadmeUseIsExample keeps README.md's "Use" snippet identical to a run
// of lines of Example, so that the README shows code that compiles and runs.
func TestReadmeUseIsExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, use, ok := strings.Cut(string(readme), "\n## Use\n")
	_, snippet, ok2 := strings.Cut(use, "```go\n")
	snippet, _, ok3 := strings.Cut(snippet, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no Go code block under ## Use")
	}
	src, err := os.ReadFile("example_use_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := strings.Cut(string(src), "\nfunc Example() {\n")
	body, _, _ = strings.Cut(body, "\n}\n")
	body = strings.ReplaceAll("\n"+body, "\n\t", "\n")
	if !strings.Contains(body+"\n", "\n"+snippet) {
		t.Errorf("README.md's Use snippet is not a run of lines of Example:\n%s\nExample:\n%s", snippet, body)
	}
}
