package exporters_test

// Benchmarks of the export side: the vLLM-compatible /metrics scrape of 4
// engines with every family through our Prometheus reader and handler,
// against native prometheus/client_golang serving the same series
// (TestScrapeVariantsAgree checks they are the same), and one collect +
// export to an in-process OTLP/gRPC receiver.

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// scrapeRanks are the engines of the scrape benchmarks.
var scrapeRanks = []int{0, 1, 2, 3}

// engineRecorder is what the scrape fixtures need of a variant's engine.
type engineRecorder interface {
	iteration(*stats.Iteration) error
	scheduler(*stats.Scheduler) error
}

type oursRecorder struct{ e *instrument.Engine }

func (r oursRecorder) iteration(it *stats.Iteration) error {
	r.e.RecordIteration(context.Background(), it)
	return nil
}

func (r oursRecorder) scheduler(s *stats.Scheduler) error {
	r.e.RecordScheduler(context.Background(), s)
	return nil
}

type promRecorder struct{ e *benchvariants.PromEngine }

func (r promRecorder) iteration(it *stats.Iteration) error { r.e.RecordIteration(it); return nil }
func (r promRecorder) scheduler(s *stats.Scheduler) error  { r.e.RecordScheduler(s); return nil }

// populate records benchvariants.ScrapeSteps on every engine.
func populate(tb testing.TB, engine func(rank int) engineRecorder) {
	tb.Helper()
	populateRanks(tb, scrapeRanks, engine)
}

// oursScrapeHandler returns the /metrics handler of a populated Recorder on
// a provider with views.VLLM() and our Prometheus reader (vLLM-identical
// defaults: no scope labels, no target_info), wrapped as Setup wraps it (so
// the handler checks for start-up series to complete).
func oursScrapeHandler(tb testing.TB) (http.Handler, *sdkmetric.MeterProvider) {
	tb.Helper()
	p, rec, mp := freshScrape(tb)
	populate(tb, func(rank int) engineRecorder {
		e, err := rec.Engine(rank)
		if err != nil {
			tb.Fatal(err)
		}
		return oursRecorder{e}
	})
	return p.Handler, mp
}

