package instrument_test

// Benchmarks of the hot path against its anchors, in one run: the Recorder
// (infermetrics), hand-written OpenTelemetry that builds attributes on every
// call (otel_naive), the best hand-written OpenTelemetry (otel_precomputed)
// and pre-bound prometheus/client_golang children (client_golang). Every
// variant records exactly the same measurements of the same fixed step
// (package internal/benchvariants); TestBenchmarkVariantsAgree checks that
// they export the same values. The OpenTelemetry variants run on a real SDK
// MeterProvider with views.VLLM() and a ManualReader. scripts/bench.sh runs
// them and prints the comparison; docs/benchmarks.md has one run.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// benchRank is the engine every benchmark records on.
const benchRank = 0

// benchProvider returns an SDK MeterProvider with the vLLM views and a
// ManualReader, plus extra provider options.
func benchProvider(tb testing.TB, extra ...sdkmetric.Option) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	tb.Helper()
	return benchProviderViews(tb, nil, extra...)
}

// benchProviderViews is benchProvider with options of views.VLLM.
func benchProviderViews(tb testing.TB, vopts []views.Option, extra ...sdkmetric.Option) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	tb.Helper()
	vs, err := views.VLLM(vopts...)
	if err != nil {
		tb.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	opts := append([]sdkmetric.Option{sdkmetric.WithReader(reader), sdkmetric.WithView(vs...)}, extra...)
	mp := sdkmetric.NewMeterProvider(opts...)
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, reader
}

// benchErrors fails the benchmark on a refusal of the Recorder; the steps'
// feature data without its option (corrupted requests, KV offloading) is
// reported once and recorded.
func benchErrors(tb testing.TB) instrument.Option {
	return instrument.WithErrorHandler(func(err error) {
		if !errors.Is(err, instrument.ErrFeatureNotConfigured) {
			tb.Errorf("refused: %v", err)
		}
	})
}

func benchOurs(tb testing.TB, extra ...sdkmetric.Option) (*instrument.Engine, *sdkmetric.ManualReader) {
	tb.Helper()
	return benchOursViews(tb, nil, extra...)
}

// benchOursViews is benchOurs with options of views.VLLM.
func benchOursViews(tb testing.TB, vopts []views.Option, extra ...sdkmetric.Option) (*instrument.Engine, *sdkmetric.ManualReader) {
	tb.Helper()
	mp, reader := benchProviderViews(tb, vopts, extra...)
	rec, err := instrument.NewRecorder(append(benchvariants.RecorderOptions(mp, benchRank), benchErrors(tb))...)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := rec.Engine(benchRank)
	if err != nil {
		tb.Fatal(err)
	}
	return e, reader
}

