package instrument_test

// Helpers shared by the tests of package instrument: a Recorder on a real SDK
// MeterProvider with the vLLM views and a ManualReader, a canonical snapshot
// of what it collects, and a small driver of request timelines.
//
// The long tests that set no global (OpenTelemetry's, the standard
// logger's, the environment) and count no allocations call t.Parallel: Go
// runs them together once the package's other tests are done, on every core.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// model is the served model name of every test Recorder.
const model = "llama-3.1-8b"

// harness is a Recorder whose instruments are shaped by views.VLLM and read by
// a ManualReader: collected stream names are vLLM's family names without the
// Prometheus _total suffix.
type harness struct {
	t      testing.TB
	mp     *sdkmetric.MeterProvider
	rec    *instrument.Recorder
	reader *sdkmetric.ManualReader
	prom   *prometheus.Exporter // nil unless newScrapedHarness
	// errs collects what the Recorder refuses: a test that provokes
	// refusals takes them (refused); any left at the end fail the test.
	errs *testutil.Errors
}

// refused returns the errors the Recorder reported since the last call,
// joined; nil when it refused nothing. Feature data without its option
// (instrument.ErrFeatureNotConfigured), which the tests give freely, is
// left out: it is recorded, and refusal_test.go checks its report.
func (h *harness) refused() error { return errors.Join(refusals(h.errs)...) }

// collectErrors returns a collector of a Recorder's refusals whose errors
// left at the end of the test fail it (feature data reports aside).
func collectErrors(t testing.TB) *testutil.Errors {
	errs := &testutil.Errors{}
	t.Cleanup(func() {
		for _, err := range refusals(errs) {
			t.Errorf("the Recorder refused input the test did not check: %v", err)
		}
	})
	return errs
}

// refusals takes the errors of errs but the feature data reports.
func refusals(errs *testutil.Errors) []error {
	var out []error
	for _, err := range errs.Take() {
		if !errors.Is(err, instrument.ErrFeatureNotConfigured) {
			out = append(out, err)
		}
	}
	return out
}

func newHarness(t testing.TB, opts ...instrument.Option) *harness {
	t.Helper()
	return buildHarness(t, nil, opts...)
}

// newScrapedHarness is a harness whose provider is also read by the
// vLLM-identical Prometheus reader of package exporters/prometheus: see scrape.
func newScrapedHarness(t testing.TB, opts ...instrument.Option) *harness {
	t.Helper()
	prom, err := prometheus.New()
	if err != nil {
		t.Fatalf("prometheus.New: %v", err)
	}
	return buildHarness(t, prom, opts...)
}

// newSemconvHarness is a harness whose provider has views.Semconv's views
// beside views.VLLM's, and whose Recorder records the GenAI server metrics
// (WithGenAISemconv).
func newSemconvHarness(t testing.TB, opts ...instrument.Option) *harness {
	t.Helper()
	sc, err := views.Semconv()
	if err != nil {
		t.Fatalf("views.Semconv: %v", err)
	}
	return buildHarnessViews(t, nil, sc, append([]instrument.Option{instrument.WithGenAISemconv()}, opts...)...)
}

func buildHarness(t testing.TB, prom *prometheus.Exporter, opts ...instrument.Option) *harness {
	t.Helper()
	return buildHarnessViews(t, prom, nil, opts...)
}

// buildHarnessViews builds a harness with views.VLLM's views and extra ones.
func buildHarnessViews(t testing.TB, prom *prometheus.Exporter, extra []sdkmetric.View, opts ...instrument.Option) *harness {
	t.Helper()
	vs, err := views.VLLM()
	if err != nil {
		t.Fatalf("views.VLLM: %v", err)
	}
	vs = append(vs, extra...)
	reader := sdkmetric.NewManualReader()
	mpOpts := []sdkmetric.Option{sdkmetric.WithReader(reader), sdkmetric.WithView(vs...)}
	if prom != nil {
		mpOpts = append(mpOpts, sdkmetric.WithReader(prom.Reader))
	}
	mp := sdkmetric.NewMeterProvider(mpOpts...)
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	errs := collectErrors(t)
	var provider metric.MeterProvider = mp
	if prom != nil {
		provider = prom.Wrap(mp) // so that the handler completes the zero series
	}
	base := []instrument.Option{instrument.WithMeterProvider(provider), instrument.WithModelName(model), errs.Option()}
	rec, err := instrument.NewRecorder(append(base, opts...)...)
	if err != nil {
		t.Fatalf("NewRecorder: %v", err)
	}
	return &harness{t: t, mp: mp, rec: rec, reader: reader, prom: prom, errs: errs}
}

// scrape returns the Prometheus text exposition of a newScrapedHarness,
// failing the test unless the handler answers 200.
func (h *harness) scrape() string {
	h.t.Helper()
	body, err := h.tryScrape()
	if err != nil {
		h.t.Fatal(err)
	}
	return body
}

// tryScrape is scrape for goroutines other than the test's.
func (h *harness) tryScrape() (string, error) {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	w := httptest.NewRecorder()
	h.prom.Handler.ServeHTTP(w, req)
	body, err := io.ReadAll(w.Result().Body)
	if err == nil && w.Code != http.StatusOK {
		err = fmt.Errorf("scrape: HTTP %d:\n%s", w.Code, body)
	}
	return string(body), err
}

// engine returns the Engine of a rank.
func (h *harness) engine(rank int) *instrument.Engine {
	h.t.Helper()
	e, err := h.rec.Engine(rank)
	if err != nil {
		h.t.Fatalf("Engine(%d): %v", rank, err)
	}
	return e
}

