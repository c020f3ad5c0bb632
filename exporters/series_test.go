package exporters

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// Two providers read into one registry, each with a Recorder of the same
// model and engine: without the check the registry cannot gather and every
// scrape fails; with Wrap the second Recorder fails at construction.
func TestDuplicateSeriesSharedRegistry(t *testing.T) {
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	providers := func(reg *prometheus.Registry) (*Prometheus, *sdkmetric.MeterProvider, *Prometheus, *sdkmetric.MeterProvider) {
		prom1, err := NewPrometheus(WithRegistry(reg))
		if err != nil {
			t.Fatal(err)
		}
		prom2, err := NewPrometheus(WithRegistry(reg))
		if err != nil {
			t.Fatal(err)
		}
		mp1 := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom1.Reader), sdkmetric.WithView(vs...))
		mp2 := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom2.Reader), sdkmetric.WithView(vs...))
		t.Cleanup(func() { _ = mp1.Shutdown(context.Background()); _ = mp2.Shutdown(context.Background()) })
		return prom1, mp1, prom2, mp2
	}

	t.Run("unchecked: HTTP 500", func(t *testing.T) {
		prom1, mp1, _, mp2 := providers(prometheus.NewRegistry())
		for _, mp := range []*sdkmetric.MeterProvider{mp1, mp2} {
			if _, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("m")); err != nil {
				t.Fatal(err)
			}
		}
		if code, body, _ := scrape(t, prom1.Handler, ""); code != 500 || !strings.Contains(body, "collected before") {
			t.Errorf("scrape: HTTP %d, want 500 for the duplicate series:\n%.300s", code, body)
		}
	})

	t.Run("wrapped: error at construction", func(t *testing.T) {
		prom1, mp1, prom2, mp2 := providers(prometheus.NewRegistry())
		p1, p2 := prom1.Wrap(mp1), prom2.Wrap(mp2)
		first, err := instrument.NewRecorder(instrument.WithMeterProvider(p1), instrument.WithModelName("m"), instrument.WithEngines(0, 1))
		if err != nil {
			t.Fatal(err)
		}
		_, err = instrument.NewRecorder(instrument.WithMeterProvider(p2), instrument.WithModelName("m"), instrument.WithEngines(1))
		if !errors.Is(err, instrument.ErrDuplicateSeries) {
			t.Fatalf("the same series from another provider of the registry: %v, want ErrDuplicateSeries", err)
		}
		t.Logf("error: %v", err)
		// Another engine of the model has the model's admission rejections,
		// which have no engine label: refused too.
		_, err = instrument.NewRecorder(instrument.WithMeterProvider(p2), instrument.WithModelName("m"), instrument.WithEngines(2))
		if !errors.Is(err, instrument.ErrDuplicateSeries) || !strings.Contains(err.Error(), instrument.NameAdmissionRejections) {
			t.Fatalf("another engine of the model from another provider of the registry: %v, want ErrDuplicateSeries "+
				"for the front end's series", err)
		}
		// Other series are fine, and the registry still gathers.
		second, err := instrument.NewRecorder(instrument.WithMeterProvider(p2), instrument.WithModelName("m"), instrument.WithEngines(2),
			instrument.WithAttributes(attribute.String("role", "decode")))
		if err != nil {
			t.Fatal(err)
		}
		recordGeneration(t, first, 1)
		if code, body, _ := scrape(t, prom1.Handler, ""); code != 200 ||
			!strings.Contains(body, `vllm:generation_tokens_total{engine="2",model_name="m",role="decode"} 0`) ||
			!strings.Contains(body, `vllm:generation_tokens_total{engine="0",model_name="m"} 1`) {
			t.Errorf("scrape: HTTP %d, want both providers' series:\n%s", code, body)
		}
		// Another registry is another namespace.
		prom3, mp3, _, _ := providers(prometheus.NewRegistry())
		if _, err := instrument.NewRecorder(instrument.WithMeterProvider(prom3.Wrap(mp3)), instrument.WithModelName("m")); err != nil {
			t.Errorf("another registry: %v", err)
		}
		runtime.KeepAlive(second)
	})

	t.Run("Setup with a shared registry", func(t *testing.T) {
		cleanEnv(t)
		reg := prometheus.NewRegistry()
		prefill, err := Setup(t.Context(), WithPrometheus(WithRegistry(reg)))
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, prefill)
		decode, err := Setup(t.Context(), WithPrometheus(WithRegistry(reg)))
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, decode)
		rec := newRecorder(t, prefill)
		if _, err := instrument.NewRecorder(instrument.WithMeterProvider(decode.MeterProvider()), instrument.WithModelName("m")); !errors.Is(err, instrument.ErrDuplicateSeries) {
			t.Errorf("the same model on the second Setup: %v, want ErrDuplicateSeries", err)
		}
		if code, _, _ := scrape(t, decode.Handler(), ""); code != 200 {
			t.Errorf("scrape: HTTP %d", code)
		}
		runtime.KeepAlive(rec)
	})
}
