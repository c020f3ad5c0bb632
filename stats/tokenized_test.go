package stats_test

import (
	"fmt"
	"testing"

	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

// A request queued before its tokenization: the Timeline starts at the
// arrival without a prompt length, Tokenized sets it, and the request runs
// as one made with it, its queue time and TTFT from the arrival's events.
func TestTokenizedAfterQueued(t *testing.T) {
	tl := stats.NewTimeline(stats.Request{Arrival: t0, MaxTokens: 8})
	if err := tl.Err(); err != nil {
		t.Fatalf("NewTimeline without a prompt length: %v", err)
	}
	must := mustNil(t)
	must(eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }))
	must(eventtest.Err(tl.Refused, func() { tl.Tokenized(ms(4), 100) }))
	if got := tl.Latest(); !got.Equal(ms(4)) {
		t.Errorf("Latest() = %v, want the Tokenized time %v", got, ms(4))
	}
	outs, fin := run(t, tl, []event{scheduled(10, 40, 0), output(30, 1), output(50, 2), finish(50, stats.FinishStop)})
	checkOutputs(t, outs, []stats.Output{
		{First: true, PromptTokens: stats.PromptTokens{Computed: 60, LocalCacheHit: 40}, GenerationTokens: 1, TTFT: 0.03},
		{GenerationTokens: 2, ITL: 0.02},
	})
	checkFinished(t, fin, stats.FinishedRequest{
		Reason: stats.FinishStop, PromptTokens: 100, GenerationTokens: 3, PrefillComputedTokens: 60, MaxTokens: 8,
		N: 1, MaxGenerationTokens: 3, E2ELatency: 0.05, QueueTime: 0.009, PrefillTime: 0.02, InferenceTime: 0.04,
		DecodeTime: 0.02, TimePerOutputToken: 0.01,
	})
}

// What Tokenized refuses, each refusal leaving the Timeline as it was: the
// request then runs as if the bad call had not been made.
func TestTokenizedRefusals(t *testing.T) {
	for _, tt := range []struct {
		name     string
		known    int64 // Request.PromptTokens
		bad      func(tl *stats.Timeline) error
		sentinel error
		mention  string
	}{
		{"empty prompt", 0, func(tl *stats.Timeline) error {
			return eventtest.Err(tl.Refused, func() { tl.Tokenized(ms(2), 0) })
		}, stats.ErrOutOfRange, "want at least 1"},
		{"negative prompt", 0, func(tl *stats.Timeline) error {
			return eventtest.Err(tl.Refused, func() { tl.Tokenized(ms(2), -5) })
		}, stats.ErrOutOfRange, "promptTokens = -5"},
		{"before the previous event", 0, func(tl *stats.Timeline) error {
			return eventtest.Err(tl.Refused, func() { tl.Tokenized(t0, 10) })
		}, stats.ErrOutOfOrder, "Tokenized"},
		{"length known at the arrival", 10, func(tl *stats.Timeline) error {
			return eventtest.Err(tl.Refused, func() { tl.Tokenized(ms(2), 10) })
		}, stats.ErrOutOfOrder, "PromptTokens 0"},
		{"scheduled before it", 0, func(tl *stats.Timeline) error {
			return eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(2), 0, 0) })
		}, stats.ErrOutOfOrder, "call Tokenized first"},
		{"output before it", 0, func(tl *stats.Timeline) error {
			_, err := tl.Output(ms(2), 1)
			return err
		}, stats.ErrOutOfOrder, "call Scheduled first"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: tt.known})
			if err := eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }); err != nil {
				t.Fatal(err)
			}
			wantErr(t, tt.bad(tl), tt.sentinel, tt.mention)
			if tt.known == 0 {
				if err := eventtest.Err(tl.Refused, func() { tl.Tokenized(ms(3), 10) }); err != nil {
					t.Fatalf("Tokenized after the refusal: %v", err)
				}
			}
			_, fin := run(t, tl, []event{scheduled(5, 0, 0), output(8, 1), finish(9, stats.FinishStop)})
			checkFinished(t, fin, stats.FinishedRequest{
				Reason: stats.FinishStop, PromptTokens: 10, GenerationTokens: 1, PrefillComputedTokens: 10,
				N: 1, MaxGenerationTokens: 1, E2ELatency: 0.009, QueueTime: 0.004, PrefillTime: 0.003, InferenceTime: 0.003,
			})
			// A second Tokenized, after the scheduling, is refused too.
			if err := eventtest.Err(tl.Refused, func() { tl.Tokenized(ms(9), 10) }); err == nil {
				t.Error("Tokenized after the finish was accepted")
			}
		})
	}
}

