package stats_test

import (
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// The children of a request that all fail before its tokenization end the
// parent once, with n and a maximum of 0 tokens.
func TestChildrenFailingBeforeTokenization(t *testing.T) {
	children := stats.NewTimelines(stats.Request{Arrival: t0, N: 3})
	if len(children) != 3 {
		t.Fatalf("NewTimelines(N 3, prompt not known yet) = %d children (%v), want 3", len(children), children[0].Err())
	}
	var it stats.Iteration
	for i, c := range children {
		c.Queued(ms(1))
		it.Finish(c, ms(int64(5+i)), []stats.FinishReason{stats.FinishError, stats.FinishAbort, stats.FinishError}[i])
	}
	if r := it.Refused(); r.Total() != 0 {
		t.Fatalf("refused %d events: %v", r.Total(), r.Err())
	}
	checkParentOnce(t, it.Finished, 3, 0)
	for _, f := range it.Finished {
		if f.PromptTokens != 0 || f.PrefillComputedTokens != 0 || f.GenerationTokens != 0 || !near(f.QueueTime, 0) {
			t.Errorf("child finished before its tokenization: %+v", f)
		}
	}
}

// checkParentOnce checks that finished holds every child of an n-child
// request, the last one alone reporting the parent.
func checkParentOnce(t *testing.T, finished []stats.FinishedRequest, n, maxGen int64) {
	t.Helper()
	if int64(len(finished)) != n {
		t.Fatalf("%d children finished, want %d", len(finished), n)
	}
	for k, f := range finished {
		if err := f.Validate(); err != nil {
			t.Errorf("child %d: %v", k, err)
		}
		gotN, gotMax, observe := f.Parent()
		if last := k == len(finished)-1; observe != last {
			t.Errorf("finish %d of %d reports the parent: %v", k+1, n, observe)
		} else if last && (gotN != n || gotMax != maxGen) {
			t.Errorf("the parent's n %d, max generation %d; want %d, %d", gotN, gotMax, n, maxGen)
		}
	}
}