// benchOursSemconv is benchOurs, with views.Semconv's views and the GenAI
// server metrics (WithGenAISemconv) when semconv is set.
func benchOursSemconv(tb testing.TB, semconv bool, extra ...sdkmetric.Option) *instrument.Engine {
	tb.Helper()
	if !semconv {
		e, _ := benchOurs(tb, extra...)
		return e
	}
	sc, err := views.Semconv()
	if err != nil {
		tb.Fatal(err)
	}
	mp, _ := benchProvider(tb, append(extra, sdkmetric.WithView(sc...))...)
	rec, err := instrument.NewRecorder(append(benchvariants.RecorderOptions(mp, benchRank), instrument.WithGenAISemconv(), benchErrors(tb))...)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := rec.Engine(benchRank)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func benchNaive(tb testing.TB) (*benchvariants.NaiveEngine, *sdkmetric.ManualReader) {
	tb.Helper()
	mp, reader := benchProvider(tb)
	v, err := benchvariants.NewNaive(mp, benchRank)
	if err != nil {
		tb.Fatal(err)
	}
	return v.Engine(benchRank), reader
}

func benchPrecomputed(tb testing.TB) (*benchvariants.PrecomputedEngine, *sdkmetric.ManualReader) {
	tb.Helper()
	mp, reader := benchProvider(tb)
	v, err := benchvariants.NewPrecomputed(mp, benchRank)
	if err != nil {
		tb.Fatal(err)
	}
	return v.Engine(benchRank), reader
}

func benchClientGolang(tb testing.TB) (*benchvariants.PromEngine, *benchvariants.ClientGolang) {
	tb.Helper()
	v, err := benchvariants.NewClientGolang(benchRank)
	if err != nil {
		tb.Fatal(err)
	}
	return v.Engine(benchRank), v
}

// BenchmarkIteration records one decode step of a batch of 256 running
// requests: prompt tokens by source of the 4 requests that emit their first
// token, cached and generation tokens, one iteration-tokens observation, 4
// TTFTs, 256 inter-token latencies and 4 finished requests with their
// histograms (benchvariants.DecodeStep).
func BenchmarkIteration(b *testing.B) {
	ctx := context.Background()
	b.Run("infermetrics", func(b *testing.B) {
		e, _ := benchOurs(b)
		it := benchvariants.DecodeStep()
		step := it // a copy per step: a recorded Iteration is refused until Reset
		e.RecordIteration(ctx, &step)
		b.ReportAllocs()
		for b.Loop() {
			step = it
			e.RecordIteration(ctx, &step)
		}
	})
	b.Run("otel_naive", func(b *testing.B) {
		e, _ := benchNaive(b)
		it := benchvariants.DecodeStep()
		e.RecordIteration(ctx, &it)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordIteration(ctx, &it)
		}
	})
	b.Run("otel_precomputed", func(b *testing.B) {
		e, _ := benchPrecomputed(b)
		it := benchvariants.DecodeStep()
		e.RecordIteration(ctx, &it)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordIteration(ctx, &it)
		}
	})
	b.Run("client_golang", func(b *testing.B) {
		e, _ := benchClientGolang(b)
		it := benchvariants.DecodeStep()
		e.RecordIteration(&it)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordIteration(&it)
		}
	})
}

// BenchmarkFinished records one finished request: its finish reason, token
// counts, parameters and six latencies (benchvariants.Finished).
func BenchmarkFinished(b *testing.B) {
	ctx := context.Background()
	b.Run("infermetrics", func(b *testing.B) {
		e, _ := benchOurs(b)
		f := benchvariants.Finished()
		e.RecordFinished(ctx, &f)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordFinished(ctx, &f)
		}
	})
	b.Run("otel_naive", func(b *testing.B) {
		e, _ := benchNaive(b)
		f := benchvariants.Finished()
		e.RecordFinished(ctx, &f)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordFinished(ctx, &f)
		}
	})
	b.Run("otel_precomputed", func(b *testing.B) {
		e, _ := benchPrecomputed(b)
		f := benchvariants.Finished()
		e.RecordFinished(ctx, &f)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordFinished(ctx, &f)
		}
	})
	b.Run("client_golang", func(b *testing.B) {
		e, _ := benchClientGolang(b)
		f := benchvariants.Finished()
		e.RecordFinished(&f)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordFinished(&f)
		}
	})
}

// BenchmarkScheduler records one scheduler step with every optional part:
// the gauges, cache lookups, KV connector lookups and transfers, speculative
// decoding per position, an unchanged LoRA state and two sampled KV block
// evictions (benchvariants.SchedulerStep). All four variants apply: the
// LoRA info gauge's attribute set (or client_golang child) is cached while
// the adapters do not change, in every variant but otel_naive.
func BenchmarkScheduler(b *testing.B) {
	ctx := context.Background()
	b.Run("infermetrics", func(b *testing.B) {
		e, _ := benchOurs(b)
		s := benchvariants.SchedulerStep()
		e.RecordScheduler(ctx, &s)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordScheduler(ctx, &s)
		}
	})
	b.Run("otel_naive", func(b *testing.B) {
		e, _ := benchNaive(b)
		s := benchvariants.SchedulerStep()
		e.RecordScheduler(ctx, &s)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordScheduler(ctx, &s)
		}
	})
	b.Run("otel_precomputed", func(b *testing.B) {
		e, _ := benchPrecomputed(b)
		s := benchvariants.SchedulerStep()
		e.RecordScheduler(ctx, &s)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordScheduler(ctx, &s)
		}
	})
	b.Run("client_golang", func(b *testing.B) {
		e, _ := benchClientGolang(b)
		s := benchvariants.SchedulerStep()
		e.RecordScheduler(&s)
		b.ReportAllocs()
		for b.Loop() {
			e.RecordScheduler(&s)
		}
	})
}