// childStage drives a child of an n > 1 request to one stage of its life
// before it fails: each ends the child, and so may end the parent.
type childStage struct {
	name  string
	drive func(tl *stats.Timeline, it *stats.Iteration) // events before the finish, times 1 to 9 ms
	gen   int64                                         // tokens it generated
}

var childStages = []childStage{
	{"before its tokenization", func(tl *stats.Timeline, _ *stats.Iteration) {}, 0},
	{"queued, not tokenized", func(tl *stats.Timeline, _ *stats.Iteration) { tl.Queued(ms(1)) }, 0},
	{"tokenized", func(tl *stats.Timeline, _ *stats.Iteration) { tl.Queued(ms(1)); tl.Tokenized(ms(2), 50) }, 0},
	{"scheduled", func(tl *stats.Timeline, _ *stats.Iteration) { tl.Tokenized(ms(2), 50); tl.Scheduled(ms(3), 0, 0) }, 0},
	{"preempted after outputs", func(tl *stats.Timeline, it *stats.Iteration) {
		tl.Tokenized(ms(2), 50)
		tl.Scheduled(ms(3), 10, 0)
		it.Output(tl, ms(5), 3)
		it.Preempt(tl, ms(6))
	}, 3},
	{"running after outputs", func(tl *stats.Timeline, it *stats.Iteration) {
		tl.Tokenized(ms(2), 50)
		tl.Scheduled(ms(3), 0, 0)
		it.Output(tl, ms(5), 1)
		it.Output(tl, ms(7), 4)
	}, 5},
}

// The children of an n > 1 request made at its arrival, before the prompt
// length is known, each failing at another stage of its life and finishing
// with each last (the others before it in both orders): each child gives
// one FinishedRequest, and exactly one of them, the last to finish, carries
// the parent's n and the most tokens a child generated.
func TestChildrenFailingAtEveryStage(t *testing.T) {
	stages := childStages
	n := len(stages)
	for _, order := range finishOrders(n) {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			children := stats.NewTimelines(stats.Request{Arrival: t0, N: int64(n)})
			if len(children) != n {
				t.Fatalf("NewTimelines(N %d, prompt not known yet) = %d children (%v), want %d", n, len(children), children[0].Err(), n)
			}
			var it stats.Iteration
			for i, c := range children {
				stages[i].drive(c, &it)
			}
			for k, i := range order {
				it.Finish(children[i], ms(int64(10+k)), stats.FinishError)
			}
			if r := it.Refused(); r.Total() != 0 {
				t.Fatalf("refused %d events: %v", r.Total(), r.Err())
			}
			checkParentOnce(t, it.Finished, int64(n), 5)
			for k, f := range it.Finished {
				i := order[k]
				if f.GenerationTokens != stages[i].gen || f.Reason != stats.FinishError {
					t.Errorf("child %q: %+v", stages[i].name, f)
				}
				if i < 3 && f.PromptTokens != map[int]int64{0: 0, 1: 0, 2: 50}[i] {
					t.Errorf("child %q: PromptTokens = %d", stages[i].name, f.PromptTokens)
				}
			}
		})
	}
}

// finishOrders returns orders of 0..n-1 in which each index finishes last,
// the others before it ascending, then descending.
func finishOrders(n int) [][]int {
	var out [][]int
	for last := range n {
		var up, down []int
		for i := range n {
			if i != last {
				up = append(up, i)
				down = append([]int{i}, down...)
			}
		}
		out = append(out, append(up, last), append(down, last))
	}
	return out
}
