package instrument_test

// Investigation of the gap to client_golang without leaving OpenTelemetry
// (docs/benchmarks.md, "Narrowing the gap"). Prototypes only: nothing here
// changes the library. Each is checked to export exactly what the Recorder
// exports with views.VLLM().
//
//   - lean views: views.VLLM() sets an AttributeFilter on every stream, so
//     the SDK filters and re-hashes the attribute set of every measurement,
//     even on instruments with nothing to drop (the ITL histogram has only
//     model_name and engine). leanVLLMViews sets a filter only where an
//     instrument carries an attribute the family drops (the GenAI attributes
//     of the three latency instruments, source on vllm:prompt_tokens).
//   - exemplars off: the provider option
//     sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter) skips the
//     trace-based exemplar check of every measurement.
//   - observable: counters and gauges in per-engine atomics reported by one
//     callback through observable instruments (benchvariants.Observable);
//     histograms stay synchronous, as OpenTelemetry has no asynchronous
//     histogram.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// semconvKeys are the attributes views.VLLM drops from every family.
var semconvKeys = []string{instrument.KeyGenAIOperationName, instrument.KeyGenAIProviderName,
	instrument.KeyGenAIRequestModel, instrument.KeyErrorType}

// leanVLLMViews builds what views.VLLM() builds (names, descriptions, the
// KV cache usage unit, both prompt-token families), with an attribute
// filter only on the streams whose instrument has attributes to drop.
func leanVLLMViews() []sdkmetric.View {
	filter := func(d instrument.Descriptor, extra ...string) attribute.Filter {
		var drop []string
		for _, k := range append(slices.Clone(semconvKeys), extra...) {
			if slices.Contains(d.Attributes, k) {
				drop = append(drop, k)
			}
		}
		if len(drop) == 0 {
			return nil // nothing to drop: the SDK skips filtering and re-hashing
		}
		return func(kv attribute.KeyValue) bool { return !slices.Contains(drop, string(kv.Key)) }
	}
	view := func(d instrument.Descriptor, name, description string, f attribute.Filter) sdkmetric.View {
		s := sdkmetric.Stream{Name: name, Description: description, AttributeFilter: f}
		if d.Unit == "1" && d.Kind == instrument.Gauge {
			s.Unit = "{fraction}"
		}
		return sdkmetric.NewView(sdkmetric.Instrument{Name: d.Name,
			Scope: instrumentation.Scope{Name: instrument.ScopeName}}, s)
	}
	var vs []sdkmetric.View
	for _, d := range instrument.Descriptors() {
		if d.Name == instrument.NamePromptTokens {
			vs = append(vs, view(d, views.VLLMName(d), benchvariants.PromptTokensTotalHelp, filter(d, instrument.KeySource)),
				view(d, views.PromptTokensBySource, d.Description, filter(d)))
			continue
		}
		vs = append(vs, view(d, views.VLLMName(d), d.Description, filter(d)))
	}
	return vs
}

// providerWith returns a MeterProvider and ManualReader with the given views
// and options.
func providerWith(tb testing.TB, vs []sdkmetric.View, opts ...sdkmetric.Option) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	tb.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(append([]sdkmetric.Option{sdkmetric.WithReader(reader), sdkmetric.WithView(vs...)}, opts...)...)
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, reader
}

func oursOn(tb testing.TB, vs []sdkmetric.View, opts ...sdkmetric.Option) (*instrument.Engine, *sdkmetric.ManualReader) {
	tb.Helper()
	mp, reader := providerWith(tb, vs, opts...)
	rec, err := instrument.NewRecorder(benchvariants.RecorderOptions(mp, benchRank)...)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := rec.Engine(benchRank)
	if err != nil {
		tb.Fatal(err)
	}
	return e, reader
}

func vllmViews(tb testing.TB) []sdkmetric.View {
	tb.Helper()
	vs, err := views.VLLM()
	if err != nil {
		tb.Fatal(err)
	}
	return vs
}

