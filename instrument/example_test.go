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

// A Go front end with vLLM's admission control: when its queue of waiting
// and running requests is full it answers 503 instead of queueing, and
// counts the refusal by the limit reached, once per attempt, in one series
// per reason without an engine label.
func ExampleEngine_RecordAdmissionRejection() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("llama-3.1-8b"),
		instrument.WithEngines(0, 1))
	if err != nil {
		panic(err)
	}
	engine, err := rec.Engine(1)
	if err != nil {
		panic(err)
	}
	const maxQueued = 64
	for queued := 63; queued <= 65; queued++ { // three arrivals as the queue fills
		if queued >= maxQueued {
			engine.RecordAdmissionRejection(ctx, stats.AdmissionQueuedRequests) // and answer 503
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == instrument.NameAdmissionRejections {
			for _, dp := range s.DataPoints {
				reason, _ := dp.Attributes.Value(instrument.KeyWaitingReason)
				_, hasEngine := dp.Attributes.Value(instrument.KeyEngine)
				fmt.Printf("%s{reason=%q}: %d (engine label: %v)\n", m.Name, reason.AsString(), dp.Value, hasEngine)
			}
		}
	}
	// Unordered output:
	// vllm.admission_rejections{reason="max_num_queued_reqs"}: 2 (engine label: false)
	// vllm.admission_rejections{reason="max_num_queued_tokens"}: 0 (engine label: false)
}
