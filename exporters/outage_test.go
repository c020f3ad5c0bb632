package exporters

// Collector outages and shutdown: recording never blocks and never panics,
// the Prometheus path is unaffected, and with cumulative temporality the
// receiver holds every recorded count once the collector is back. With delta
// temporality the data points of the exports that failed are lost, as
// documented in doc.go.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// callBound is the generous bound on one Record call while the collector
// is down; the calls measured take microseconds, and a machine loaded ten
// times over stretches them to milliseconds.
const callBound = 5 * time.Second

// outageOTLP are the OTLP options of the outage tests: a short interval and
// a 500 ms export timeout, so that an export to a dead collector gives up
// quickly (the exporter's retries back off from 5 s: none fits in it).
func outageOTLP(addr string, temporality Temporality, interval time.Duration) Option {
	return otlpTo(addr, temporality, interval, 500*time.Millisecond)
}

// upTimeout is the export timeout of a test whose exports must all arrive
// (with delta temporality, a failed export is lost): far above what an
// export to a receiver on this host takes on a loaded machine, where 500 ms
// was exceeded once (load 40).
const upTimeout = 2 * time.Minute

func otlpTo(addr string, temporality Temporality, interval, timeout time.Duration) Option {
	return WithOTLP(WithProtocol(ProtocolGRPC), WithEndpoint(addr), WithInsecure(), WithTemporality(temporality),
		WithInterval(interval), WithTimeout(timeout))
}

// load records on engines 0 and 1 of a Recorder from one goroutine, a step
// per millisecond or so, until halted: each step one iteration per engine
// (one generation token, five prompt tokens of which two cached) and every
// tenth step a finished request. It keeps the longest Record call.
type load struct {
	steps   atomic.Int64
	maxCall atomic.Int64 // nanoseconds, since the last lap
	stop    chan struct{}
	done    chan struct{}
}

func startLoad(rec *instrument.Recorder) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		ctx := context.Background()
		f := stats.FinishedRequest{Reason: stats.FinishStop, PromptTokens: 5, GenerationTokens: 10,
			PrefillComputedTokens: 3, E2ELatency: 0.5, InferenceTime: 0.4, DecodeTime: 0.3, PrefillTime: 0.1}
		for step := int64(0); ; step++ {
			select {
			case <-l.stop:
				return
			default:
			}
			for rank := range 2 {
				it := stats.Iteration{PromptTokens: stats.PromptTokens{Computed: 3, LocalCacheHit: 2},
					GenerationTokens: 1, ITL: []float64{0.02}}
				if step%10 == 9 {
					it.Finished = []stats.FinishedRequest{f}
				}
				start := time.Now()
				rec.RecordIteration(ctx, rank, &it)
				if d := int64(time.Since(start)); d > l.maxCall.Load() {
					l.maxCall.Store(d)
				}
			}
			l.steps.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	return l
}

// lap returns the longest call since the previous lap.
func (l *load) lap() time.Duration { return time.Duration(l.maxCall.Swap(0)) }

// halt stops the load and returns the steps recorded on each engine.
func (l *load) halt(t *testing.T) int64 {
	t.Helper()
	close(l.stop)
	<-l.done
	return l.steps.Load()
}

// lastExport returns the series of the receiver's latest export.
func lastExport(r *receiver) map[string]sample {
	reqs := r.requests()
	if len(reqs) == 0 {
		return nil
	}
	return otlpSamples(reqs[len(reqs)-1:])
}

// generationKey is the generation tokens series of an engine of model "m".
func generationKey(rank string) string {
	return `vllm:generation_tokens_total{engine="` + rank + `",model_name="m"}`
}

// checkRecovered waits for the receiver's latest export to hold every step
// of the halted load, shuts the provider down and checks that the last
// export equals the scrape, series by series.
func checkRecovered(t *testing.T, p *Provider, recv *receiver, steps int64) {
	t.Helper()
	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 {
		t.Fatalf("scrape: HTTP %d", code)
	}
	fromProm := parseScrape(t, body)
	for _, rank := range []string{"0", "1"} {
		if got := fromProm[generationKey(rank)].Value; got != float64(steps) {
			t.Fatalf("scrape: engine %s generation tokens %v, want %d", rank, got, steps)
		}
	}
	waitFor(t, "the receiver to hold every step", func() bool {
		last := lastExport(recv)
		return last[generationKey("0")].Value == float64(steps) && last[generationKey("1")].Value == float64(steps)
	})
	shutdown(t, p)
	counters, histograms := compareSamples(t, fromProm, lastExport(recv))
	if counters < 5 || histograms < 5 {
		t.Errorf("only %d counters and %d histograms compared", counters, histograms)
	}
}

