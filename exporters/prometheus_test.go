package exporters

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

const openMetricsAccept = "application/openmetrics-text; version=1.0.0"

// promScrape records one iteration (in ctx) on a provider with the
// Prometheus reader and returns the scrape.
func promScrape(t *testing.T, ctx context.Context, accept string, opts ...PrometheusOption) (string, string) {
	t.Helper()
	prom, err := NewPrometheus(opts...)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vs...),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "svc"),
			attribute.String("k8s.pod.name", "pod-1"))))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.RecordIteration(ctx, 0, &stats.Iteration{GenerationTokens: 2, TTFT: []float64{0.2}}); err != nil {
		t.Fatal(err)
	}
	code, body, hdr := scrape(t, prom.Handler, accept)
	if code != 200 {
		t.Fatalf("scrape: HTTP %d\n%s", code, body)
	}
	return body, hdr.Get("Content-Type")
}

func TestPrometheusDefaultIsVLLMIdentical(t *testing.T) {
	body, ctype := promScrape(t, context.Background(), "")
	for _, bad := range []string{"otel_scope_", "target_info", "service_name"} {
		if strings.Contains(body, bad) {
			t.Errorf("default scrape contains %q", bad)
		}
	}
	if !strings.Contains(body, `vllm:generation_tokens_total{engine="0",model_name="m"} 2`) {
		t.Errorf("generation tokens missing:\n%s", body)
	}
	if !strings.HasPrefix(ctype, "text/plain") {
		t.Errorf("Content-Type = %q, want text/plain", ctype)
	}
}

func TestPrometheusOptions(t *testing.T) {
	body, _ := promScrape(t, context.Background(), "", WithScopeInfo())
	if !strings.Contains(body, `otel_scope_name="`+instrument.ScopeName+`"`) {
		t.Errorf("WithScopeInfo: no scope label:\n%s", body)
	}
	if strings.Contains(body, "target_info") {
		t.Error("WithScopeInfo alone added target_info")
	}

	body, _ = promScrape(t, context.Background(), "", WithTargetInfo())
	if !strings.Contains(body, "target_info{") || !strings.Contains(body, `service_name="svc"`) {
		t.Errorf("WithTargetInfo: no target_info with the resource:\n%s", body)
	}
	if strings.Contains(body, "otel_scope_") {
		t.Error("WithTargetInfo alone added scope labels")
	}

	body, _ = promScrape(t, context.Background(), "",
		WithResourceAsLabels(func(kv attribute.KeyValue) bool { return kv.Key == "k8s.pod.name" }))
	if !strings.Contains(body, `vllm:generation_tokens_total{engine="0",k8s_pod_name="pod-1",model_name="m"} 2`) {
		t.Errorf("WithResourceAsLabels: no pod label:\n%s", body)
	}
	if strings.Contains(body, "service_name") {
		t.Error("WithResourceAsLabels copied attributes its filter drops")
	}
}

func TestPrometheusRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "extra_total", Help: "An extra counter."})
	reg.MustRegister(extra)
	prom, err := NewPrometheus(WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	if prom.Registry != reg {
		t.Error("Registry is not the one given")
	}
	_, body, _ := scrape(t, prom.Handler, "")
	if !strings.Contains(body, "extra_total 0") {
		t.Errorf("the handler does not serve the given registry:\n%s", body)
	}
}

func TestPrometheusOpenMetricsExemplars(t *testing.T) {
	traceID, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	spanID, _ := trace.SpanIDFromHex("0102030405060708")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))

	body, ctype := promScrape(t, ctx, openMetricsAccept, WithOpenMetrics())
	if !strings.HasPrefix(ctype, "application/openmetrics-text") {
		t.Errorf("Content-Type = %q, want OpenMetrics", ctype)
	}
	if !strings.Contains(body, traceID.String()) {
		t.Errorf("no exemplar with the trace id in the OpenMetrics scrape:\n%s", body)
	}
	if !strings.Contains(body, "# EOF") {
		t.Error("no # EOF: not OpenMetrics")
	}

	body, ctype = promScrape(t, ctx, openMetricsAccept) // not negotiated by default
	if !strings.HasPrefix(ctype, "text/plain") || strings.Contains(body, traceID.String()) {
		t.Errorf("default handler: Content-Type %q, exemplar shown: %v", ctype, strings.Contains(body, traceID.String()))
	}
}
