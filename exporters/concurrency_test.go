package exporters

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/benchvariants"
	"github.com/infermetrics/infermetrics/stats"
)

// Many goroutines record on four engines while others scrape the
// Prometheus handler and force OTLP exports, and the periodic reader exports
// every 20 ms: afterwards the scrape and the receiver hold exact totals
// (run with -race).
func TestConcurrentRecordScrapeExport(t *testing.T) {
	cleanEnv(t)
	recv := startReceiver(t)
	p, err := Setup(t.Context(), WithOTLP(WithProtocol(ProtocolGRPC), WithEndpoint(recv.addr), WithInsecure(), WithInterval(20*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"),
		instrument.WithEngines(0, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, rounds = 8, 1000
	done := make(chan struct{})
	var background sync.WaitGroup
	// repeat calls f until done, or until it fails, counting the calls.
	repeat := func(count *int, f func() bool) {
		background.Go(func() {
			for ; ; *count++ {
				select {
				case <-done:
					return
				default:
				}
				if !f() {
					return
				}
			}
		})
	}
	var scrapes, flushes int
	repeat(&scrapes, func() bool {
		code, body, _ := scrape(t, p.Handler(), "")
		if code != 200 {
			t.Errorf("scrape: HTTP %d\n%s", code, body)
		}
		return code == 200
	})
	repeat(&flushes, func() bool {
		// A guard against a hang, not a speed goal: a flush returns at
		// once when it passes (it took over 10 s at load 17).
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := p.ForceFlush(ctx); err != nil {
			t.Errorf("ForceFlush: %v", err)
			return false
		}
		return true
	})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			ctx := context.Background()
			rank := g % 4
			for i := range rounds {
				it := stats.Iteration{PromptTokens: stats.PromptTokens{Computed: 2, LocalCacheHit: 1, ExternalKVTransfer: 4},
					GenerationTokens: 3, ITL: []float64{0.01, 0.02}}
				if i%4 == 0 {
					it.Finished = []stats.FinishedRequest{{Reason: stats.FinishReason(i % 5), PromptTokens: 7, GenerationTokens: 3,
						PrefillComputedTokens: 2, E2ELatency: 1}}
				}
				rec.RecordIteration(ctx, rank, &it)
				rec.RecordScheduler(ctx, rank, &stats.Scheduler{Running: int64(i), PrefixCache: stats.CacheQueries{Queries: 7, Hits: 1}})
			}
		})
	}
	wg.Wait()
	close(done)
	background.Wait()

	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 {
		t.Fatalf("scrape: HTTP %d", code)
	}
	fromProm := parseScrape(t, body)
	// Two goroutines per engine.
	const perEngine = 2 * rounds
	for _, rank := range []string{"0", "1", "2", "3"} {
		labels := map[string]string{"engine": rank, "model_name": "m"}
		for family, want := range map[string]float64{
			"vllm:generation_tokens_total":    3 * perEngine,
			"vllm:prompt_tokens_total":        7 * perEngine,
			"vllm:prompt_tokens_cached_total": 5 * perEngine,
			"vllm:prefix_cache_queries_total": 7 * perEngine,
			"vllm:prefix_cache_hits_total":    perEngine,
		} {
			if got := fromProm[benchvariants.Key(family, labels)].Value; got != want {
				t.Errorf("%s engine %s = %v, want %v", family, rank, got, want)
			}
		}
		if got := fromProm[benchvariants.Key("vllm:iteration_tokens_total", labels)]; got.Count != perEngine || got.Sum != 5*perEngine {
			t.Errorf("iteration tokens of engine %s: count %d sum %v, want %d and %d", rank, got.Count, got.Sum, perEngine, 5*perEngine)
		}
		if got := fromProm[benchvariants.Key("vllm:inter_token_latency_seconds", labels)].Count; got != 2*perEngine {
			t.Errorf("ITL observations of engine %s = %d, want %d", rank, got, 2*perEngine)
		}
		var finished float64
		for _, reason := range stats.FinishReasons() {
			finished += fromProm[benchvariants.Key("vllm:request_success_total",
				map[string]string{"engine": rank, "model_name": "m", "finished_reason": reason.String()})].Value
		}
		if finished != perEngine/4 {
			t.Errorf("finished requests of engine %s = %v, want %d", rank, finished, perEngine/4)
		}
	}
	shutdown(t, p)
	counters, histograms := compareSamples(t, fromProm, lastExport(recv))
	t.Logf("%d goroutines x %d rounds on 4 engines, %d scrapes and %d forced exports alongside, %d periodic and forced exports received; "+
		"%d counters and %d histograms equal at the receiver", goroutines, rounds, scrapes, flushes, len(recv.requests()), counters, histograms)
}