// setupRecorder builds a Setup provider with opts and a Recorder of model
// "m" on engines 0 and 1.
func setupRecorder(t *testing.T, opts ...Option) (*Provider, *instrument.Recorder) {
	t.Helper()
	p, err := Setup(t.Context(), opts...)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	// A test that stops early still detaches its error route (Shutdown is
	// idempotent), or its handler would take the next tests' errors.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"),
		instrument.WithEngines(0, 1), testutil.StrictErrors(t))
	if err != nil {
		t.Fatal(err)
	}
	return p, rec
}

// The collector is down when the service starts, then comes up.
func TestOutageCollectorDownAtStart(t *testing.T) {
	cleanEnv(t)
	addr := closedAddr(t)
	var sink errorSink
	p, rec := setupRecorder(t, outageOTLP(addr, Cumulative, 100*time.Millisecond), WithErrorHandler(sink.Handle))
	start := time.Now()
	l := startLoad(rec)
	waitFor(t, "three failed exports", func() bool { return len(sink.Get()) >= 3 })
	down, downSteps, maxDown := time.Since(start), l.steps.Load(), l.lap()

	recv := &receiver{}
	recv.serve(t, addr)
	up := time.Now()
	waitFor(t, "an export once the collector is up", func() bool { return len(recv.requests()) > 0 })
	recovery := time.Since(up)
	time.Sleep(200 * time.Millisecond)
	steps := l.halt(t)
	maxUp := l.lap()
	checkRecovered(t, p, recv, steps)

	if maxDown > callBound {
		t.Errorf("a Record call took %v while the collector was down", maxDown)
	}
	t.Logf("collector down %v (%d failed exports, %d steps on each engine, longest Record call %v); "+
		"first export %v after it came up; %d steps in all (longest call while up %v); receiver holds them all",
		down.Round(time.Millisecond), len(sink.Get()), downSteps, maxDown, recovery.Round(time.Millisecond),
		steps, maxUp)
}

// The collector is up, stops for a while, and comes back on the same address.
func TestOutageCollectorStopsAndReturns(t *testing.T) {
	cleanEnv(t)
	recv := &receiver{}
	stop := recv.serve(t, "127.0.0.1:0")
	var sink errorSink
	p, rec := setupRecorder(t, outageOTLP(recv.addr, Cumulative, 100*time.Millisecond), WithErrorHandler(sink.Handle))
	l := startLoad(rec)
	waitFor(t, "an export with data", func() bool { return lastExport(recv)[generationKey("0")].Value > 0 })
	l.lap()

	stop()
	stopped, before := time.Now(), len(recv.requests())
	waitFor(t, "three failed exports", func() bool { return len(sink.Get()) >= 3 })
	time.Sleep(time.Second) // a longer outage: the gRPC reconnect backoff grows
	outage, maxDown := time.Since(stopped), l.lap()

	recv.serve(t, recv.addr)
	back := time.Now()
	waitFor(t, "an export once the collector is back", func() bool { return len(recv.requests()) > before })
	recovery := time.Since(back)
	time.Sleep(200 * time.Millisecond)
	steps := l.halt(t)
	checkRecovered(t, p, recv, steps)

	if maxDown > callBound {
		t.Errorf("a Record call took %v while the collector was down", maxDown)
	}
	t.Logf("collector stopped for %v (%d failed exports, longest Record call %v); first export %v after it came back; "+
		"%d steps on each engine in all; receiver holds them all",
		outage.Round(time.Millisecond), len(sink.Get()), maxDown, recovery.Round(time.Millisecond), steps)
}

// deltaSum adds up the delta points of the generation tokens of engine 0.
func deltaSum(t *testing.T, r *receiver) int64 {
	t.Helper()
	var sum int64
	for _, req := range r.requests() {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() != "vllm:generation_tokens" {
						continue
					}
					if tp := m.GetSum().GetAggregationTemporality(); tp != metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA {
						t.Fatalf("%s is %v, not delta", m.GetName(), tp)
					}
					for _, dp := range m.GetSum().GetDataPoints() {
						if otlpLabels(dp.GetAttributes())["engine"] == "0" {
							sum += dp.GetAsInt()
						}
					}
				}
			}
		}
	}
	return sum
}

