package testutil_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// A test of an engine integration: record on the Reader's provider, then
// read series by family name and labels. In a test, t is the test's
// *testing.T; a missing family or series fails it, naming what is there.
func Example() {
	t := new(testing.T) // in a test: func TestEngine(t *testing.T)

	reader := testutil.New(t)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(reader.Provider()),
		instrument.WithModelName("llama-3.1-8b"))
	if err != nil {
		t.Fatal(err)
	}

	// The engine under test does a step and finishes a request.
	ctx := context.Background()
	rec.RecordIteration(ctx, 0, &stats.Iteration{GenerationTokens: 12})
	done := stats.FinishedRequest{Reason: stats.FinishStop, PromptTokens: 100, GenerationTokens: 12, E2ELatency: 1.2}
	rec.RecordFinished(ctx, 0, &done)

	engine0 := []string{"model_name", "llama-3.1-8b", "engine", "0"}
	fmt.Println(reader.Value("vllm:generation_tokens_total", engine0...))
	fmt.Println(reader.Value("vllm:request_success_total", append(engine0, "finished_reason", "stop")...))
	e2e := reader.Histogram("vllm:e2e_request_latency_seconds", engine0...)
	fmt.Println(e2e.Count, e2e.Sum)
	// Output:
	// 12
	// 1
	// 1 1.2
}