// stepper records one of the three steps on a variant.
type stepper struct {
	iteration func(context.Context, *stats.Iteration)
	finished  func(context.Context, *stats.FinishedRequest)
	scheduler func(context.Context, *stats.Scheduler)
}

func oursStepper(tb testing.TB, e *instrument.Engine) stepper {
	return stepper{
		func(ctx context.Context, it *stats.Iteration) {
			if err := e.RecordIteration(ctx, it); err != nil {
				tb.Fatal(err)
			}
		},
		func(ctx context.Context, f *stats.FinishedRequest) {
			if err := e.RecordFinished(ctx, f); err != nil {
				tb.Fatal(err)
			}
		},
		func(ctx context.Context, s *stats.Scheduler) {
			if err := e.RecordScheduler(ctx, s); err != nil {
				tb.Fatal(err)
			}
		},
	}
}

// narrowVariants are the prototypes, each built on its own provider.
func narrowVariants() []struct {
	name  string
	build func(tb testing.TB) stepper
} {
	return []struct {
		name  string
		build func(tb testing.TB) stepper
	}{
		{"infermetrics", func(tb testing.TB) stepper {
			e, _ := oursOn(tb, vllmViews(tb))
			return oursStepper(tb, e)
		}},
		{"infermetrics_lean_views", func(tb testing.TB) stepper {
			e, _ := oursOn(tb, leanVLLMViews())
			return oursStepper(tb, e)
		}},
		{"infermetrics_exemplars_off", func(tb testing.TB) stepper {
			e, _ := oursOn(tb, vllmViews(tb), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
			return oursStepper(tb, e)
		}},
		{"infermetrics_lean_views_exemplars_off", func(tb testing.TB) stepper {
			e, _ := oursOn(tb, leanVLLMViews(), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
			return oursStepper(tb, e)
		}},
		{"otel_naive", func(tb testing.TB) stepper {
			e, _ := benchNaive(tb)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
		}},
		{"otel_naive_lean_views", func(tb testing.TB) stepper {
			mp, _ := providerWith(tb, leanVLLMViews())
			v, err := benchvariants.NewNaive(mp, benchRank)
			if err != nil {
				tb.Fatal(err)
			}
			e := v.Engine(benchRank)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
		}},
		{"otel_precomputed", func(tb testing.TB) stepper {
			e, _ := benchPrecomputed(tb)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
		}},
		{"otel_precomputed_lean_views", func(tb testing.TB) stepper {
			mp, _ := providerWith(tb, leanVLLMViews())
			v, err := benchvariants.NewPrecomputed(mp, benchRank)
			if err != nil {
				tb.Fatal(err)
			}
			e := v.Engine(benchRank)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
		}},
		{"otel_observable", func(tb testing.TB) stepper {
			mp, _ := benchProvider(tb)
			o, err := benchvariants.NewObservable(mp, benchRank)
			if err != nil {
				tb.Fatal(err)
			}
			e := o.Engine(benchRank)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
		}},
		{"otel_observable_lean_views_exemplars_off", func(tb testing.TB) stepper {
			mp, _ := providerWith(tb, leanVLLMViews(), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
			o, err := benchvariants.NewObservable(mp, benchRank)
			if err != nil {
				tb.Fatal(err)
			}
			e := o.Engine(benchRank)
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
// Recorder, otel_precomputed and client_golang again as references in the
// same run.
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

// BenchmarkNarrowPaired is BenchmarkPaired with every OpenTelemetry
// variant on the lean views and with exemplars off: the ratios the targets
// talk about once both recommendations are in.
func BenchmarkNarrowPaired(b *testing.B) {
	for _, step := range pairedSteps {
		b.Run(step.name, func(b *testing.B) {
			exemplarsOff := sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter)
			ours, _ := oursOn(b, leanVLLMViews(), exemplarsOff)
			mp, _ := providerWith(b, leanVLLMViews(), exemplarsOff)
			naive, err := benchvariants.NewNaive(mp, benchRank)
			if err != nil {
				b.Fatal(err)
			}
			mp, _ = providerWith(b, leanVLLMViews(), exemplarsOff)
			pre, err := benchvariants.NewPrecomputed(mp, benchRank)
			if err != nil {
				b.Fatal(err)
			}
			prom, _ := benchClientGolang(b)
			runPaired(b, step.batch, stepRecorders(step.name, ours, naive.Engine(benchRank), pre.Engine(benchRank), prom))
		})
	}
}

// BenchmarkNarrowCollect is the other side of the observable prototype: a
// ManualReader collection of 4 engines that recorded every step, where the
// callback now reports the counters and gauges.
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
		"otel_observable": func(b *testing.B) (*sdkmetric.ManualReader, func(int) stepper) {
			mp, reader := benchProvider(b)
			o, err := benchvariants.NewObservable(mp, ranks...)
			if err != nil {
				b.Fatal(err)
			}
			return reader, func(rank int) stepper {
				e := o.Engine(rank)
				return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler}
			}
		},
	}
	for _, name := range []string{"otel_precomputed", "otel_observable"} {
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
			e, r := oursOn(t, vllmViews(t))
			return oursStepper(t, e), func() benchvariants.Samples { return collectSamples(t, r) }
		},
		"infermetrics_lean_views_exemplars_off": func(t *testing.T) (stepper, func() benchvariants.Samples) {
			e, r := oursOn(t, leanVLLMViews(), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
			return oursStepper(t, e), func() benchvariants.Samples { return collectSamples(t, r) }
		},
		"otel_observable": func(t *testing.T) (stepper, func() benchvariants.Samples) {
			mp, r := benchProvider(t)
			o, err := benchvariants.NewObservable(mp, benchRank)
			if err != nil {
				t.Fatal(err)
			}
			e := o.Engine(benchRank)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler},
				func() benchvariants.Samples { return collectSamples(t, r) }
		},
		"otel_observable_lean_views_exemplars_off": func(t *testing.T) (stepper, func() benchvariants.Samples) {
			mp, r := providerWith(t, leanVLLMViews(), sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
			o, err := benchvariants.NewObservable(mp, benchRank)
			if err != nil {
				t.Fatal(err)
			}
			e := o.Engine(benchRank)
			return stepper{e.RecordIteration, e.RecordFinished, e.RecordScheduler},
				func() benchvariants.Samples { return collectSamples(t, r) }
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
	for _, name := range []string{"infermetrics_lean_views_exemplars_off", "otel_observable", "otel_observable_lean_views_exemplars_off"} {
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

// TestLeanViewsScrapeIdentical checks the lean views against views.VLLM()
// where it matters most: the Prometheus scrape text, HELP and TYPE lines
// included, is byte-identical (the LoRA gauge's time value aside).
func TestLeanViewsScrapeIdentical(t *testing.T) {
	scrape := func(vs []sdkmetric.View) string {
		p, err := exporters.NewPrometheus()
		if err != nil {
			t.Fatal(err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.Reader), sdkmetric.WithView(vs...))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		rec, err := instrument.NewRecorder(benchvariants.RecorderOptions(mp, 0, 1)...)
		if err != nil {
			t.Fatal(err)
		}
		for rank := range 2 {
			its, sched := benchvariants.ScrapeSteps(rank)
			for i := range its {
				if err := rec.RecordIteration(context.Background(), rank, &its[i]); err != nil {
					t.Fatal(err)
				}
			}
			if err := rec.RecordScheduler(context.Background(), rank, &sched); err != nil {
				t.Fatal(err)
			}
		}
		w := httptest.NewRecorder()
		p.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		body, _ := io.ReadAll(w.Result().Body)
		if w.Code != http.StatusOK {
			t.Fatalf("HTTP %d: %s", w.Code, body)
		}
		return regexp.MustCompile(`(?m)^(vllm:lora_requests_info\{[^}]*\}) \S+$`).ReplaceAllString(string(body), "$1 <time>")
	}
	want, got := scrape(vllmViews(t)), scrape(leanVLLMViews())
	if got != want {
		t.Errorf("the lean views' scrape differs from views.VLLM()'s:\n--- views.VLLM\n%s\n--- lean\n%s", want, got)
	}
}
