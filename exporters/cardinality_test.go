package exporters

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/instrument"
	racesample "github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
)

// overflowLabel is the label of the overflow series in a scrape.
const overflowLabel = `otel_metric_overflow="true"`

// familySeries returns the series of one family of a parsed scrape.
func familySeries(fromProm map[string]sample, family string) map[string]sample {
	out := map[string]sample{}
	for k, v := range fromProm {
		if strings.HasPrefix(k, family+"{") {
			out[k] = v
		}
	}
	return out
}

// scrapeSamples scrapes p, failing the test unless it answers 200.
func scrapeSamples(t *testing.T, p *Provider) map[string]sample {
	t.Helper()
	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 {
		t.Fatalf("scrape: HTTP %d\n%s", code, body)
	}
	return parseScrape(t, body)
}

// heapInuse returns the heap in use after two garbage collections.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

const mib = 1 << 20

// A gateway serving more models than the limit: the series beyond it go to
// one overflow series per family, and no count is lost.
func TestCardinalityLimitModels(t *testing.T) {
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
	cleanEnv(t)
	const limit, models = 20, 50
	p, err := Setup(t.Context(), WithCardinalityLimit(limit))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, p)
	var want float64
	for i := range models {
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()),
			instrument.WithModelName(fmt.Sprintf("model-%02d", i)))
		if err != nil {
			t.Fatal(err)
		}
		recordGeneration(t, rec, int64(i+1))
		want += float64(i + 1)
	}
	fromProm := scrapeSamples(t, p)
	gen := familySeries(fromProm, "vllm:generation_tokens_total")
	var sum float64
	for _, s := range gen {
		sum += s.Value
	}
	overflow, ok := gen["vllm:generation_tokens_total{"+overflowLabel+"}"]
	if len(gen) != limit || !ok || sum != want {
		t.Errorf("vllm:generation_tokens_total: %d series (overflow %v: %+v) summing to %v; want %d with the overflow, summing to %v",
			len(gen), ok, overflow, sum, limit, want)
	}
	families := map[string]int{}
	for k := range fromProm {
		families[k[:strings.Index(k, "{")]]++
	}
	for family, n := range families {
		if n > limit {
			t.Errorf("%s has %d series, above the limit %d", family, n, limit)
		}
	}
	t.Logf("%d models, limit %d: %d model series and the overflow series %s %v", models, limit, len(gen)-1,
		"vllm:generation_tokens_total{"+overflowLabel+"}", overflow.Value)
}

// recordLoRA reports a LoRA state with one distinct running adapter.
func recordLoRA(t testing.TB, e *instrument.Engine, i int) {
	t.Helper()
	s := stats.Scheduler{LoRA: &stats.LoRA{MaxLoRA: 8,
		Running: []string{fmt.Sprintf("adapter-%06d", i)}, Waiting: []string{fmt.Sprintf("base-%d", i%7)}}}
	e.RecordScheduler(context.Background(), &s)
}

// loraEngine builds a Setup provider with opts and returns it with engine
// 0 of a Recorder of model "m".
func loraEngine(t testing.TB, opts ...Option) (*Provider, *instrument.Engine) {
	t.Helper()
	p, err := Setup(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, p) })
	e, err := newRecorder(t, p).Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	return p, e
}

// Without WithCardinalityLimit a stream keeps DefaultCardinalityLimit
// series, the overflow series included: here 500 attribute sets too many.
// One counter shows the provider's limit at the cost of its own series
// (2,500 engines of a Recorder took 60 s under the race detector);
// TestCardinalityLimitModels shows the vLLM families going to overflow.
func TestCardinalityDefaultLimit(t *testing.T) {
	cleanEnv(t)
	p, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, p)
	c, err := p.MeterProvider().Meter("cardinality").Int64Counter("requests")
	if err != nil {
		t.Fatal(err)
	}
	for i := range DefaultCardinalityLimit + 500 {
		c.Add(t.Context(), 1, metric.WithAttributes(attribute.Int("client", i)))
	}
	series := familySeries(scrapeSamples(t, p), "requests_total")
	var sum float64
	for _, s := range series {
		sum += s.Value
	}
	overflow, ok := series["requests_total{"+overflowLabel+"}"]
	if len(series) != DefaultCardinalityLimit || !ok || overflow.Value != 501 || sum != DefaultCardinalityLimit+500 {
		t.Errorf("requests_total has %d series (overflow %v at %v) summing to %v, want %d with the overflow at 501, summing to %d",
			len(series), ok, overflow.Value, sum, DefaultCardinalityLimit, DefaultCardinalityLimit+500)
	}
}

