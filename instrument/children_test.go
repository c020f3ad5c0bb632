package instrument_test

import (
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// A request with n = 3 made at its arrival, before the engine knows its
// prompt length, whose children all fail before their tokenization, in two
// steps: each child counts in request_success by its reason, the parent's n
// and maximum generation tokens are observed once, and no prompt length is
// observed (vLLM observes none of 0 tokens).
func TestParentOfChildrenFailingBeforeTokenization(t *testing.T) {
	r, rec := newReaderRecorder(t)
	e, _ := rec.Engine(0)
	children := stats.NewTimelines(stats.Request{Arrival: t0, N: 3})
	if len(children) != 3 {
		t.Fatalf("NewTimelines(N 3, prompt not known yet) = %d children (%v), want 3", len(children), children[0].Err())
	}
	var step stats.Iteration
	for _, c := range children {
		c.Queued(ms(1))
	}
	step.Finish(children[0], ms(5), stats.FinishError)
	e.RecordIteration(t.Context(), &step)
	step.Reset()
	step.Finish(children[2], ms(9), stats.FinishAbort)
	step.Finish(children[1], ms(9), stats.FinishError)
	e.RecordIteration(t.Context(), &step)

	for reason, want := range map[string]float64{"error": 2, "abort": 1} {
		if got := r.Value("vllm:request_success_total", withLabels("finished_reason", reason)...); got != want {
			t.Errorf("requests finished by %s: %v, want %v", reason, got, want)
		}
	}
	if n := r.Histogram("vllm:request_params_n", withLabels()...); n.Count != 1 || n.Sum != 3 {
		t.Errorf("request_params_n: %d observations, sum %v; want one, 3", n.Count, n.Sum)
	}
	if m := r.Histogram("vllm:request_max_num_generation_tokens", withLabels()...); m.Count != 1 || m.Sum != 0 {
		t.Errorf("request_max_num_generation_tokens: %d observations, sum %v; want one, 0", m.Count, m.Sum)
	}
	if e2e := r.Histogram("vllm:e2e_request_latency_seconds", withLabels()...); e2e.Count != 3 {
		t.Errorf("e2e latencies: %d, want 3", e2e.Count)
	}
	for _, family := range []string{"vllm:request_prompt_tokens", "vllm:request_prefill_kv_computed_tokens"} {
		for _, f := range r.Families() {
			if f == family {
				t.Errorf("%s observed a request whose prompt length was never known", family)
			}
		}
	}
}
