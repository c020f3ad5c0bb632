package stats_test

import (
	"fmt"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// Example_decodeNode follows one request on the decode node of a
// prefill/decode (P/D) disaggregated deployment. The prefill node computed the
// 512-token prompt and its KV arrives through the KV connector, so this node
// computes no prompt token: the prompt counts under external_kv_transfer, and
// the work done in each step (TokensDone, vllm:iteration_tokens_total) is only
// the generated tokens.
func Example_decodeNode() {
	arrival := time.Unix(1000, 0)
	at := func(ms int) time.Time { return arrival.Add(time.Duration(ms) * time.Millisecond) }

	// One Timeline per request; the engine reports events as they happen.
	// No event returns an error: a refused one is kept in the step's
	// Refused, which the Recorder's RecordIteration counts and reports.
	tl := stats.NewTimeline(stats.Request{Arrival: arrival, PromptTokens: 512})
	tl.Queued(at(2))
	// Scheduled with 0 tokens from the local prefix cache and all 512 from
	// the KV connector.
	tl.Scheduled(at(5), 0, 512)

	// Three engine steps, each emitting one token of this request: one call
	// per output adds it to the step's Iteration. The first output adds the
	// prompt split and the time to first token (arrival to first token, in
	// Iteration.TTFT). Step 1 prints tokens_done=1, not 513: transferred KV is
	// not work done on this node. In step 3 the last token was a stop token.
	var it stats.Iteration
	var ttft float64
	for step, ms := range []int{45, 70, 95} {
		it.Reset()
		it.Output(tl, at(ms), 1)
		if step == 0 {
			ttft = it.TTFT[0]
		}
		fmt.Printf("step %d:", step+1)
		for _, s := range stats.Sources() {
			fmt.Printf(" %s=%d", s, it.PromptTokens.BySource(s))
		}
		fmt.Printf(" generation=%d tokens_done=%d\n", it.GenerationTokens, it.TokensDone())
	}
	it.Finish(tl, at(95), stats.FinishStop)

	f := it.Finished[0]
	fmt.Printf("finished: reason=%s prompt=%d generation=%d prefill_computed=%d\n",
		f.Reason, f.PromptTokens, f.GenerationTokens, f.PrefillComputedTokens)
	// TTFT: 45 ms after arrival. TPOT: the decode time (first token at 45 ms
	// to last at 95 ms) over the tokens after the first, 0.050 s / 2.
	fmt.Printf("TTFT=%.3fs TPOT=%.3fs E2E=%.3fs\n", ttft, f.TimePerOutputToken, f.E2ELatency)

	// Output:
	// step 1: local_compute=0 local_cache_hit=0 external_kv_transfer=512 generation=1 tokens_done=1
	// step 2: local_compute=0 local_cache_hit=0 external_kv_transfer=0 generation=1 tokens_done=1
	// step 3: local_compute=0 local_cache_hit=0 external_kv_transfer=0 generation=1 tokens_done=1
	// finished: reason=stop prompt=512 generation=3 prefill_computed=0
	// TTFT=0.045s TPOT=0.025s E2E=0.095s
}
