package exporters

import (
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"

	"github.com/infermetrics/infermetrics/instrument"
)

// failingCollector makes every gather of its registry fail.
type failingCollector struct{ desc *prometheus.Desc }

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New("collector broke"))
}

// A scrape error of one Setup's handler reaches that Setup's error handler
// only, once.
func TestScrapeErrorsGoToTheirSetup(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvMetricsExporter, ExporterPrometheus)
	broken := prometheus.NewRegistry()
	broken.MustRegister(failingCollector{prometheus.NewDesc("broken", "fails", nil, nil)})

	var a, b errorSink
	pa, err := Setup(t.Context(), WithErrorHandler(a.Handle), WithPrometheus(WithRegistry(broken)), WithoutProcessMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, pa)
	pb, err := Setup(t.Context(), WithErrorHandler(b.Handle))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, pb)

	if code, _, _ := scrape(t, pa.Handler(), ""); code != http.StatusInternalServerError {
		t.Fatalf("scrape of the broken registry: HTTP %d, want 500", code)
	}
	if code, _, _ := scrape(t, pb.Handler(), ""); code != http.StatusOK {
		t.Fatalf("scrape of the healthy registry: HTTP %d, want 200", code)
	}
	if len(a.Get()) != 1 || len(b.Get()) != 0 {
		t.Errorf("handler of the broken Setup got %v, the other %v: want one error, to the broken Setup's handler only", a.Get(), b.Get())
	}
}

// With resource labels on, Setup's provider declares them, and a Recorder
// attribute exported as one of them is refused instead of failing scrapes.
func TestSetupReservesResourceLabels(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvMetricsExporter, ExporterPrometheus)
	p, err := Setup(t.Context(), WithServiceName("svc"),
		WithPrometheus(WithResourceAsLabels(attribute.NewAllowKeysFilter("service.name"))))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, p)
	_, err = instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"),
		instrument.WithAttributes(attribute.String("service_name", "other")))
	if !errors.Is(err, instrument.ErrConfig) {
		t.Fatalf("NewRecorder with attribute service_name under resource label service.name: %v, want ErrConfig", err)
	}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"),
		instrument.WithAttributes(attribute.String("role", "decode")))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if code, _, _ := scrape(t, p.Handler(), ""); code != http.StatusOK {
		t.Errorf("scrape: HTTP %d, want 200", code)
	}
}