// BenchmarkPaired measures the ratios of BenchmarkIteration,
// BenchmarkFinished and BenchmarkScheduler with the four variants timed
// inside the same op, in an order that rotates every op, so that load from
// other processes and frequency changes hit them alike (sequential
// sub-benchmarks on a shared machine drift by several percent). Each variant
// records batch steps per op so that the clock reads stay under 1% of the
// time measured. ns/op is the time of all four; the ratios are the metrics.
func BenchmarkPaired(b *testing.B) {
	for _, step := range pairedSteps {
		b.Run(step.name, func(b *testing.B) {
			ours, _ := benchOurs(b)
			naive, _ := benchNaive(b)
			pre, _ := benchPrecomputed(b)
			prom, _ := benchClientGolang(b)
			runPaired(b, step.batch, stepRecorders(step.name, ours, naive, pre, prom))
		})
	}
}

// pairedSteps are the steps of BenchmarkPaired, with the steps each variant
// records per op.
var pairedSteps = []struct {
	name  string
	batch int
}{{"iteration", 1}, {"finished", 32}, {"scheduler", 8}}

// stepRecorders returns the four variants' recording of one step, in the
// order infermetrics, otel_naive, otel_precomputed, client_golang.
func stepRecorders(step string, ours *instrument.Engine, naive *benchvariants.NaiveEngine,
	pre *benchvariants.PrecomputedEngine, prom *benchvariants.PromEngine) [4]func() {
	ctx := context.Background()
	it, f, s := benchvariants.DecodeStep(), benchvariants.Finished(), benchvariants.SchedulerStep()
	switch step {
	case "iteration":
		return [4]func(){
			func() { step := it; ours.RecordIteration(ctx, &step) },
			func() { naive.RecordIteration(ctx, &it) },
			func() { pre.RecordIteration(ctx, &it) },
			func() { prom.RecordIteration(&it) },
		}
	case "finished":
		return [4]func(){
			func() { ours.RecordFinished(ctx, &f) },
			func() { naive.RecordFinished(ctx, &f) },
			func() { pre.RecordFinished(ctx, &f) },
			func() { prom.RecordFinished(&f) },
		}
	}
	return [4]func(){
		func() { ours.RecordScheduler(ctx, &s) },
		func() { naive.RecordScheduler(ctx, &s) },
		func() { pre.RecordScheduler(ctx, &s) },
		func() { prom.RecordScheduler(&s) },
	}
}

// runPaired times the four recorders inside each op, rotating their order,
// and reports the ratios.
func runPaired(b *testing.B, batch int, record [4]func()) {
	for _, r := range record { // series created outside the timed loop
		r()
	}
	var spent [4]time.Duration
	op := 0
	for b.Loop() {
		for k := range record {
			v := (op + k) % len(record)
			start := time.Now()
			for range batch {
				record[v]()
			}
			spent[v] += time.Since(start)
		}
		op++
	}
	b.ReportMetric(float64(spent[0])/float64(spent[2]), "ours/precomputed")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "naive/ours")
	b.ReportMetric(float64(spent[0])/float64(spent[3]), "ours/client_golang")
}

// collectSamples reads an OpenTelemetry variant as the Prometheus exporter
// would name it.
func collectSamples(t *testing.T, r *sdkmetric.ManualReader) benchvariants.Samples {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return benchvariants.FromOTel(&rm)
}

