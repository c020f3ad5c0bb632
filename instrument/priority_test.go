package instrument_test

import (
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// vllmPriorityFamilies are the families that carry the priority label, as
// tests/v1/metrics/test_priority_labels.py lists them (PR #58078's branch
// @04dc4606); vllm:request_num_preemptions is in that list too and joins
// this one with the family.
var vllmPriorityFamilies = []string{
	"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
	"vllm:request_inference_time_seconds", "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens",
	"vllm:request_generation_tokens", "vllm:request_prefill_kv_computed_tokens",
	"vllm:request_time_per_output_token_seconds", "vllm:request_params_max_tokens", "vllm:request_num_preemptions",
	"vllm:request_success_total",
	"vllm:time_to_first_token_seconds",
}

// priorityRecorder returns a Recorder on a testutil.Reader.
func priorityRecorder(t *testing.T, opts ...instrument.Option) (*testutil.Reader, *instrument.Recorder) {
	t.Helper()
	r := testutil.New(t)
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(r.Provider()),
		instrument.WithModelName(model), instrument.WithMaxModelLen(4096), collectErrors(t).Option()}, opts...)...)
	if err != nil {
		t.Fatalf("NewRecorder: %v", err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return r, rec
}

// finishedWithPriority drives one request of the given priority to its
// finish on engine 0: TTFT 0.25 s, two tokens.
func finishedWithPriority(t *testing.T, rec *instrument.Recorder, priority int) {
	t.Helper()
	tl := stats.NewTimeline(stats.Request{Arrival: ms(0), PromptTokens: 100, MaxTokens: 10, Priority: priority})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Queued(ms(10)) }); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(20), 0, 0) }); err != nil {
		t.Fatal(err)
	}
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	stepAt(t, 250).out(tl, 1).record(e)
	stepAt(t, 300).out(tl, 1).finish(tl, stats.FinishStop).record(e)
}

