package exporters

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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

// serve sends one request to h with the given method and headers.
func serve(h http.Handler, method string, header ...string) *http.Response {
	req := httptest.NewRequest(method, "/metrics", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

// Accept-Encoding with q=0 refuses that coding: the scrape is served
// uncompressed, and no error is reported (one per scrape before).
func TestPrometheusAcceptEncoding(t *testing.T) {
	cleanEnv(t)
	var sink errorSink
	p, err := Setup(t.Context(), WithErrorHandler(sink.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, p)
	rec := newRecorder(t, p)
	recordGeneration(t, rec, 3)
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{
		{"", false},
		{"gzip", true},
		{"gzip;q=0", false},
		{"gzip; q=0.0, identity", false},
		{"identity;q=0.5, gzip;q=0.001", false},
		{"identity;q=0.5, gzip;q=0.6", true},
		{"*", true},
		{"*;q=0", false},
		{"br, *;q=0.1", true},
		{"gzip;q=0, *", false},
		{"deflate", false},
	} {
		resp := serve(p.Handler(), http.MethodGet, "Accept-Encoding", tc.accept)
		var body io.Reader = resp.Body
		if enc := resp.Header.Get("Content-Encoding"); (enc == "gzip") != tc.gzip {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want gzip %v", tc.accept, enc, tc.gzip)
		} else if tc.gzip {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatalf("Accept-Encoding %q: %v", tc.accept, err)
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), generationSeries+" 3") {
			t.Errorf("Accept-Encoding %q: HTTP %d, body:\n%.300s", tc.accept, resp.StatusCode, b)
		}
	}
	if errs := sink.get(); len(errs) != 0 {
		t.Errorf("errors reported while scraping: %v", errs)
	}
}

// Only GET and HEAD are served: other methods get 405 with an Allow header.
func TestPrometheusMethods(t *testing.T) {
	prom, err := NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	for _, m := range []string{http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodPatch, http.MethodOptions} {
		resp := serve(prom.Handler, m)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: HTTP %d, Allow %q; want 405 and GET, HEAD", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		if resp := serve(prom.Handler, m); resp.StatusCode != 200 {
			t.Errorf("%s: HTTP %d", m, resp.StatusCode)
		}
	}
}
