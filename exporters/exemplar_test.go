package exporters

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/trace"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// exemplarsReceived records one TTFT within a sampled span through a Setup
// provider that pushes to an in-process receiver, and counts the exemplars
// the receiver got.
func exemplarsReceived(t *testing.T, opts ...Option) int {
	t.Helper()
	r := startReceiver(t)
	p, err := Setup(t.Context(), append(opts, WithOTLP(WithProtocol(ProtocolGRPC), WithEndpoint(r.addr), WithInsecure()))...)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	traceID, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	spanID, _ := trace.SpanIDFromHex("0102030405060708")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))
	rec.RecordIteration(ctx, 0, &stats.Iteration{GenerationTokens: 1, TTFT: []float64{0.2}})
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, req := range r.requests() {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					for _, dp := range m.GetHistogram().GetDataPoints() {
						n += len(dp.GetExemplars())
						for _, ex := range dp.GetExemplars() {
							if len(ex.GetFilteredAttributes()) > 0 {
								t.Errorf("%s: exemplar with the dropped attributes %v", m.GetName(), ex.GetFilteredAttributes())
							}
						}
					}
					for _, dp := range m.GetSum().GetDataPoints() {
						n += len(dp.GetExemplars())
					}
				}
			}
		}
	}
	return n
}

// Setup turns exemplars off unless OTEL_METRICS_EXEMPLAR_FILTER asks for them.
func TestSetupExemplars(t *testing.T) {
	t.Setenv(EnvMetricsExporter, "")
	t.Setenv(EnvExemplarFilter, "")
	if n := exemplarsReceived(t); n != 0 {
		t.Errorf("default: %d exemplars exported, want none", n)
	}
	if n := exemplarsReceived(t, WithExemplars()); n == 0 {
		t.Error("WithExemplars: no exemplar exported")
	}
	t.Setenv(EnvExemplarFilter, "always_on")
	if n := exemplarsReceived(t); n == 0 {
		t.Error("OTEL_METRICS_EXEMPLAR_FILTER=always_on: no exemplar exported")
	}
}

// WithMeterProviderOptions reaches the SDK after Setup's own options: an
// exemplar filter given there overrides Setup's default (off), on the
// Prometheus path and without it.
func TestSetupMeterProviderOptions(t *testing.T) {
	t.Setenv(EnvExemplarFilter, "")
	for _, exporters := range []string{"", ExporterOTLP} {
		t.Setenv(EnvMetricsExporter, exporters)
		if n := exemplarsReceived(t, WithMeterProviderOptions(sdkmetric.WithExemplarFilter(exemplar.AlwaysOnFilter))); n == 0 {
			t.Errorf("OTEL_METRICS_EXPORTER=%q, an always-on exemplar filter given: no exemplar exported", exporters)
		}
	}
}

// When its Prometheus handler serves OpenMetrics, a text format that shows
// exemplars, Setup keeps the SDK's trace-based default.
func TestSetupOpenMetricsKeepsExemplars(t *testing.T) {
	t.Setenv(EnvMetricsExporter, "")
	t.Setenv(EnvExemplarFilter, "")
	if n := exemplarsReceived(t, WithPrometheus(WithOpenMetrics())); n == 0 {
		t.Error("WithPrometheus(WithOpenMetrics()): no exemplar exported")
	}
}