func TestPriorityFamiliesMatchVLLM(t *testing.T) {
	var got []string
	for _, f := range views.Families() {
		if f.Instrument.Priority {
			got = append(got, f.Name)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(vllmPriorityFamilies))
	if !slices.Equal(got, want) {
		t.Errorf("families with the priority label: %v\nwant %v", got, want)
	}
}

func TestPriorityScheduling(t *testing.T) {
	t.Parallel()
	r, rec := priorityRecorder(t, instrument.WithPriorityScheduling(), instrument.WithEngines(0, 1))
	engine0 := engineLabels("0")

	// From start-up: the policy gauge, and request_success for every reason
	// and priority bucket at zero; no series without the priority label.
	for _, rank := range []string{"0", "1"} {
		labels := engineLabels(rank)
		if v := r.Value("vllm:scheduler_policy_info", append(labels, "policy", "priority")...); v != 1 {
			t.Errorf("engine %s: policy priority = %v, want 1", rank, v)
		}
		if v := r.Value("vllm:scheduler_policy_info", append(labels, "policy", "fcfs")...); v != 0 {
			t.Errorf("engine %s: policy fcfs = %v, want 0", rank, v)
		}
		for _, reason := range stats.FinishReasons() {
			for _, b := range stats.PriorityBuckets() {
				if v := r.Value("vllm:request_success_total", append(labels, "finished_reason", reason.String(), "priority", b.String())...); v != 0 {
					t.Errorf("request_success{%s,%s} = %v at start-up", reason, b, v)
				}
			}
		}
	}

	finishedWithPriority(t, rec, 7)  // ">1"
	finishedWithPriority(t, rec, -1) // "-1"
	for _, b := range []string{">1", "-1"} {
		labels := append(engineLabels("0"), "priority", b)
		if v := r.Value("vllm:request_success_total", append(labels, "finished_reason", "stop")...); v != 1 {
			t.Errorf("request_success{stop,%s} = %v, want 1", b, v)
		}
		for _, name := range vllmPriorityFamilies {
			if name == "vllm:request_success_total" {
				continue
			}
			if h := r.Histogram(name, labels...); h.Count != 1 {
				t.Errorf("%s{priority=%q} has %d observations, want 1", name, b, h.Count)
			}
		}
		// TTFT, observed at the finish: arrival to first output.
		if h := r.Histogram("vllm:time_to_first_token_seconds", labels...); !approx(h.Sum, 0.25) {
			t.Errorf("TTFT{priority=%q} sum = %v, want 0.25", b, h.Sum)
		}
	}
	// The families vLLM leaves unlabelled, and the raw priority.
	if h := r.Histogram("vllm:request_params_n", engine0...); h.Count != 2 {
		t.Errorf("request_params_n has %d observations without a priority label, want 2", h.Count)
	}
	if h := r.Histogram("vllm:inter_token_latency_seconds", engine0...); h.Count != 2 {
		t.Errorf("inter_token_latency has %d observations without a priority label, want 2", h.Count)
	}
	p := r.Histogram("vllm:request_priority", engine0...)
	if p.Count != 2 || p.Sum != 6 {
		t.Errorf("request_priority has count %d and sum %v, want 2 and 6 (7 + -1)", p.Count, p.Sum)
	}
	// 7 lies in (2, 10], -1 in (-2, -1].
	wantCounts := make([]uint64, len(p.Bounds)+1)
	wantCounts[slices.Index(p.Bounds, 10)] = 1
	wantCounts[slices.Index(p.Bounds, -1)] = 1
	if !slices.Equal(p.Counts, wantCounts) {
		t.Errorf("request_priority buckets %v over %v, want %v", p.Counts, p.Bounds, wantCounts)
	}
}

// With priority scheduling an iteration's TTFT values are not observed: the
// finish observes each request's, with its priority.
func TestPriorityTTFTNotPerIteration(t *testing.T) {
	r, rec := priorityRecorder(t, instrument.WithPriorityScheduling())
	rec.RecordIteration(t.Context(), 0, &stats.Iteration{GenerationTokens: 1, TTFT: []float64{0.5}})
	if slices.Contains(r.Families(), "vllm:time_to_first_token_seconds") {
		t.Errorf("an iteration's TTFT was observed under priority scheduling")
	}
	// A request finished without an output has no TTFT; it has a priority.
	rec.RecordFinished(t.Context(), 0, &stats.FinishedRequest{Reason: stats.FinishAbort, Priority: -4})
	if slices.Contains(r.Families(), "vllm:time_to_first_token_seconds") {
		t.Errorf("a request without output observed a TTFT")
	}
	if h := r.Histogram("vllm:request_priority", engineLabels("0")...); h.Count != 1 || h.Sum != -4 {
		t.Errorf("request_priority = %d observations, sum %v; want 1 and -4", h.Count, h.Sum)
	}
}

// FCFS, the default: no family carries the priority label, there is no
// vllm:request_priority, and the policy gauge marks fcfs.
func TestFCFSHasNoPriority(t *testing.T) {
	r, rec := priorityRecorder(t)
	labels := engineLabels("0")
	if v := r.Value("vllm:scheduler_policy_info", append(labels, "policy", "fcfs")...); v != 1 {
		t.Errorf("policy fcfs = %v, want 1", v)
	}
	if v := r.Value("vllm:scheduler_policy_info", append(labels, "policy", "priority")...); v != 0 {
		t.Errorf("policy priority = %v, want 0", v)
	}
	finishedWithPriority(t, rec, 7)
	if v := r.Value("vllm:request_success_total", append(labels, "finished_reason", "stop")...); v != 1 {
		t.Errorf("request_success{stop} = %v, want 1", v)
	}
	for _, name := range vllmPriorityFamilies[:len(vllmPriorityFamilies)-2] { // the histograms but TTFT
		if h := r.Histogram(name, labels...); h.Count != 1 {
			t.Errorf("%s has %d observations without a priority label, want 1", name, h.Count)
		}
	}
	if h := r.Histogram("vllm:time_to_first_token_seconds", labels...); h.Count != 1 {
		t.Errorf("TTFT has %d observations, want 1 (from the iteration)", h.Count)
	}
	if slices.Contains(r.Families(), "vllm:request_priority") {
		t.Errorf("vllm:request_priority exists without priority scheduling")
	}
}

// Recording under priority scheduling and with a KV offload tier allocates
// nothing either.
func TestRecordWithPriorityAndOffloadDoesNotAllocate(t *testing.T) {
	h := newHarness(t, instrument.WithPriorityScheduling(), instrument.WithKVOffloadCPU())
	e := h.engine(0)
	ctx := t.Context()
	f := validFinished()
	f.Priority = -7
	f.TimeToFirstToken = 0.2
	it := validIteration()
	it.Finished = []stats.FinishedRequest{f, validFinished()}
	s := stats.Scheduler{KVOffload: &stats.KVOffload{
		Loads:  []stats.KVOffloadTransfer{{Bytes: 8 << 20, Seconds: 0.002}},
		Stores: []stats.KVOffloadTransfer{{Bytes: 16 << 20, Seconds: 0.004}}, LookupSyncDelay: []float64{1e-4},
		LookupAsyncDelay: []float64{0.02}, AllocationFailures: 1,
		CPU: &stats.KVOffloadCPU{CacheUsage: 0.4, WriteUsage: 0.3, ReadUsage: 0.1, AllocationChunks: []int64{16}},
	}}
	for _, c := range []struct {
		name   string
		record func() error
	}{
		{"RecordIteration", func() error { step := it; e.RecordIteration(ctx, &step); return h.refused() }},
		{"RecordFinished", func() error { e.RecordFinished(ctx, &f); return h.refused() }},
		{"RecordScheduler", func() error { e.RecordScheduler(ctx, &s); return h.refused() }},
	} {
		if err := c.record(); err != nil {
			t.Fatal(err)
		}
		var err error
		if allocs := testing.AllocsPerRun(100, func() { err = c.record() }); allocs != 0 || err != nil {
			t.Errorf("%s allocates %v times per call (err %v), want 0", c.name, allocs, err)
		}
	}
}