// Memory stays bounded when 20,000 distinct LoRA adapter states, or 1,000
// model names, are reported: sizes that show a leak of a Recorder per model
// (tens of KiB) or of a label per state, well past the heap noise; the
// full-size figures are BenchmarkCardinalityMemory's. The model names run
// without the race detector only (the test command's newest-dependencies
// stage): they churn Recorders on the test's goroutine alone, where the
// race detector has nothing to find, and took 9 s of CPU under it, 1,000
// Recorders built and closed (the LoRA states, 0.6 s, run under it too).
func TestCardinalityMemoryBounded(t *testing.T) {
	testlog.StdLogger(t) // what a scrape reports goes to otel.Handle, which logs it: to the test's log
	const attempts = 20_000
	t.Run("LoRA adapters", func(t *testing.T) {
		cleanEnv(t)
		p, e := loraEngine(t)
		recordLoRA(t, e, -1)
		start := heapInuse()
		var atTenth uint64
		for i := range attempts {
			if i == attempts/10 {
				atTenth = heapInuse()
			}
			recordLoRA(t, e, i)
		}
		end := heapInuse()
		// Only the engine's current state is reported: one series.
		lora := familySeries(scrapeSamples(t, p), "vllm:lora_requests_info")
		checkBounded(t, "LoRA states", attempts, start, atTenth, end, len(lora), 1)
	})
	t.Run("model names", func(t *testing.T) {
		if racesample.Race {
			t.Skip("one goroutine, where the race detector has nothing to find: run without -race")
		}
		cleanEnv(t)
		const n = 1_000
		c := newModelChurn(t)
		c.step(t, -1)
		start := heapInuse()
		var atTenth uint64
		for i := range n {
			if i == n/10 {
				atTenth = heapInuse()
			}
			c.step(t, i)
		}
		end := heapInuse()
		gen := familySeries(scrapeSamples(t, c.p), "vllm:generation_tokens_total")
		var sum float64
		for _, s := range gen {
			sum += s.Value
		}
		if sum != churnLoaded {
			t.Errorf("generation tokens sum to %v over the series, want %d (the loaded models)", sum, churnLoaded)
		}
		checkBounded(t, "model names", n, start, atTenth, end, len(gen), churnLimit)
	})
}

// A small limit: the loaded models' Recorders (churnLoaded of them) stay
// live, and their series go past it.
const churnLimit, churnLoaded = 10, 10 + 1

// modelChurn is a gateway that loads and unloads models on one provider:
// one Recorder per model records a step and is closed when unloaded; the
// last churnLoaded models stay loaded, one more series than the limit.
type modelChurn struct {
	p    *Provider
	live []*instrument.Recorder
}

func newModelChurn(tb testing.TB) *modelChurn {
	tb.Helper()
	p, err := Setup(context.Background(), WithCardinalityLimit(churnLimit))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { shutdown(tb, p) })
	return &modelChurn{p: p}
}

// step loads model i, records on it and unloads the oldest model.
func (c *modelChurn) step(tb testing.TB, i int) {
	tb.Helper()
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(c.p.MeterProvider()),
		instrument.WithModelName(fmt.Sprintf("model-%06d", i)))
	if err != nil {
		tb.Fatal(err)
	}
	recordGeneration(tb, rec, 1)
	c.live = append(c.live, rec)
	if len(c.live) > churnLoaded {
		if err := c.live[0].Close(); err != nil {
			tb.Fatal(err)
		}
		c.live[0] = nil
		c.live = c.live[1:]
	}
}

// BenchmarkCardinalityMemory reports the heap kept per distinct LoRA state
// or model name at full size (-benchtime 100000x): about 0 once the limit
// is reached. TestCardinalityMemoryBounded checks the bound at a size a
// test can afford.
func BenchmarkCardinalityMemory(b *testing.B) {
	measure := func(b *testing.B, step func(i int)) {
		step(-1)
		start := heapInuse()
		b.ResetTimer()
		for i := range b.N {
			step(i)
		}
		b.StopTimer()
		b.ReportMetric((float64(heapInuse())-float64(start))/float64(b.N), "heap-B/op")
	}
	b.Run("LoRA states", func(b *testing.B) {
		_, e := loraEngine(b)
		measure(b, func(i int) { recordLoRA(b, e, i) })
	})
	b.Run("model names", func(b *testing.B) {
		c := newModelChurn(b)
		measure(b, func(i int) { c.step(b, i) })
	})
}

// checkBounded checks that the series stopped at the limit and that the heap
// did not grow with the attempts past the first tenth (1 MiB of noise: the
// heap after two collections moves by about 0.2 MiB here), nor by more than
// 64 MiB in all.
func checkBounded(t *testing.T, what string, attempts int, start, atTenth, end uint64, series, limit int) {
	t.Helper()
	growth := func(from, to uint64) float64 { return (float64(to) - float64(from)) / mib }
	if series != limit {
		t.Errorf("%d %s: %d series, want the limit %d", attempts, what, series, limit)
	}
	if g := growth(atTenth, end); g > 1 {
		t.Errorf("%d %s: the heap grew by %.1f MiB after the first tenth", attempts, what, g)
	}
	if g := growth(start, end); g > 64 {
		t.Errorf("%d %s: the heap grew by %.1f MiB", attempts, what, g)
	}
	t.Logf("%d distinct %s: %d series (limit %d); heap in use %.1f MiB at start, %.1f MiB after %d, %.1f MiB after %d (%+.1f MiB in all)",
		attempts, what, series, limit, float64(start)/mib, float64(atTenth)/mib, attempts/10, float64(end)/mib, attempts,
		growth(start, end))
}
