package prometheus

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

const openMetricsAccept = "application/openmetrics-text; version=1.0.0"

// promScrape records one iteration (in ctx) on a provider with the
// Prometheus reader and returns the scrape.
func promScrape(t *testing.T, ctx context.Context, accept string, opts ...Option) (string, string) {
	t.Helper()
	prom, err := New(opts...)
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
	rec.RecordIteration(ctx, 0, &stats.Iteration{GenerationTokens: 2, TTFT: []float64{0.2}})
	code, body, hdr := scrape(t, prom.Handler, accept)
	if code != 200 {
		t.Fatalf("scrape: HTTP %d\n%s", code, body)
	}
	return body, hdr.Get("Content-Type")
}

func TestPrometheusDefaultIsVLLMIdentical(t *testing.T) {
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
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
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
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
	prom, err := New(WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	if prom.Registry != reg {
		t.Error("Registry is not the one given")
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader)) // a reader serves once registered
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	_, body, _ := scrape(t, prom.Handler, "")
	if !strings.Contains(body, "extra_total 0") {
		t.Errorf("the handler does not serve the given registry:\n%s", body)
	}
}

func TestPrometheusOpenMetricsExemplars(t *testing.T) {
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
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
	// The TTFT exemplar carries the trace and span IDs only, within
	// OpenMetrics' 128-rune label limit, so client_golang keeps it.
	// The exporter writes the two labels in either order.
	want := []string{fmt.Sprintf(`# {trace_id="%s",span_id="%s"} 0.2 `, traceID, spanID),
		fmt.Sprintf(`# {span_id="%s",trace_id="%s"} 0.2 `, spanID, traceID)}
	found := false
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "vllm:time_to_first_token_seconds_bucket{") &&
			(strings.Contains(line, want[0]) || strings.Contains(line, want[1])) {
			found = true
		}
	}
	if !found {
		t.Errorf("no TTFT bucket with the exemplar %s in the OpenMetrics scrape:\n%s", want, body)
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
	var sink errorSink
	prom, _, rec := wrappedRecorder(t, WithErrorHandler(sink.Handle))
	rec.RecordIteration(t.Context(), 0, &stats.Iteration{GenerationTokens: 3})
	const generationSeries = `vllm:generation_tokens_total{engine="0",model_name="m"}`
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
		resp := serve(prom.Handler, http.MethodGet, "Accept-Encoding", tc.accept)
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
	if errs := sink.Get(); len(errs) != 0 {
		t.Errorf("errors reported while scraping: %v", errs)
	}
}

// Only GET and HEAD are served: other methods get 405 with an Allow header.
func TestPrometheusMethods(t *testing.T) {
	prom, err := New()
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

// ReservedLabels lists the labels the reader adds to every series: a
// Recorder attribute exported under any of them makes every scrape fail,
// which instrument.NewRecorder refuses with it; other names scrape fine.
func TestPrometheusReservedLabels(t *testing.T) {
	res := resource.NewSchemaless(attribute.String("service.name", "svc"), attribute.String("k8s.pod.name", "pod-1"),
		attribute.String("host.name", "h"))
	keep := func(kv attribute.KeyValue) bool { return kv.Key != "host.name" }
	for _, tc := range []struct {
		name string
		opts []Option
		want []string
	}{
		{"default", nil, nil},
		{"scope info", []Option{WithScopeInfo()}, scopeLabels},
		{"resource as labels, resource unknown", []Option{WithResourceAsLabels(keep)}, nil},
		{"resource as labels", []Option{WithResourceAsLabels(keep), WithResource(res)},
			[]string{"k8s_pod_name", "service_name"}},
		{"both", []Option{WithScopeInfo(), WithResourceAsLabels(keep), WithResource(res)},
			append(slices.Clone(scopeLabels), "k8s_pod_name", "service_name")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var scrapeErrs errorSink
			prom, err := New(append(tc.opts, WithErrorHandler(scrapeErrs.Handle))...)
			if err != nil {
				t.Fatal(err)
			}
			vs, err := views.VLLM()
			if err != nil {
				t.Fatal(err)
			}
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vs...), sdkmetric.WithResource(res))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			wrapped := prom.Wrap(mp)
			rp, ok := wrapped.(interface{ ReservedLabels() []string })
			if !ok {
				t.Fatal("Wrap's provider has no ReservedLabels")
			}
			got, want := rp.ReservedLabels(), slices.Clone(tc.want)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("ReservedLabels() = %q, want %q", got, want)
			}
			if len(got) > 0 {
				got[0] = "changed"
				if rp.ReservedLabels()[0] == "changed" {
					t.Error("ReservedLabels returns the provider's own slice")
				}
			}
			// Each reserved name, as a Recorder attribute, fails the scrape.
			for i, label := range append(rp.ReservedLabels(), "role") {
				rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName(fmt.Sprint("m", i)),
					instrument.WithAttributes(attribute.String(label, "x")))
				if err != nil {
					continue // refused at construction: what ReservedLabels is for
				}
				n := len(scrapeErrs.Get())
				code, body, _ := scrape(t, prom.Handler, "")
				reserved := label != "role"
				if reserved != (code == 500) {
					t.Errorf("attribute %q: HTTP %d (reserved %v)\n%.300s", label, code, reserved, body)
				}
				if errs := scrapeErrs.Get()[n:]; reserved != (len(errs) == 1 && strings.Contains(errs[0].Error(), "duplicate label names")) {
					t.Errorf("attribute %q: scrape errors %v (reserved %v), want one naming the duplicate label", label, errs, reserved)
				}
				_ = rec.Close()
			}
		})
	}
}

