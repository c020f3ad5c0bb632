package instrument_test

import (
	"fmt"
	"log"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
)

// exportedTogether is a provider whose series an exporter reads with other
// providers' (package exporters' Prometheus.Wrap returns one).
type exportedTogether struct {
	metric.MeterProvider
	set *instrument.SeriesSet
}

func (p exportedTogether) SeriesSet() *instrument.SeriesSet { return p.set }

// An exporter reads Released before gathering and again after Engines:
// equal counts mean no Recorder was closed in between, so every engine
// whose series it gathered is among Engines.
func ExampleSeriesSet_Released() {
	set := instrument.NewSeriesSet()
	provider := sdkmetric.NewMeterProvider()
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(exportedTogether{provider, set}),
		instrument.WithModelName("llama-3.1-8b"), instrument.WithEngines(0, 1))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(set.Engines()), "engines,", set.Released(), "released")
	_ = rec.Close() // between a gathering and Engines, its series are gathered but not listed
	fmt.Println(len(set.Engines()), "engines,", set.Released(), "released")
	// Output:
	// 2 engines, 0 released
	// 0 engines, 2 released
}