// With delta temporality, what an export that fails carries is lost: the
// SDK resets its delta state when it collects for the export, and the
// exporter keeps nothing to send again. What is recorded after the outage
// arrives; the Prometheus scrape (always cumulative) loses nothing.
func TestOutageDeltaLosesFailedExports(t *testing.T) {
	cleanEnv(t)
	recv := &receiver{}
	stop := recv.serve(t, "127.0.0.1:0")
	// A 2 s export timeout, 4 times outageOTLP's (which a loaded machine
	// exceeded once with the collector up), still below the first retry's
	// delay (5 s, randomized by half): no export retries, so each flush
	// either delivers or loses its delta.
	p, rec := setupRecorder(t, otlpTo(recv.addr, Delta, time.Hour, 2*time.Second), WithErrorHandler(func(error) {}))
	ctx := t.Context()
	flush := func(d time.Duration) error {
		fctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return p.ForceFlush(fctx)
	}
	recordGeneration(t, rec, 5)
	if err := flush(upTimeout); err != nil {
		t.Fatalf("flush with the collector up: %v", err)
	}

	stop()
	recordGeneration(t, rec, 7)
	if err := flush(5 * time.Second); err == nil {
		t.Fatal("a flush to a stopped collector succeeded")
	}

	recv.serve(t, recv.addr)
	// Until gRPC has reconnected, flushes fail; nothing is recorded meanwhile.
	waitFor(t, "a flush to succeed", func() bool { return flush(5*time.Second) == nil })
	recordGeneration(t, rec, 11)
	if err := flush(upTimeout); err != nil {
		t.Fatalf("flush once the collector is back: %v", err)
	}
	code, body, _ := scrape(t, p.Handler(), "")
	shutdown(t, p)

	if got := deltaSum(t, recv); got != 5+11 {
		t.Errorf("the receiver's delta points sum to %d, want 5 + 11: the 7 of the failed export are lost", got)
	}
	if code != 200 || parseScrape(t, body)[generationKey("0")].Value != 5+7+11 {
		t.Errorf("the Prometheus scrape lost counts: HTTP %d\n%s", code, body)
	}
}

// Values recorded right before Shutdown are delivered, with the periodic
// exports running, in both temporalities.
func TestShutdownDeliversLastValues(t *testing.T) {
	for _, temporality := range []Temporality{Cumulative, Delta} {
		t.Run(temporality.String(), func(t *testing.T) {
			cleanEnv(t)
			recv := startReceiver(t)
			p, rec := setupRecorder(t, otlpTo(recv.addr, temporality, 100*time.Millisecond, upTimeout))
			l := startLoad(rec)
			time.Sleep(400 * time.Millisecond)
			steps := l.halt(t)
			// The last steps are younger than the last periodic export.
			recordGeneration(t, rec, 1000)
			shutdown(t, p)
			var got float64
			if temporality == Delta {
				got = float64(deltaSum(t, recv))
			} else {
				got = lastExport(recv)[generationKey("0")].Value
			}
			if want := float64(steps + 1000); got != want {
				t.Errorf("the receiver holds %v generation tokens for engine 0, want %v", got, want)
			}
		})
	}
}

// A collector that accepts the connection and never answers: Shutdown and
// ForceFlush return by their context's deadline, and recording goes on.
func TestShutdownCollectorHangs(t *testing.T) {
	cleanEnv(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	recv := &receiver{hang: hang}
	recv.serve(t, "127.0.0.1:0")
	// The exporter's own timeout (an hour) is far longer than the deadlines
	// and their slack: only the contexts can bound the calls.
	p, err := Setup(t.Context(), WithOTLP(WithProtocol(ProtocolGRPC), WithEndpoint(recv.addr), WithInsecure(),
		WithInterval(time.Hour), WithTimeout(time.Hour)),
		WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t, p)
	recordGeneration(t, rec, 3)

	const deadline, slack = time.Second, 30 * time.Second
	for _, c := range []struct {
		name string
		call func(context.Context) error
	}{{"ForceFlush", p.ForceFlush}, {"Shutdown", p.Shutdown}} {
		name, call := c.name, c.call
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		cancel()
		if took > deadline+slack {
			t.Errorf("%s took %v with a %v deadline", name, took, deadline)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s = %v, want a deadline error", name, err)
		}
		t.Logf("%s returned after %v: %v", name, took.Round(time.Millisecond), err)
		start = time.Now()
		recordGeneration(t, rec, 1) // recording neither blocks nor fails, before or after Shutdown
		if d := time.Since(start); d > callBound {
			t.Errorf("a Record call took %v after %s", d, name)
		}
	}
}

// BenchmarkRecordDuringOutage compares the cost of a Record call while the
// collector is up and while it is down, with exports every 100 ms.
func BenchmarkRecordDuringOutage(b *testing.B) {
	for _, state := range []string{"up", "down"} {
		b.Run("collector="+state, func(b *testing.B) {
			addr := closedAddr(b)
			if state == "up" {
				recv := &receiver{}
				recv.serve(b, addr)
			}
			p, err := Setup(context.Background(), outageOTLP(addr, Cumulative, 100*time.Millisecond),
				WithErrorHandler(func(error) {}))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = p.Shutdown(ctx)
			})
			var once sync.Once
			rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"),
				instrument.WithErrorHandler(func(err error) { once.Do(func() { b.Error(err) }) }))
			if err != nil {
				b.Fatal(err)
			}
			e, _ := rec.Engine(0)
			it := stats.Iteration{PromptTokens: stats.PromptTokens{Computed: 3, LocalCacheHit: 2},
				GenerationTokens: 1, ITL: []float64{0.02}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				step := it // each step its own: a recorded Iteration is refused until Reset
				e.RecordIteration(ctx, &step)
			}
		})
	}
}
