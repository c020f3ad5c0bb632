package prometheus

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters/internal/exportertest"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// The scrape helpers shared with package exporters' tests.
var (
	scrape      = exportertest.Scrape
	parseScrape = exportertest.ParseScrape
)

type (
	sample    = exportertest.Sample
	errorSink = exportertest.Errors // collects the errors given to an error handler
)

// wrappedRecorder returns the Exporter of opts on a provider with
// views.VLLM(), and a Recorder of model "m" on the provider it wraps.
func wrappedRecorder(t *testing.T, opts ...Option) (*Exporter, *sdkmetric.MeterProvider, *instrument.Recorder) {
	t.Helper()
	prom, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return prom, mp, rec
}
