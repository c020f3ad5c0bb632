package instrument_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// An engine sets its LoRA state when the adapters of its running or waiting
// requests change, names in any order; it reports its current state.
func ExampleEngine_SetLoRA() {
	printLoRASeries(func(engine *instrument.Engine) {
		engine.SetLoRA(stats.LoRA{MaxLoRA: 2, Waiting: []string{"sql-lora"}})
		engine.SetLoRA(stats.LoRA{MaxLoRA: 2, Running: []string{"sql-lora", "chat-lora"}})
	})
	// Output:
	// max_lora=2,running_lora_adapters=chat-lora\,sql-lora,waiting_lora_adapters=
}

// printLoRASeries runs set on engine 0 of a Recorder with opts and prints
// the labels of its vllm:lora_requests_info series, each valued at the Unix
// time its state was set.
func printLoRASeries(set func(*instrument.Engine), opts ...instrument.Option) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	vllmViews, err := views.VLLM()
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllmViews...))
	defer provider.Shutdown(ctx)
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(provider),
		instrument.WithModelName("llama-3.1-8b")}, opts...)...)
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Close()
	engine, err := rec.Engine(0)
	if err != nil {
		log.Fatal(err)
	}
	set(engine)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var series []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == "vllm:lora_requests_info" {
				for _, dp := range g.DataPoints {
					series = append(series, dp.Attributes.Encoded(attribute.DefaultEncoder()))
				}
			}
		}
	}
	slices.Sort(series)
	for _, s := range series {
		fmt.Println(s)
	}
}
