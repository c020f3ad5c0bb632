package prometheus

import (
	"bytes"
	"context"
	"errors"
	"log"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// newProvider is NewProvider, shut down at the end of the test.
func newProvider(t *testing.T, opts ...Option) *Provider {
	t.Helper()
	p, err := NewProvider(t.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return p
}

// One call gives the retired families' zero series of views.WithVersion,
// which the three-place set-up (views on the provider, New, Wrap) loses
// when New is not told the views (WithProviderViews).
func TestNewProviderLegacyZeroSeries(t *testing.T) {
	const legacy = "vllm:time_per_output_token_seconds"
	zero := func(body string, family string) bool {
		return strings.Contains(body, family+`_count{engine="0",model_name="m"} 0`+"\n")
	}
	p := newProvider(t, WithViewOptions(views.WithVersion("0.10")))
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	_, body, _ := scrape(t, p.Handler(), "")
	for _, f := range []string{legacy, "vllm:time_to_first_token_seconds"} {
		if !zero(body, f) {
			t.Errorf("NewProvider: no zero series of %s in the first scrape:\n%s", f, grepLines(body, f))
		}
	}
	promtoolClean(t, body)

	prom, mp := startupProvider(t, nil, views.WithVersion("0.10"))
	old, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if body := scrapeOK(t, prom); zero(body, legacy) || !zero(body, "vllm:time_to_first_token_seconds") {
		t.Errorf("without WithProviderViews, want the zero series of vLLM's families only:\n%s", grepLines(body, "_count"))
	}
}

// NewProvider's options: the registry serves the process families unless
// told not to, the resource honours OTEL_SERVICE_NAME, WithReader's readers
// see the provider's data, the cardinality limit holds, and what cannot be
// built is refused whole.
func TestNewProviderOptions(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "env-svc")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	manual := sdkmetric.NewManualReader()
	reg := prometheus.NewRegistry()
	p := newProvider(t, WithRegistry(reg), WithReader(manual), WithCardinalityLimit(2))
	if p.Registry() != reg {
		t.Error("Registry is not WithRegistry's")
	}
	if v, _ := p.Resource().Set().Value("service.name"); v.AsString() != "env-svc" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", v.AsString())
	}
	if v, ok := p.Resource().Set().Value("service.instance.id"); !ok || v.AsString() == "" {
		t.Error("no service.instance.id generated")
	}
	for _, model := range []string{"a", "b", "c"} {
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName(model))
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		rec.RecordIteration(t.Context(), 0, &stats.Iteration{GenerationTokens: 1})
	}
	var logged bytes.Buffer
	out := log.Writer()
	log.SetOutput(&logged)
	_, body, _ := scrape(t, p.Handler(), "")
	log.SetOutput(out)
	if strings.Contains(logged.String(), "did not wrap") {
		t.Errorf("the SDK's overflow series was taken for an engine of an unwrapped provider: %s", logged.String())
	}
	got := parseScrape(t, body)
	if _, ok := got[benchvariants.Key("vllm:generation_tokens_total", map[string]string{"otel_metric_overflow": "true"})]; !ok {
		t.Errorf("WithCardinalityLimit(2) with three models: no overflow series in\n%s", grepLines(body, "vllm:generation_tokens_total"))
	}
	if !strings.Contains(body, "\nprocess_cpu_seconds_total ") {
		t.Error("no process_cpu_seconds_total in the scrape")
	}
	var rm metricdata.ResourceMetrics
	if err := manual.Collect(t.Context(), &rm); err != nil || len(rm.ScopeMetrics) == 0 {
		t.Errorf("WithReader's reader collected %d scopes, error %v", len(rm.ScopeMetrics), err)
	}

	q := newProvider(t, WithoutProcessMetrics(), WithResource(p.Resource()))
	if _, body, _ := scrape(t, q.Handler(), ""); strings.Contains(body, "process_") {
		t.Error("WithoutProcessMetrics: process families in the scrape")
	}
	if q.Resource() != p.Resource() {
		t.Error("Resource is not WithResource's")
	}

	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		new  func() error
		want error
	}{
		{"views and their options", func() error {
			_, err := NewProvider(t.Context(), WithProviderViews(vs...), WithViewOptions(views.WithVersion("0.10")))
			return err
		}, ErrConfig},
		{"a bad version", func() error {
			_, err := NewProvider(t.Context(), WithViewOptions(views.WithVersion("x")))
			return err
		}, views.ErrOption},
		{"New with options of NewProvider", func() error {
			_, err := New(WithCardinalityLimit(1), WithReader(manual))
			return err
		}, ErrConfig},
	} {
		if err := c.new(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
