package instrument_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// A decode node of a prefill/decode disaggregated deployment: two requests
// arrive with their whole prompt computed by the prefill node and emit their
// first token in the same step.
func ExampleNewRecorder() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp),
		instrument.WithModelName("llama-3.1-8b"), instrument.WithKVConnector())
	if err != nil {
		panic(err)
	}
	engine, err := rec.Engine(0)
	if err != nil {
		panic(err)
	}

	// Prompts of 1000 and 500 tokens, both received through the KV connector.
	var step stats.Iteration
	for _, prompt := range []int64{1000, 500} {
		split, err := stats.SplitPrompt(prompt, 0, prompt)
		if err != nil {
			panic(err)
		}
		if err := step.AddOutput(stats.Output{First: true, PromptTokens: split, GenerationTokens: 1, TTFT: 0.05}); err != nil {
			panic(err)
		}
	}
	engine.RecordIteration(ctx, &step)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Histogram[int64]:
			if m.Name == instrument.NameIterationTokens {
				fmt.Printf("%s: count %d, sum %d\n", m.Name, data.DataPoints[0].Count, data.DataPoints[0].Sum)
			}
		case metricdata.Sum[int64]:
			if m.Name == instrument.NamePromptTokens {
				for _, dp := range data.DataPoints {
					if source, _ := dp.Attributes.Value(instrument.KeySource); source.AsString() == "external_kv_transfer" {
						fmt.Printf("%s{source=%q}: %d\n", m.Name, source.AsString(), dp.Value)
					}
				}
			}
		}
	}
	// Output:
	// vllm.prompt_tokens{source="external_kv_transfer"}: 1500
	// vllm.iteration_tokens: count 1, sum 2
}

// An API server with vLLM's sleep mode: each /sleep and /wake_up it serves
// is timed, by operation only, as vLLM's API server times them.
func ExampleEngine_RecordSleepModeOperation() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("llama-3.1-8b"))
	if err != nil {
		panic(err)
	}
	engine, err := rec.Engine(0)
	if err != nil {
		panic(err)
	}
	engine.RecordSleepModeOperation(ctx, stats.SleepModeSleep, 3.2) // weights offloaded in 3.2 s
	engine.RecordSleepModeOperation(ctx, stats.SleepModeWake, 1.4)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == instrument.NameSleepModeOperationDuration {
			for _, dp := range h.DataPoints {
				op, _ := dp.Attributes.Value(instrument.KeyOperation)
				fmt.Printf("%s{operation=%q}: %d in %g s (%d attribute)\n", m.Name, op.AsString(), dp.Count, dp.Sum, dp.Attributes.Len())
			}
		}
	}
	// Unordered output:
	// vllm.sleep_mode_operation_duration{operation="sleep"}: 1 in 3.2 s (1 attribute)
	// vllm.sleep_mode_operation_duration{operation="wake"}: 1 in 1.4 s (1 attribute)
}