// A registry serves one target_info: a second reader with it is refused
// (with equal resources every scrape failed); readers without it share the
// registry.
func TestPrometheusOneTargetInfoPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(WithRegistry(reg), WithTargetInfo()); err != nil {
		t.Fatal(err)
	}
	if _, err := New(WithRegistry(reg), WithTargetInfo()); !errors.Is(err, ErrConfig) {
		t.Errorf("second reader with target_info: %v, want ErrConfig", err)
	} else {
		t.Logf("error: %v", err)
	}
	if _, err := New(WithRegistry(reg)); err != nil {
		t.Errorf("second reader without target_info: %v", err)
	}
	if _, err := New(WithRegistry(prometheus.NewRegistry()), WithTargetInfo()); err != nil {
		t.Errorf("another registry: %v", err)
	}
}

// The text format writes bucket bounds as vLLM (Python's prometheus_client)
// does, unless WithGoBucketText; OpenMetrics writes 1.0 anyway; protobuf
// carries floats. Over gzip too.
func TestPrometheusBucketText(t *testing.T) {
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
	const ttft = `vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le=`
	body, _ := promScrape(t, context.Background(), "")
	for _, le := range []string{`"0.001"`, `"1.0"`, `"10.0"`, `"2560.0"`, `"+Inf"`} {
		if !strings.Contains(body, ttft+le+"}") {
			t.Errorf("default text: no le=%s", le)
		}
	}
	if strings.Contains(body, ttft+`"1"}`) || strings.Contains(body, `le="1"`) {
		t.Error(`default text has le="1"`)
	}
	parseScrape(t, body)

	body, _ = promScrape(t, context.Background(), "", WithGoBucketText())
	if !strings.Contains(body, ttft+`"1"}`) || strings.Contains(body, `.0"}`) {
		t.Errorf("WithGoBucketText: want client_golang's le=\"1\":\n%.2000s", body)
	}

	body, ctype := promScrape(t, context.Background(), openMetricsAccept, WithOpenMetrics())
	if !strings.HasPrefix(ctype, "application/openmetrics-text") || !strings.Contains(body, ttft+`"1.0"}`) {
		t.Errorf("OpenMetrics (%s): no le=\"1.0\"", ctype)
	}
	body, _ = promScrape(t, context.Background(), openMetricsAccept, WithOpenMetrics(), WithGoBucketText())
	if !strings.Contains(body, ttft+`"1.0"}`) {
		t.Error(`OpenMetrics with WithGoBucketText: no le="1.0"`)
	}
}

