package stats_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// vLLM's bucket_priority, as its test parametrizes it (PR #58078's branch).
func TestBucketPriority(t *testing.T) {
	for _, c := range []struct {
		priority int
		want     string
	}{
		{-2, "<-1"}, {-1, "-1"}, {0, "0"}, {1, "1"}, {2, ">1"}, {1000, ">1"}, {-1000, "<-1"},
		{math.MaxInt, ">1"}, {math.MinInt, "<-1"},
	} {
		if got := stats.BucketPriority(c.priority).String(); got != c.want {
			t.Errorf("BucketPriority(%d) = %q, want %q", c.priority, got, c.want)
		}
	}
	var labels []string
	for i, b := range stats.PriorityBuckets() {
		if int(b) != i {
			t.Errorf("PriorityBuckets()[%d] = %d", i, b)
		}
		labels = append(labels, b.String())
	}
	if len(labels) != stats.NumPriorityBuckets {
		t.Errorf("PriorityBuckets() has %d values, want %d", len(labels), stats.NumPriorityBuckets)
	}
	if got := stats.PriorityBucket(stats.NumPriorityBuckets).String(); got != "unknown" {
		t.Errorf("an out-of-range bucket is %q, want unknown", got)
	}
}

// A Timeline passes the request's priority on and fills the time to first
// token that priority scheduling observes at the finish.
func TestTimelinePriorityAndTTFT(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tl := stats.NewTimeline(stats.Request{Arrival: start, PromptTokens: 10, Priority: -3})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	must := mustNil(t)
	tl.Queued(start.Add(10 * time.Millisecond))
	tl.Scheduled(start.Add(20*time.Millisecond), 0, 0)
	o, err := tl.Output(start.Add(250*time.Millisecond), 1)
	must(err)
	f, err := tl.Finish(start.Add(400*time.Millisecond), stats.FinishStop)
	must(err)
	if f.Priority != -3 || f.TimeToFirstToken != o.TTFT || f.TimeToFirstToken != 0.25 {
		t.Errorf("Finish gave priority %d, TTFT %v; want -3 and the first output's latency %v", f.Priority, f.TimeToFirstToken, o.TTFT)
	}
	must(f.Validate())

	// Without an output there is no time to first token.
	queued := stats.NewTimeline(stats.Request{Arrival: start, PromptTokens: 10, Priority: 2})
	must(queued.Err())
	f, err = queued.Finish(start.Add(time.Second), stats.FinishAbort)
	must(err)
	if f.TimeToFirstToken != 0 || f.Priority != 2 {
		t.Errorf("a request aborted before its output has TTFT %v, priority %d; want 0 and 2", f.TimeToFirstToken, f.Priority)
	}
}

func TestFinishedTimeToFirstTokenValidated(t *testing.T) {
	for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
		f := stats.FinishedRequest{TimeToFirstToken: v}
		var fe *stats.FieldError
		if err := f.Validate(); !errors.As(err, &fe) || fe.Field != "TimeToFirstToken" {
			t.Errorf("TimeToFirstToken %v: Validate() = %v, want an error naming TimeToFirstToken", v, err)
		}
	}
}
