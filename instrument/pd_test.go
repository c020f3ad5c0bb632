package instrument_test

import (
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

// checkCounter asserts one counter series' exact value.
func checkCounter(t *testing.T, s snapshot, want float64, name string, labels ...string) {
	t.Helper()
	if got := s.get(t, name, labels...); got.kind != "counter" || got.value != want {
		t.Errorf("%s = %v, want counter %v", series(name, labels...), got, want)
	}
}

// checkHistogram asserts one histogram series' count, sum and bucket counts
// (OpenTelemetry buckets are not cumulative: bucket i counts values in
// (bounds[i-1], bounds[i]]).
func checkHistogram(t *testing.T, s snapshot, count uint64, sum float64, buckets map[int]uint64, name string, labels ...string) {
	t.Helper()
	got := s.get(t, name, labels...)
	if got.kind != "histogram" || got.count != count || !approx(got.sum, sum) {
		t.Errorf("%s = %v, want count %d sum %v", series(name, labels...), got, count, sum)
		return
	}
	for i, n := range got.buckets {
		if n != buckets[i] {
			t.Errorf("%s bucket %d (le %v) = %d, want %d", series(name, labels...), i, bucketBound(got.bounds, i), n, buckets[i])
		}
	}
}

func bucketBound(bounds []float64, i int) any {
	if i < len(bounds) {
		return bounds[i]
	}
	return "+Inf"
}

// promptTokens are the expected prompt token counters of one engine.
type promptTokens struct{ total, computed, localHit, external, cached float64 }

// checkPromptTokens asserts the prompt token counters of an engine, and the
// two invariants between the collected values: the total is the sum over
// sources, and cached is local hits plus external transfers.
func checkPromptTokens(t *testing.T, s snapshot, rank string, want promptTokens) {
	t.Helper()
	checkCounter(t, s, want.total, "vllm:prompt_tokens", engineLabels(rank)...)
	checkCounter(t, s, want.computed, "vllm:prompt_tokens_by_source", engineLabels(rank, "source", "local_compute")...)
	checkCounter(t, s, want.localHit, "vllm:prompt_tokens_by_source", engineLabels(rank, "source", "local_cache_hit")...)
	checkCounter(t, s, want.external, "vllm:prompt_tokens_by_source", engineLabels(rank, "source", "external_kv_transfer")...)
	checkCounter(t, s, want.cached, "vllm:prompt_tokens_cached", engineLabels(rank)...)
	bySource := func(source string) float64 {
		return s.get(t, "vllm:prompt_tokens_by_source", engineLabels(rank, "source", source)...).value
	}
	total := s.get(t, "vllm:prompt_tokens", engineLabels(rank)...).value
	if sum := bySource("local_compute") + bySource("local_cache_hit") + bySource("external_kv_transfer"); sum != total {
		t.Errorf("engine %s: prompt tokens %v, but %v over sources", rank, total, sum)
	}
	cached := s.get(t, "vllm:prompt_tokens_cached", engineLabels(rank)...).value
	if local := bySource("local_cache_hit") + bySource("external_kv_transfer"); cached != local {
		t.Errorf("engine %s: cached prompt tokens %v, but local hits + external %v", rank, cached, local)
	}
}

// TestDecodeNodeTokens is the P/D decode node: every prompt arrives as KV
// through the connector, so no prompt token is computed here and the
// iteration tokens are the generation tokens alone (vLLM PR #43346).
func TestDecodeNodeTokens(t *testing.T) {
	h := newHarness(t, instrument.WithMaxModelLen(4096), instrument.WithKVConnector())
	e := h.engine(0)

	// Three requests whose prompts are fully served by external KV.
	r1 := request(t, 1000, 0, 10, 0, 1000)
	r2 := request(t, 512, 0, 10, 0, 512)
	r3 := request(t, 300, 0, 40, 0, 300)

	stepAt(t, 50).out(r1, 1).out(r2, 1).record(e)            // first outputs of r1, r2
	stepAt(t, 80).out(r1, 1).out(r2, 1).out(r3, 1).record(e) // first output of r3
	stepAt(t, 100).out(r1, 1).out(r2, 1).out(r3, 1).
		finish(r1, stats.FinishStop).finish(r3, stats.FinishLength).record(e)

	s := h.collect()
	eng := engineLabels("0")
	// Prompts: 1000 + 512 + 300 = 1812, all external.
	checkPromptTokens(t, s, "0", promptTokens{total: 1812, computed: 0, localHit: 0, external: 1812, cached: 1812})
	// Generation: 2 + 3 + 3 = 8.
	checkCounter(t, s, 8, "vllm:generation_tokens", eng...)
	// THE RULE: observations computed + generation = 0+2, 0+3, 0+3: sum 8,
	// count 3, all in (1, 8]. Counting whole prompts would give 1812 + 8 = 1820.
	checkHistogram(t, s, 3, 8, map[int]uint64{1: 3}, "vllm:iteration_tokens_total", eng...)
	if it := s.get(t, "vllm:iteration_tokens_total", eng...); it.sum == 1820 {
		t.Errorf("iteration tokens sum %v counts transferred prompt tokens as work", it.sum)
	}
	// TTFT: r1 and r2 at 50 ms, r3 at 80 ms: 0.05 + 0.05 + 0.08 = 0.18, in (0.04, 0.06] x2 and (0.06, 0.08] x1.
	checkHistogram(t, s, 3, 0.18, map[int]uint64{5: 2, 6: 1}, "vllm:time_to_first_token_seconds", eng...)
	// ITL: 30 ms for r1 and r2 at step 2, 20 ms for r1, r2, r3 at step 3:
	// 2*0.03 + 3*0.02 = 0.12, every value in (0.01, 0.025] or (0.025, 0.05].
	checkHistogram(t, s, 5, 0.12, map[int]uint64{1: 3, 2: 2}, "vllm:inter_token_latency_seconds", eng...)
	// Finished r1 (stop) and r3 (length): prompts 1000 in (500, 1000] and 300 in
	// (200, 500], nothing computed here (0 in (-inf, 1]).
	checkCounter(t, s, 1, "vllm:request_success", engineLabels("0", "finished_reason", "stop")...)
	checkCounter(t, s, 1, "vllm:request_success", engineLabels("0", "finished_reason", "length")...)
	checkHistogram(t, s, 2, 1300, map[int]uint64{9: 1, 8: 1}, "vllm:request_prompt_tokens", eng...)
	checkHistogram(t, s, 2, 0, map[int]uint64{0: 2}, "vllm:request_prefill_kv_computed_tokens", eng...)
	// r1 generated 3 tokens, r3 2: 5, in (2, 5] and (1, 2].
	checkHistogram(t, s, 2, 5, map[int]uint64{1: 1, 2: 1}, "vllm:request_generation_tokens", eng...)
}

// TestPrefillNodeTokens is a prefill node with partial local prefix cache
// hits and a preemption before the first output, after which the first
// scheduling's snapshot still counts.
func TestPrefillNodeTokens(t *testing.T) {
	h := newHarness(t, instrument.WithMaxModelLen(4096))
	e := h.engine(0)

	r1 := request(t, 1000, 1, 10, 256, 0) // computed 1000 - 256 = 744
	r2 := request(t, 600, 1, 10, 512, 0)  // computed 600 - 512 = 88
	r3 := request(t, 200, 1, 10, 0, 0)    // computed 200, until preempted
	if err := r3.Preempted(ms(30)); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(r3.Refused, func() { r3.Scheduled(ms(60), 64, 0) }); err != nil { // not counted: still 200 computed
		t.Fatal(err)
	}

	s1 := stepAt(t, 50).out(r1, 1).out(r2, 1).finish(r1, stats.FinishLength).finish(r2, stats.FinishLength)
	s1.it.Preemptions = 1
	s1.record(e)
	stepAt(t, 90).out(r3, 1).finish(r3, stats.FinishLength).record(e)

	s := h.collect()
	eng := engineLabels("0")
	// Total 1000 + 600 + 200 = 1800 = computed 744+88+200 = 1032 + local 256+512 = 768.
	checkPromptTokens(t, s, "0", promptTokens{total: 1800, computed: 1032, localHit: 768, external: 0, cached: 768})
	checkCounter(t, s, 3, "vllm:generation_tokens", eng...)
	checkCounter(t, s, 1, "vllm:num_preemptions", eng...)
	// Step 1: 744 + 88 + 2 = 834 in (512, 1024] (bucket 8); step 2: 200 + 1 = 201
	// in (128, 256] (bucket 6).
	// Sum 1035, not prompt total + generation = 1803.
	checkHistogram(t, s, 2, 1035, map[int]uint64{8: 1, 6: 1}, "vllm:iteration_tokens_total", eng...)
	// Per finished request: 744 in (500, 1000], 88 in (50, 100], 200 in (100, 200]: sum 1032.
	checkHistogram(t, s, 3, 1032, map[int]uint64{9: 1, 6: 1, 7: 1}, "vllm:request_prefill_kv_computed_tokens", eng...)
	checkCounter(t, s, 3, "vllm:request_success", engineLabels("0", "finished_reason", "length")...)
	// max_tokens 1 for each request: three observations of 1, in (-inf, 1].
	checkHistogram(t, s, 3, 3, map[int]uint64{0: 3}, "vllm:request_params_max_tokens", eng...)
}

// TestPromptTokensInvariants checks the two exact invariants of the token
// accounting on a mix of sources recorded directly: total == sum over
// sources, and cached == local + external.
func TestPromptTokensInvariants(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(3))
	it := &stats.Iteration{
		PromptTokens:     stats.PromptTokens{Computed: 7, LocalCacheHit: 11, ExternalKVTransfer: 13},
		GenerationTokens: 5,
	}
	for range 2 {
		step := *it // each step its own: a recorded Iteration is refused until Reset
		h.rec.RecordIteration(t.Context(), 3, &step)
	}
	s := h.collect()
	eng := engineLabels("3")
	// Twice (7 + 11 + 13) = 62; twice (11 + 13) = 48; twice (7 + 5) = 24.
	checkPromptTokens(t, s, "3", promptTokens{total: 62, computed: 14, localHit: 22, external: 26, cached: 48})
	checkCounter(t, s, 10, "vllm:generation_tokens", eng...)
	checkHistogram(t, s, 2, 24, map[int]uint64{2: 2}, "vllm:iteration_tokens_total", eng...)
}