// point is one collected series without its timestamps.
type point struct {
	kind    string // counter, updowncounter, gauge or histogram
	value   float64
	count   uint64
	sum     float64
	bounds  []float64
	buckets []uint64
}

func (p point) String() string {
	if p.kind != "histogram" {
		return fmt.Sprintf("%s %v", p.kind, p.value)
	}
	return fmt.Sprintf("histogram count=%d sum=%v bounds=%v buckets=%v", p.count, p.sum, p.bounds, p.buckets)
}

// snapshot maps a series key (see series) to its point.
type snapshot map[string]point

// String renders the snapshot canonically: one sorted line per series.
func (s snapshot) String() string {
	lines := make([]string, 0, len(s))
	for k, p := range s {
		lines = append(lines, k+" "+p.String())
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// series is the key of a stream and its attributes, given as key/value pairs.
func series(name string, labels ...string) string {
	kv := make([]attribute.KeyValue, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		kv = append(kv, attribute.String(labels[i], labels[i+1]))
	}
	set := attribute.NewSet(kv...)
	return name + "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
}

// engineLabels are the common labels of an engine's series plus extra pairs.
func engineLabels(rank string, extra ...string) []string {
	return append([]string{instrument.KeyModelName, model, instrument.KeyEngine, rank}, extra...)
}

// get returns one series of the snapshot, failing the test if it is missing.
func (s snapshot) get(t testing.TB, name string, labels ...string) point {
	t.Helper()
	k := series(name, labels...)
	p, ok := s[k]
	if !ok {
		t.Fatalf("series %s missing from:\n%s", k, s)
	}
	return p
}

// collect reads every stream of the harness.
func (h *harness) collect() snapshot {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatalf("Collect: %v", err)
	}
	s := snapshot{}
	put := func(name string, attrs attribute.Set, p point) {
		k := name + "{" + attrs.Encoded(attribute.DefaultEncoder()) + "}"
		if _, dup := s[k]; dup {
			h.t.Errorf("series %s collected twice", k)
		}
		s[k] = p
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				sumPoints(m.Name, d, put)
			case metricdata.Sum[float64]:
				sumPoints(m.Name, d, put)
			case metricdata.Gauge[int64]:
				gaugePoints(m.Name, d, put)
			case metricdata.Gauge[float64]:
				gaugePoints(m.Name, d, put)
			case metricdata.Histogram[int64]:
				histogramPoints(m.Name, d, put)
			case metricdata.Histogram[float64]:
				histogramPoints(m.Name, d, put)
			default:
				h.t.Fatalf("stream %s has unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return s
}

type putFunc func(name string, attrs attribute.Set, p point)

func sumPoints[N int64 | float64](name string, d metricdata.Sum[N], put putFunc) {
	kind := "updowncounter"
	if d.IsMonotonic {
		kind = "counter"
	}
	for _, dp := range d.DataPoints {
		put(name, dp.Attributes, point{kind: kind, value: float64(dp.Value)})
	}
}

func gaugePoints[N int64 | float64](name string, d metricdata.Gauge[N], put putFunc) {
	for _, dp := range d.DataPoints {
		put(name, dp.Attributes, point{kind: "gauge", value: float64(dp.Value)})
	}
}

func histogramPoints[N int64 | float64](name string, d metricdata.Histogram[N], put putFunc) {
	for _, dp := range d.DataPoints {
		put(name, dp.Attributes, point{kind: "histogram", count: dp.Count, sum: float64(dp.Sum),
			bounds: dp.Bounds, buckets: dp.BucketCounts})
	}
}

// approx reports whether two float sums are equal up to rounding.
func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// t0 is the arrival time of every test request; ms(n) is n milliseconds later.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// request starts a request arriving at t0, queued at once and scheduled at
// scheduledMs with the given cached tokens.
func request(t testing.TB, prompt, maxTokens int64, scheduledMs int, localCached, externalCached int64) *stats.Timeline {
	t.Helper()
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: prompt, MaxTokens: maxTokens})
	if err := tl.Err(); err != nil {
		t.Fatalf("NewTimeline: %v", err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Queued(t0) }); err != nil {
		t.Fatalf("Queued: %v", err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(scheduledMs), localCached, externalCached) }); err != nil {
		t.Fatalf("Scheduled: %v", err)
	}
	return tl
}

// step builds the Iteration of one engine step at a given time.
type step struct {
	t  testing.TB
	at time.Time
	it stats.Iteration
}

func stepAt(t testing.TB, atMs int) *step { return &step{t: t, at: ms(atMs)} }

// out adds an output of tokens new tokens of a request.
func (s *step) out(tl *stats.Timeline, tokens int64) *step {
	s.t.Helper()
	o, err := tl.Output(s.at, tokens)
	if err == nil {
		err = s.it.AddOutput(o)
	}
	if err != nil {
		s.t.Fatalf("output at %v: %v", s.at, err)
	}
	return s
}

// finish adds the finish of a request.
func (s *step) finish(tl *stats.Timeline, reason stats.FinishReason) *step {
	s.t.Helper()
	f, err := tl.Finish(s.at, reason)
	if err == nil {
		err = s.it.AddFinished(f)
	}
	if err != nil {
		s.t.Fatalf("finish at %v: %v", s.at, err)
	}
	return s
}

// record records the step on an engine.
func (s *step) record(e *instrument.Engine) {
	s.t.Helper()
	e.RecordIteration(context.Background(), &s.it)
}