// TestBenchmarkVariantsAgree records the benchmarks' steps on the four
// variants and checks that each exports exactly what the Recorder exports
// (every series, start-up zeros included; values, counts, sums and
// buckets), so that the benchmarks compare the same work.
func TestBenchmarkVariantsAgree(t *testing.T) {
	ctx := context.Background()
	type recorders struct {
		ours  func(*testing.T)
		naive func()
		pre   func()
		prom  func()
	}
	for _, c := range []struct {
		name                  string
		minCounters, minHists int
		record                func(ours *instrument.Engine, n *benchvariants.NaiveEngine, p *benchvariants.PrecomputedEngine, g *benchvariants.PromEngine) recorders
	}{
		{"iteration", 6, 14, func(ours *instrument.Engine, n *benchvariants.NaiveEngine, p *benchvariants.PrecomputedEngine, g *benchvariants.PromEngine) recorders {
			it := benchvariants.DecodeStep()
			return recorders{
				func(t *testing.T) {
					step := it
					ours.RecordIteration(ctx, &step)
				},
				func() { n.RecordIteration(ctx, &it) },
				func() { p.RecordIteration(ctx, &it) },
				func() { g.RecordIteration(&it) },
			}
		}},
		{"finished", 1, 11, func(ours *instrument.Engine, n *benchvariants.NaiveEngine, p *benchvariants.PrecomputedEngine, g *benchvariants.PromEngine) recorders {
			f := benchvariants.Finished()
			return recorders{
				func(t *testing.T) {
					ours.RecordFinished(ctx, &f)
				},
				func() { n.RecordFinished(ctx, &f) },
				func() { p.RecordFinished(ctx, &f) },
				func() { g.RecordFinished(&f) },
			}
		}},
		{"scheduler", 13, 7, func(ours *instrument.Engine, n *benchvariants.NaiveEngine, p *benchvariants.PrecomputedEngine, g *benchvariants.PromEngine) recorders {
			s := benchvariants.SchedulerStep()
			return recorders{
				func(t *testing.T) {
					ours.RecordScheduler(ctx, &s)
				},
				func() { n.RecordScheduler(ctx, &s) },
				func() { p.RecordScheduler(ctx, &s) },
				func() { g.RecordScheduler(&s) },
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours, oursReader := benchOurs(t)
			naive, naiveReader := benchNaive(t)
			pre, preReader := benchPrecomputed(t)
			prom, promAll := benchClientGolang(t)
			r := c.record(ours, naive, pre, prom)
			for range 3 { // cumulative: three steps add up the same way
				r.ours(t)
				r.naive()
				r.pre()
				r.prom()
			}
			want := collectSamples(t, oursReader)
			for k := range want { // the Recorder's own counter: the step's feature data without its option
				if strings.HasPrefix(k, instrument.NameInvalidEvents) {
					delete(want, k)
				}
			}
			gathered, err := promAll.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for name, got := range map[string]benchvariants.Samples{
				"otel_naive":       collectSamples(t, naiveReader),
				"otel_precomputed": collectSamples(t, preReader),
				"client_golang":    benchvariants.FromFamilies(gathered),
			} {
				ours := want
				if name != "client_golang" { // the OpenTelemetry variants predate the newer families
					ours, got = benchvariants.Modelled(want), benchvariants.Modelled(got)
				}
				for _, d := range benchvariants.Diff(ours, got, "infermetrics", name) {
					t.Errorf("%s: %s", name, d)
				}
			}
			// Not vacuous: the step's counters and histograms are there.
			counters, hists := want.NonZero()
			if counters < c.minCounters || hists < c.minHists {
				t.Errorf("only %d non-zero counters and %d non-empty histograms compared, want %d and %d",
					counters, hists, c.minCounters, c.minHists)
			}
		})
	}
}

// BenchmarkExemplars records the decode step of BenchmarkIteration with
// exemplars off (exporters.Setup's default), on without any span, on with a
// sampled span on the step's context, and on with a sampled span per
// request (stats.Iteration.TTFTContexts and ITLContexts,
// FinishedRequest.Context).
func BenchmarkExemplars(b *testing.B) {
	traced := tracedDecodeStep()
	plain := benchvariants.DecodeStep()
	for _, c := range []struct {
		name    string
		off     bool
		semconv bool // views.Semconv too, and the Recorder WithGenAISemconv
		step    context.Context
		it      *stats.Iteration
	}{
		{"exemplars_off", true, false, context.Background(), &plain},
		{"exemplars_on_no_span", false, false, context.Background(), &plain},
		{"exemplars_on_sampled_step", false, false, sampledContext(200), &plain},
		{"exemplars_on_sampled_requests", false, false, context.Background(), &traced},
		{"semconv_exemplars_off", true, true, context.Background(), &plain},
		{"semconv_exemplars_on_sampled_requests", false, true, context.Background(), &traced},
	} {
		b.Run(c.name, func(b *testing.B) {
			var extra []sdkmetric.Option
			if c.off {
				extra = append(extra, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
			}
			e := benchOursSemconv(b, c.semconv, extra...)
			step := *c.it
			e.RecordIteration(c.step, &step)
			b.ReportAllocs()
			for b.Loop() {
				step = *c.it
				e.RecordIteration(c.step, &step)
			}
		})
	}
}