// freshScrape returns our Prometheus reader and a fresh Recorder of
// scrapeRanks on a wrapped provider with views.VLLM().
func freshScrape(tb testing.TB) (*exporters.Prometheus, *instrument.Recorder, *sdkmetric.MeterProvider) {
	tb.Helper()
	p, err := exporters.NewPrometheus()
	if err != nil {
		tb.Fatal(err)
	}
	mp := benchMeterProvider(tb, sdkmetric.WithReader(p.Reader))
	rec, err := instrument.NewRecorder(benchvariants.RecorderOptions(p.Wrap(mp), scrapeRanks...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return p, rec, mp
}

// nativeScrapeHandler returns the promhttp handler of a populated native
// client_golang registry with the same families and series.
func nativeScrapeHandler(tb testing.TB) http.Handler {
	tb.Helper()
	c, err := benchvariants.NewClientGolang(scrapeRanks...)
	if err != nil {
		tb.Fatal(err)
	}
	populate(tb, func(rank int) engineRecorder { return promRecorder{c.Engine(rank)} })
	return promhttp.HandlerFor(c.Registry, promhttp.HandlerOpts{})
}

func benchMeterProvider(tb testing.TB, opts ...sdkmetric.Option) *sdkmetric.MeterProvider {
	tb.Helper()
	vs, err := views.VLLM()
	if err != nil {
		tb.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithView(vs...))...)
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

// discard is a ResponseWriter that counts the body and keeps nothing.
type discard struct {
	header http.Header
	code   int
	n      int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) WriteHeader(code int)        { d.code = code }
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

func benchScrape(b *testing.B, h http.Handler) {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil) // no Accept-Encoding: no gzip
	w := &discard{header: http.Header{}}
	h.ServeHTTP(w, req)
	if w.code != 0 && w.code != http.StatusOK {
		b.Fatalf("scrape: HTTP %d", w.code)
	}
	size := w.n
	b.ReportAllocs()
	for b.Loop() {
		w.n, w.code = 0, 0
		clear(w.header)
		h.ServeHTTP(w, req)
	}
	if w.n < size/2 {
		b.Fatalf("scrape shrank from %d to %d bytes", size, w.n)
	}
	b.ReportMetric(float64(size), "B/scrape")
}

// BenchmarkScrape serves the vLLM-compatible /metrics of 4 engines with
// every family (optional ones included; every histogram has observations):
// through our Prometheus reader and handler, and through native
// client_golang with the same series.
func BenchmarkScrape(b *testing.B) {
	b.Run("infermetrics", func(b *testing.B) {
		h, _ := oursScrapeHandler(b)
		benchScrape(b, h)
	})
	b.Run("client_golang", func(b *testing.B) {
		benchScrape(b, nativeScrapeHandler(b))
	})
	// 4 fresh engines, nothing observed: the handler adds every histogram
	// family at zero (vLLM's start-up series).
	b.Run("infermetrics-startup", func(b *testing.B) {
		p, _, _ := freshScrape(b)
		benchScrape(b, p.Handler)
	})
}

// scrapeBody GETs /metrics from h.
func scrapeBody(t *testing.T, h http.Handler) string {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(w.Result().Body)
	if w.Code != http.StatusOK {
		t.Fatalf("scrape: HTTP %d\n%s", w.Code, body)
	}
	return string(body)
}

// withoutLines returns text without the lines that contain s.
func withoutLines(text, s string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !strings.Contains(line, s) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestScrapeVariantsAgree checks that BenchmarkScrape compares the same
// thing: both scrapes hold the same series with the same values, and every
// family views.VLLM exports is there on every engine.
func TestScrapeVariantsAgree(t *testing.T) {
	h, _ := oursScrapeHandler(t)
	oursText, nativeText := scrapeBody(t, h), scrapeBody(t, nativeScrapeHandler(t))
	// The Recorder's own counter: the fixture's corrupted requests come
	// without WithCorruptionDetection, which it reports once per engine.
	oursText = withoutLines(oursText, "infermetrics_invalid_events")
	ours, err := benchvariants.FromText(oursText)
	if err != nil {
		t.Fatal(err)
	}
	native, err := benchvariants.FromText(nativeText)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range benchvariants.Diff(ours, native, "infermetrics", "client_golang") {
		t.Error(d)
	}
	// Byte for byte, HELP and TYPE lines included, but for the LoRA info
	// gauge's value (the time of each variant's update) and whole-number
	// bucket bounds, which ours writes as vLLM does (le="1.0").
	nativeText = wholeLe.ReplaceAllString(nativeText, `$1.0"`)
	if a, b := loraTime.ReplaceAllString(oursText, "$1 <time>"), loraTime.ReplaceAllString(nativeText, "$1 <time>"); a != b {
		t.Errorf("the scrapes differ beyond values:\n--- infermetrics\n%s\n--- client_golang\n%s", a, b)
	}
	have := ours.Families()
	for _, f := range views.Families() {
		switch f.Instrument.Feature {
		case instrument.PriorityScheduling, instrument.KVOffload, instrument.KVOffloadCPU, instrument.PDRouting, instrument.InvalidInput,
			instrument.KVOffloadStoreThreshold, instrument.SimpleCPUOffload, instrument.ServerOperations, instrument.HTTPClient:
			continue // not in the benchmark's fixture
		}
		if !have[f.Name] {
			t.Errorf("family %s missing from the scrape", f.Name)
		}
	}
	// Every engine has every histogram populated.
	for k, s := range ours {
		if s.Type == "histogram" && s.Count == 0 {
			t.Errorf("histogram %s has no observation", k)
		}
	}
	var series int
	for k := range ours {
		if strings.Contains(k, `engine="3"`) {
			series++
		}
	}
	if series < 50 {
		t.Errorf("engine 3 has only %d series", series)
	}
}

// wholeLe matches a whole-number bucket bound as client_golang writes it.
var wholeLe = regexp.MustCompile(`([{,]le="[0-9]+)"`)

// loraTime matches the value of vllm:lora_requests_info.
var loraTime = regexp.MustCompile(`(?m)^(vllm:lora_requests_info\{[^}]*\}) \S+$`)

// sinkReceiver is a minimal in-process OTLP/gRPC metrics receiver that
// counts data points and keeps nothing (the receiver of helpers_test.go keeps
// every request, which would grow with b.N).
type sinkReceiver struct {
	collpb.UnimplementedMetricsServiceServer
	addr   string
	points atomic.Int64
}

func (r *sinkReceiver) Export(_ context.Context, req *collpb.ExportMetricsServiceRequest) (*collpb.ExportMetricsServiceResponse, error) {
	var n int64
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				switch d := m.GetData().(type) {
				case *metricpb.Metric_Sum:
					n += int64(len(d.Sum.GetDataPoints()))
				case *metricpb.Metric_Gauge:
					n += int64(len(d.Gauge.GetDataPoints()))
				case *metricpb.Metric_Histogram:
					n += int64(len(d.Histogram.GetDataPoints()))
				}
			}
		}
	}
	r.points.Add(n)
	return &collpb.ExportMetricsServiceResponse{}, nil
}

func startSinkReceiver(tb testing.TB) *sinkReceiver {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &sinkReceiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collpb.RegisterMetricsServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	return r
}

// BenchmarkOTLPExport collects the 4 engines of BenchmarkScrape and exports
// them over OTLP/gRPC (cumulative, no compression) to an in-process
// receiver: one op is MeterProvider.ForceFlush, which collects and waits for
// the export.
func BenchmarkOTLPExport(b *testing.B) {
	b.Setenv(exporters.EnvTemporalityPreference, "")
	b.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "")
	b.Setenv("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "")
	recv := startSinkReceiver(b)
	ctx := context.Background()
	reader, err := exporters.NewOTLP(ctx, exporters.WithProtocol(exporters.ProtocolGRPC), exporters.WithEndpoint(recv.addr), exporters.WithInsecure(),
		exporters.WithInterval(time.Hour), exporters.WithTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	mp := benchMeterProvider(b, sdkmetric.WithReader(reader))
	rec, err := instrument.NewRecorder(benchvariants.RecorderOptions(mp, scrapeRanks...)...)
	if err != nil {
		b.Fatal(err)
	}
	populate(b, func(rank int) engineRecorder {
		e, err := rec.Engine(rank)
		if err != nil {
			b.Fatal(err)
		}
		return oursRecorder{e}
	})
	if err := mp.ForceFlush(ctx); err != nil { // connects
		b.Fatal(err)
	}
	perExport := recv.points.Load()
	if perExport < 200 {
		b.Fatalf("the receiver got only %d data points", perExport)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := mp.ForceFlush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(perExport), "points/export")
}
