package instrument_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// Many goroutines record on two engines at once, growing the speculative
// decoding positions and changing the LoRA state as they go, while others
// scrape the Prometheus handler and collect: every measurement lands exactly
// once, and no scrape sees a counter go down (run with -race).
func TestConcurrentRecording(t *testing.T) {
	h := newScrapedHarness(t, instrument.WithEngines(0, 1))
	const goroutines, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		last := -1.0
		for {
			select {
			case <-done:
				return
			default:
			}
			// The scrape succeeds and the generation tokens of engine 0 only grow.
			body, err := h.tryScrape()
			if err != nil {
				t.Error(err)
				return
			}
			for _, line := range strings.Split(body, "\n") {
				if v, ok := strings.CutPrefix(line, `vllm:generation_tokens_total{engine="0",model_name="`+model+`"} `); ok {
					f, err := strconv.ParseFloat(v, 64)
					if err != nil || f < last {
						t.Errorf("scraped generation tokens %q after %v", v, last)
					}
					last = f
				}
			}
		}
	})
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				var rm metricdata.ResourceMetrics
				if err := h.reader.Collect(context.Background(), &rm); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	for g := range goroutines {
		wg.Go(func() {
			rank := g % 2
			for i := range rounds {
				it := stats.Iteration{
					PromptTokens:     stats.PromptTokens{Computed: 1, LocalCacheHit: 2, ExternalKVTransfer: 3},
					GenerationTokens: 4, ITL: []float64{0.01},
				}
				positions := make([]int64, g%4+1)
				for p := range positions {
					positions[p] = 1
				}
				accepted := int64(len(positions)) // one draft, all its tokens accepted
				s := stats.Scheduler{SpecDecoding: &stats.SpecDecoding{Drafts: 1, DraftTokens: accepted, AcceptedTokens: accepted, AcceptedPerPosition: positions},
					LoRA: &stats.LoRA{MaxLoRA: 2, Running: []string{"lora" + strconv.Itoa(i%3)}}}
				h.rec.RecordIteration(t.Context(), rank, &it)
				h.rec.RecordScheduler(t.Context(), rank, &s)
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	s := h.collect()
	for _, rank := range []string{"0", "1"} {
		// 4 goroutines x 50 rounds = 200 iterations per engine.
		checkPromptTokens(t, s, rank, promptTokens{total: 200 * 6, computed: 200 * 1, localHit: 200 * 2, external: 200 * 3, cached: 200 * 5})
		checkCounter(t, s, 200*4, "vllm:generation_tokens", engineLabels(rank)...)
		// 1 computed + 4 generated = 5 per iteration, in (1, 8].
		checkHistogram(t, s, 200, 200*5, map[int]uint64{1: 200}, "vllm:iteration_tokens_total", engineLabels(rank)...)
	}
	// Engine 0 runs goroutines 0, 2, 4, 6 with 1, 3, 1, 3 positions; engine 1
	// goroutines 1, 3, 5, 7 with 2, 4, 2, 4: 50 rounds each.
	for rank, perPosition := range map[string][]float64{"0": {200, 100, 100}, "1": {200, 200, 100, 100}} {
		for p, want := range perPosition {
			checkCounter(t, s, want, "vllm:spec_decode_num_accepted_tokens_per_pos",
				engineLabels(rank, "position", strconv.Itoa(p))...)
		}
	}
	// Each engine's current LoRA state only: every goroutine's last round
	// reports lora1, so both engines end in the same state, one series.
	lora := loraSeries(s)
	if _, ok := lora[loraKey("2", "", "lora1")]; len(lora) != 1 || !ok {
		t.Errorf("vllm:lora_requests_info = %v, want the one current state", lora)
	}
}
