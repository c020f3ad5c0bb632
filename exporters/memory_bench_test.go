package exporters_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/views"
)

// memEngines is the number of engines whose marginal cost is measured.
const memEngines = 64

// heapAlloc returns the live heap after two garbage collections.
func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// memSetup builds a complete metrics set-up with n engines, records
// benchvariants.ScrapeSteps on every engine (every family, all optional
// ones, every series) and scrapes it once; it returns what keeps it alive
// and the scrape size.
type memSetup func(tb testing.TB, n int) (alive any, body string)

func ranksUpTo(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// populateRanks records benchvariants.ScrapeSteps on the engines of ranks.
func populateRanks(tb testing.TB, ranks []int, engine func(rank int) engineRecorder) {
	tb.Helper()
	for _, rank := range ranks {
		e := engine(rank)
		its, s := benchvariants.ScrapeSteps(rank)
		for i := range its {
			if err := e.iteration(&its[i]); err != nil {
				tb.Fatal(err)
			}
		}
		if err := e.scheduler(&s); err != nil {
			tb.Fatal(err)
		}
	}
}

func memOurs(tb testing.TB, n int) (any, string) { return memOursWith(tb, n) }

// memOursExemplarsOff is memOurs on a provider whose exemplar filter is
// always off (OTEL_METRICS_EXEMPLAR_FILTER=always_off does the same): no
// exemplar reservoir per series.
func memOursExemplarsOff(tb testing.TB, n int) (any, string) {
	return memOursWith(tb, n, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
}

func memOursWith(tb testing.TB, n int, opts ...sdkmetric.Option) (any, string) {
	p, err := exporters.NewPrometheus()
	if err != nil {
		tb.Fatal(err)
	}
	opts = append(opts, sdkmetric.WithReader(p.Reader), sdkmetric.WithView(vllmViewsFor(tb)...))
	mp := sdkmetric.NewMeterProvider(opts...)
	rec, err := instrument.NewRecorder(benchvariants.RecorderOptions(mp, ranksUpTo(n)...)...)
	if err != nil {
		tb.Fatal(err)
	}
	populateRanks(tb, ranksUpTo(n), func(rank int) engineRecorder {
		e, err := rec.Engine(rank)
		if err != nil {
			tb.Fatal(err)
		}
		return oursRecorder{e}
	})
	return []any{mp, rec, p}, scrapeText(tb, p.Handler)
}

func memClientGolang(tb testing.TB, n int) (any, string) {
	c, err := benchvariants.NewClientGolang(ranksUpTo(n)...)
	if err != nil {
		tb.Fatal(err)
	}
	populateRanks(tb, ranksUpTo(n), func(rank int) engineRecorder { return promRecorder{c.Engine(rank)} })
	h := promhttp.HandlerFor(c.Registry, promhttp.HandlerOpts{})
	return []any{c, h}, scrapeText(tb, h)
}

func scrapeText(tb testing.TB, h http.Handler) string {
	tb.Helper()
	w := &bodyWriter{header: http.Header{}}
	req, _ := http.NewRequest(http.MethodGet, "/metrics", nil)
	h.ServeHTTP(w, req)
	if w.code != 0 && w.code != http.StatusOK {
		tb.Fatalf("scrape: HTTP %d", w.code)
	}
	return w.body.String()
}

type bodyWriter struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (w *bodyWriter) Header() http.Header         { return w.header }
func (w *bodyWriter) WriteHeader(code int)        { w.code = code }
func (w *bodyWriter) Write(p []byte) (int, error) { return w.body.Write(p) }

func vllmViewsFor(tb testing.TB) []sdkmetric.View {
	tb.Helper()
	vs, err := views.VLLM()
	if err != nil {
		tb.Fatal(err)
	}
	return vs
}

// BenchmarkMemoryPerEngine measures the steady-state heap of one engine
// with every family and every series (benchvariants.ScrapeSteps recorded,
// one scrape served): the live heap (runtime.MemStats.HeapAlloc after GC)
// of a set-up with 1+64 engines minus that of a set-up with 1, divided by
// 64, reported as B/engine; B/first_engine is the set-up with one engine
// (MeterProvider, instruments, reader and handler included). Run it with a
// small -benchtime (for example 3x): each op builds both set-ups.
func BenchmarkMemoryPerEngine(b *testing.B) {
	for _, v := range []struct {
		name  string
		setup memSetup
	}{{"infermetrics", memOurs}, {"infermetrics_exemplars_off", memOursExemplarsOff}, {"client_golang", memClientGolang}} {
		b.Run(v.name, func(b *testing.B) {
			var perEngine, first, series float64
			for b.Loop() {
				base := heapAlloc()
				one, body := v.setup(b, 1)
				withOne := heapAlloc() - base
				many, _ := v.setup(b, 1+memEngines)
				withMany := heapAlloc() - base - withOne
				runtime.KeepAlive(one)
				runtime.KeepAlive(many)
				perEngine += float64(withMany-withOne) / memEngines
				first += float64(withOne)
				samples, err := benchvariants.FromText(body)
				if err != nil {
					b.Fatal(err)
				}
				series = float64(len(samples))
			}
			n := float64(b.N)
			b.ReportMetric(perEngine/n, "B/engine")
			b.ReportMetric(first/n, "B/first_engine")
			b.ReportMetric(series, "series/engine")
		})
	}
}
