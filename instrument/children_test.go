package instrument_test

import (
	"runtime"
	"slices"
	"testing"
	"weak"

	"github.com/infermetrics/infermetrics/instrument"

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

// dropTimelines makes requests that the engine queues, tokenizes or
// schedules through ev and then refuses (a prompt too long, a failed
// tokenization): their Timelines are dropped, with no Finish. It returns
// weak pointers to them, for the test to see them collected. A refused
// Scheduled is kept on its Timeline, and goes with it.
//
//go:noinline
func dropTimelines(ev *instrument.Events) []weak.Pointer[stats.Timeline] {
	queued := stats.NewTimeline(stats.Request{Arrival: t0})
	tokenized := stats.NewTimeline(stats.Request{Arrival: t0})
	scheduled := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 40, MaxTokens: 16})
	refused := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 40})
	ev.Queued(queued, ms(1))
	ev.Queued(tokenized, ms(1))
	ev.Tokenized(tokenized, ms(2), 9000)
	ev.Queued(scheduled, ms(1))
	ev.Scheduled(scheduled, ms(3), 8, 0)
	ev.Scheduled(refused, ms(3), 99, 0) // more cached than the prompt: refused, kept on the Timeline
	children := stats.NewTimelines(stats.Request{Arrival: t0, N: 2})
	for _, c := range children {
		ev.Queued(c, ms(1))
	}
	ptrs := []weak.Pointer[stats.Timeline]{weak.Make(queued), weak.Make(tokenized), weak.Make(scheduled), weak.Make(refused)}
	for _, c := range children {
		ptrs = append(ptrs, weak.Make(c))
	}
	return ptrs
}

// A request refused after Queued (issue 32, item 5) may simply be dropped,
// in any phase before its first output: Events holds nothing of it (no
// window opened; the Timelines are garbage once dropped), and nothing is
// recorded for it, as vLLM's engine never sees a request its API server
// refused. A refusal kept on a dropped Timeline goes with it, uncounted.
func TestDroppedTimelines(t *testing.T) {
	r, rec := newReaderRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()
	before := r.Families()
	ptrs := dropTimelines(ev)
	if _, open := instrument.OpenWindow(ev); open {
		t.Error("Queued, Tokenized or Scheduled opened a window")
	}
	ev.Flush()
	runtime.GC()
	for i, p := range ptrs {
		if p.Value() != nil {
			t.Errorf("dropped Timeline %d is still reachable", i)
		}
	}
	if after := r.Families(); !slices.Equal(after, before) {
		t.Errorf("families after the drops %v, want those before %v", after, before)
	}
	// No refusal counted: the invalid events family, which appears with
	// the first, is not among the families.
	for _, family := range []string{"vllm:prompt_tokens_total", "vllm:generation_tokens_total"} {
		if v := r.Value(family, withLabels()...); v != 0 {
			t.Errorf("%s %v after the drops, want 0", family, v)
		}
	}
	for _, reason := range []string{"stop", "length", "abort", "error", "repetition"} {
		if v := r.Value("vllm:request_success_total", withLabels("finished_reason", reason)...); v != 0 {
			t.Errorf("requests finished by %s: %v, want 0", reason, v)
		}
	}
}

// A child of an n > 1 request refused alone (its own tokenization failed)
// while its siblings run: dropped, its parent waits for it, so the parent's
// n and maximum generation tokens are never observed (nothing is held: the
// parent's count goes with its Timelines). Finished with FinishAbort
// instead, it counts as one aborted request, and the parent observes n
// once, at its last child's finish, as vLLM's ParentRequest observes n when
// no child is left.
func TestDroppedChild(t *testing.T) {
	for _, finishDropped := range []bool{false, true} {
		r, rec := newReaderRecorder(t, manualWindows)
		e, _ := rec.Engine(0)
		ev := e.Events()
		children := stats.NewTimelines(stats.Request{Arrival: t0, N: 3})
		for _, c := range children {
			ev.Queued(c, ms(1))
		}
		if finishDropped {
			ev.Finish(children[0], ms(2), stats.FinishAbort)
		}
		for i, c := range children[1:] {
			ev.Tokenized(c, ms(2), 30)
			ev.Scheduled(c, ms(3), 0, 0)
			for range 2 + i {
				ev.Output(c, ms(10), 1)
			}
			ev.Finish(c, ms(10), stats.FinishStop)
		}
		ev.Flush()

		if v := r.Value("vllm:request_success_total", withLabels("finished_reason", "stop")...); v != 2 {
			t.Errorf("finish %v: requests stopped %v, want 2", finishDropped, v)
		}
		wantAbort := map[bool]float64{false: 0, true: 1}[finishDropped]
		if v := r.Value("vllm:request_success_total", withLabels("finished_reason", "abort")...); v != wantAbort {
			t.Errorf("finish %v: requests aborted %v, want %v", finishDropped, v, wantAbort)
		}
		if !finishDropped {
			for _, family := range []string{"vllm:request_params_n", "vllm:request_max_num_generation_tokens"} {
				if slices.Contains(r.Families(), family) {
					t.Errorf("dropped child: %s observed, want never: the parent waits for the dropped child", family)
				}
			}
			continue
		}
		if h := r.Histogram("vllm:request_params_n", withLabels()...); h.Count != 1 || h.Sum != 3 {
			t.Errorf("aborted child: request_params_n %d observations, sum %v; want one, 3", h.Count, h.Sum)
		}
		if h := r.Histogram("vllm:request_max_num_generation_tokens", withLabels()...); h.Count != 1 || h.Sum != 3 {
			t.Errorf("aborted child: max generation tokens %d observations, sum %v; want one, 3", h.Count, h.Sum)
		}
	}
}
