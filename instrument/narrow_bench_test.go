package instrument_test

// Investigation of the gap to client_golang without leaving OpenTelemetry
// (docs/benchmarks.md, "Narrowing the gap"). Prototypes only: nothing here
// changes the library. Each runs on views.VLLM() and is checked to export
// exactly what the Recorder exports there.
//
//   - exemplars off: the provider option
//     sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter) skips the
//     trace-based exemplar check of every measurement and keeps no exemplar
//     reservoirs. exporters.Setup sets it unless OTEL_METRICS_EXEMPLAR_FILTER
//     is set or the Prometheus handler serves OpenMetrics; the benchmarks
//     build their own MeterProviders, so every variant without this option
//     runs with the SDK's default, trace-based filter.
//
// (Two earlier prototypes are the library now: views with no attribute
// filter where an instrument has nothing to drop is views.VLLM(), and
// counters and gauges in per-engine atomics reported by one callback through
// observable instruments is the Recorder.)

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
)

// exemplarsOff is the provider option of the exemplars-off prototypes.
var exemplarsOff = sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter)

// stepper records one of the three steps on a variant.
type stepper struct {
	iteration func(context.Context, *stats.Iteration)
	finished  func(context.Context, *stats.FinishedRequest)
	scheduler func(context.Context, *stats.Scheduler)
}

func oursStepper(tb testing.TB, e *instrument.Engine) stepper {
	return stepper{
		func(ctx context.Context, it *stats.Iteration) {
			step := *it // a copy per step: a recorded Iteration is refused until Reset
			e.RecordIteration(ctx, &step)
		},
		func(ctx context.Context, f *stats.FinishedRequest) {
			e.RecordFinished(ctx, f)
		},
		func(ctx context.Context, s *stats.Scheduler) {
			e.RecordScheduler(ctx, s)
		},
	}
}

// narrowVariants are the prototypes, each built on its own provider, with
// the Recorder, otel_naive, otel_precomputed and client_golang as references.
func narrowVariants() []struct {
	name  string
	build func(tb testing.TB) stepper
} {
	return []struct {
		name  string
		build func(tb testing.TB) stepper
	}{
		{"infermetrics", func(tb testing.TB) stepper {
			e, _ := benchOurs(tb)
			return oursStepper(tb, e)
		}},
		{"infermetrics_exemplars_off", func(tb testing.TB) stepper {
			e, _ := benchOurs(tb, exemplarsOff)
			return oursStepper(tb, e)
		}},
		{"otel_naive", func(tb testing.TB) stepper {
			e, _ := benchNaive(tb)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
		}},
		{"otel_precomputed", func(tb testing.TB) stepper {
			e, _ := benchPrecomputed(tb)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
		}},
		{"client_golang", func(tb testing.TB) stepper {
			e, _ := benchClientGolang(tb)
			return stepper{
				func(_ context.Context, it *stats.Iteration) { e.RecordIteration(it) },
				func(_ context.Context, f *stats.FinishedRequest) { e.RecordFinished(f) },
				func(_ context.Context, s *stats.Scheduler) { e.RecordScheduler(s) },
			}
		}},
	}
}

// BenchmarkNarrow runs the three steps of BenchmarkIteration,
// BenchmarkFinished and BenchmarkScheduler on the prototypes, with the
// Recorder, otel_naive, otel_precomputed and client_golang again as
// references in the same run.
func BenchmarkNarrow(b *testing.B) {
	ctx := context.Background()
	for _, step := range []string{"iteration", "finished", "scheduler"} {
		b.Run(step, func(b *testing.B) {
			for _, v := range narrowVariants() {
				b.Run(v.name, func(b *testing.B) {
					s := v.build(b)
					it, f, sched := benchvariants.DecodeStep(), benchvariants.Finished(), benchvariants.SchedulerStep()
					var record func()
					switch step {
					case "iteration":
						record = func() { s.iteration(ctx, &it) }
					case "finished":
						record = func() { s.finished(ctx, &f) }
					default:
						record = func() { s.scheduler(ctx, &sched) }
					}
					record()
					b.ReportAllocs()
					for b.Loop() {
						record()
					}
				})
			}
		})
	}
}