// Gzipped text has the same le rewriting.
func TestPrometheusBucketTextGzip(t *testing.T) {
	prom, mp := startupProvider(t, nil)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	resp := serve(prom.Handler, http.MethodGet, "Accept-Encoding", "gzip")
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(zr)
	if !strings.Contains(string(b), `vllm:e2e_request_latency_seconds_bucket{engine="0",model_name="m",le="1.0"} 0`) {
		t.Errorf("gzipped scrape:\n%.1000s", b)
	}
}

// The handler rewrites only the families it exports: a user's client_golang
// histogram on the same registry keeps the text client_golang writes (le
// bounds "1", not Python's "1.0"), and its native histogram series with
// exemplars stay in one protobuf family message, while the vLLM families
// get Python's bounds.
func TestPrometheusUserFamiliesUntouched(t *testing.T) {
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
	userRegistry := func() *prometheus.Registry {
		reg := prometheus.NewRegistry()
		user := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "user_latency_seconds", Help: "A user histogram.",
			Buckets: []float64{1, 2.5, 10}, NativeHistogramBucketFactor: 1.1}, []string{"k"})
		reg.MustRegister(user)
		for _, k := range []string{"a", "b"} {
			user.WithLabelValues(k).(prometheus.ExemplarObserver).ObserveWithExemplar(0.5, prometheus.Labels{"trace_id": "01"})
		}
		return reg
	}
	body, _ := promScrape(t, context.Background(), "", WithRegistry(userRegistry()))
	if !strings.Contains(body, `user_latency_seconds_bucket{k="a",le="1"} 1`) {
		t.Errorf("the user's histogram text was rewritten:\n%s", grepLines(body, "user_latency"))
	}
	if !strings.Contains(body, `vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="1.0"}`) {
		t.Errorf("the vLLM histogram lacks Python's bounds:\n%s", grepLines(body, "time_to_first_token_seconds_bucket"))
	}

	proto := "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
	body, _ = promScrape(t, context.Background(), proto, WithRegistry(userRegistry()))
	var messages, series int
	dec := expfmt.NewDecoder(strings.NewReader(body), expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			break
		}
		if mf.GetName() == "user_latency_seconds" {
			messages++
			series += len(mf.Metric)
		}
	}
	if messages != 1 || series != 2 {
		t.Errorf("the user's histogram came in %d protobuf messages, %d series; want 1, 2", messages, series)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// Every histogram family the views export, as the Prometheus exporter names
// it in a gather, is one the handler takes for its own: the vLLM, HTTP,
// P/D router and GenAI server and client families.
func TestExportedHistogramsNameTheScrape(t *testing.T) {
	prom, err := New()
	if err != nil {
		t.Fatal(err)
	}
	vv, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	sv, err := views.Semconv()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(append(vv, sv...)...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
		instrument.WithGenAISemconv())
	if err != nil {
		t.Fatal(err)
	}
	e, _ := rec.Engine(0)
	ctx := t.Context()
	req := stats.ObservedRequest{Operation: stats.OperationChat, Reason: stats.FinishStop, E2ELatency: 1,
		FirstToken: true, TimeToFirstToken: 0.1, TimeToLastToken: 0.5, UsageKnown: true, PromptTokens: 3, GenerationTokens: 4}
	e.RecordRequest(ctx, &req)
	e.RecordChunkGap(ctx, 0.1)
	e.RecordHTTPRequest(ctx, "/v1/chat/completions", "POST", 200, 1)
	e.RecordPDLegs(ctx, &stats.PDLegs{PrefillLatency: 0.2, Handoff: true, HandoffGap: 0.01, DecodeFirstToken: true, DecodeTimeToFirstToken: 0.05})
	b, err := e.Backend("b", instrument.RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	b.RecordRequest(ctx, &req)
	b.RecordChunkGap(ctx, stats.OperationChat, 0.1)
	mfs, err := prom.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var histograms int
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		histograms++
		if !exported(mf) {
			t.Errorf("%s is not taken for an exported family", mf.GetName())
		}
	}
	if histograms < 20 {
		t.Errorf("only %d histogram families gathered", histograms)
	}
}