// BenchmarkNarrowPaired is BenchmarkPaired with exemplars off on every
// OpenTelemetry variant's provider, as exporters.Setup configures by default:
// the ratios the targets talk about for Setup's users.
func BenchmarkNarrowPaired(b *testing.B) {
	for _, step := range pairedSteps {
		b.Run(step.name, func(b *testing.B) {
			ours, _ := benchOurs(b, exemplarsOff)
			mp, _ := benchProvider(b, exemplarsOff)
			naive, err := benchvariants.NewNaive(mp, benchRank)
			if err != nil {
				b.Fatal(err)
			}
			mp, _ = benchProvider(b, exemplarsOff)
			pre, err := benchvariants.NewPrecomputed(mp, benchRank)
			if err != nil {
				b.Fatal(err)
			}
			prom, _ := benchClientGolang(b)
			runPaired(b, step.batch, stepRecorders(step.name, ours, naive.Engine(benchRank), pre.Engine(benchRank), prom))
		})
	}
}

// BenchmarkNarrowCollect is the other side of the Recorder's observable
// counters and gauges: a ManualReader collection of 4 engines that recorded
// every step, where its callback reports them, against otel_precomputed's
// synchronous instruments.
func BenchmarkNarrowCollect(b *testing.B) {
	ctx := context.Background()
	ranks := []int{0, 1, 2, 3}
	build := map[string]func(b *testing.B) (*sdkmetric.ManualReader, func(rank int) stepper){
		"otel_precomputed": func(b *testing.B) (*sdkmetric.ManualReader, func(int) stepper) {
			mp, reader := benchProvider(b)
			p, err := benchvariants.NewPrecomputed(mp, ranks...)
			if err != nil {
				b.Fatal(err)
			}
			return reader, func(rank int) stepper {
				e := p.Engine(rank)
				return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
			}
		},
		"infermetrics": func(b *testing.B) (*sdkmetric.ManualReader, func(int) stepper) {
			mp, reader := benchProvider(b)
			rec, err := instrument.NewRecorder(benchvariants.RecorderOptions(mp, ranks...)...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = rec.Close() })
			return reader, func(rank int) stepper {
				e, err := rec.Engine(rank)
				if err != nil {
					b.Fatal(err)
				}
				return oursStepper(b, e)
			}
		},
	}
	for _, name := range []string{"otel_precomputed", "infermetrics"} {
		b.Run(name, func(b *testing.B) {
			reader, engine := build[name](b)
			for _, rank := range ranks {
				s := engine(rank)
				its, sched := benchvariants.ScrapeSteps(rank)
				for i := range its {
					s.iteration(ctx, &its[i])
				}
				s.scheduler(ctx, &sched)
			}
			var rm metricdata.ResourceMetrics
			b.ReportAllocs()
			for b.Loop() {
				if err := reader.Collect(ctx, &rm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestNarrowPrototypesAgree records every step three times on each
// prototype and checks that it exports exactly what the Recorder on
// views.VLLM() exports.
func TestNarrowPrototypesAgree(t *testing.T) {
	ctx := context.Background()
	readers := map[string]func(t *testing.T) (stepper, func() benchvariants.Samples){
		"infermetrics": func(t *testing.T) (stepper, func() benchvariants.Samples) {
			e, r := benchOurs(t)
			return oursStepper(t, e), func() benchvariants.Samples { return collectSamples(t, r) }
		},
		"infermetrics_exemplars_off": func(t *testing.T) (stepper, func() benchvariants.Samples) {
			e, r := benchOurs(t, exemplarsOff)
			return oursStepper(t, e), func() benchvariants.Samples { return collectSamples(t, r) }
		},
	}
	record := func(s stepper) {
		for rank := range 3 {
			its, sched := benchvariants.ScrapeSteps(rank) // every family, the three steps
			for i := range its {
				s.iteration(ctx, &its[i])
			}
			f := benchvariants.Finished()
			s.finished(ctx, &f)
			s.scheduler(ctx, &sched)
		}
	}
	ours, collectOurs := readers["infermetrics"](t)
	record(ours)
	first := collectOurs()
	record(ours) // and again after a collection: cumulative values keep adding up
	want := collectOurs()
	for _, name := range []string{"infermetrics_exemplars_off"} {
		s, collect := readers[name](t)
		record(s)
		for _, d := range benchvariants.Diff(first, collect(), "infermetrics", name+" (first collection)") {
			t.Errorf("%s: %s", name, d)
		}
		record(s)
		for _, d := range benchvariants.Diff(want, collect(), "infermetrics", name) {
			t.Errorf("%s: %s", name, d)
		}
	}
	if c, h := want.NonZero(); c < 20 || h < 22 {
		t.Errorf("only %d non-zero counters and %d non-empty histograms compared", c, h)
	}
}
