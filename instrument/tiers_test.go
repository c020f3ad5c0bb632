package instrument_test

// Tests of the families of newer vLLM versions: cached prompt tokens by tier,
// preemptions per finished request, the MFU counters, KV fetch stages and
// late NIXL notifications, read through package testutil.

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// newReaderRecorder returns a testutil.Reader and a Recorder on its provider.
func newReaderRecorder(t *testing.T, opts ...instrument.Option) (*testutil.Reader, *instrument.Recorder) {
	t.Helper()
	r := testutil.New(t)
	base := []instrument.Option{instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model),
		collectErrors(t).Option()}
	rec, err := instrument.NewRecorder(append(base, opts...)...)
	if err != nil {
		t.Fatalf("NewRecorder: %v", err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return r, rec
}

var engine0 = []string{"model_name", model, "engine", "0"}

func withLabels(extra ...string) []string { return append(slices.Clone(engine0), extra...) }

// tierValues returns vllm:prompt_tokens_cached_by_source of engine 0 in the
// order of stats.Tiers().
func tierValues(r *testutil.Reader) []float64 {
	var out []float64
	for _, tier := range stats.Tiers() {
		out = append(out, r.Value("vllm:prompt_tokens_cached_by_source_total", withLabels("source", tier.String())...))
	}
	return out
}

// The tiers of each request's scheduling reach the counters at its first
// output, and always sum to vllm:prompt_tokens_cached.
func TestCachedByTier(t *testing.T) {
	r, rec := newReaderRecorder(t)
	if got := tierValues(r); !slices.Equal(got, []float64{0, 0, 0, 0, 0}) {
		t.Fatalf("at start-up, by tier = %v, want five zeros", got)
	}
	e, _ := rec.Engine(0)
	start := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	var it stats.Iteration
	for _, c := range []stats.Cached{
		{Local: 64, External: 900, ExternalTiers: stats.ExternalTiers{P2P: 900}}, // P/D decode
		{Local: 32, External: 200, ExternalTiers: stats.ExternalTiers{Host: 120, Disk: 50}},
		{Local: 16, External: 10}, // an engine that does not name tiers
	} {
		tl := stats.NewTimeline(stats.Request{Arrival: start, PromptTokens: 1000})
		if err := tl.Err(); err != nil {
			t.Fatal(err)
		}
		if err := eventtest.Err(tl.Refused, func() { tl.Queued(start) }); err != nil {
			t.Fatal(err)
		}
		if err := eventtest.Err(tl.Refused, func() { tl.ScheduledWith(start.Add(time.Millisecond), c) }); err != nil {
			t.Fatal(err)
		}
		o, err := tl.Output(start.Add(time.Second), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := it.AddOutput(o); err != nil {
			t.Fatal(err)
		}
	}
	e.RecordIteration(t.Context(), &it)
	// device = 64+32+16; host 120; p2p 900; disk 50; unspecified = 30 + 10.
	want := []float64{112, 120, 900, 50, 40}
	if got := tierValues(r); !slices.Equal(got, want) {
		t.Errorf("by tier = %v, want %v", got, want)
	}
	if got := r.Value("vllm:prompt_tokens_cached_total", engine0...); got != 112+120+900+50+40 {
		t.Errorf("vllm:prompt_tokens_cached_total = %v, want the sum over tiers %v", got, 112+120+900+50+40)
	}

	// Tiers that exceed the external tokens are refused, and nothing is recorded.
	bad := stats.Iteration{PromptTokens: stats.PromptTokens{ExternalKVTransfer: 5, ExternalTiers: stats.ExternalTiers{P2P: 6}}}
	if err := instrument.RecordIterationErr(e, t.Context(), &bad); !errors.Is(err, stats.ErrTiersExceedExternal) {
		t.Errorf("RecordIteration with tiers over external = %v, want ErrTiersExceedExternal", err)
	}
	if got := tierValues(r); !slices.Equal(got, want) {
		t.Errorf("after a refused iteration, by tier = %v, want %v", got, want)
	}
}

// vllm:request_num_preemptions is observed for every finished request, 0
// included, with vLLM's buckets.
func TestRequestNumPreemptions(t *testing.T) {
	r, rec := newReaderRecorder(t)
	e, _ := rec.Engine(0)
	it := stats.Iteration{}
	for _, n := range []int64{0, 0, 1, 3, 7, 25} {
		if err := it.AddFinished(stats.FinishedRequest{Reason: stats.FinishStop, Preemptions: n}); err != nil {
			t.Fatal(err)
		}
	}
	e.RecordIteration(t.Context(), &it)
	e.RecordFinished(t.Context(), &stats.FinishedRequest{Reason: stats.FinishAbort})
	h := r.Histogram("vllm:request_num_preemptions", engine0...)
	if want := []float64{1, 2, 3, 4, 5, 10, 20}; !slices.Equal(h.Bounds, want) {
		t.Errorf("bounds = %v, want %v", h.Bounds, want)
	}
	// le=1 holds 0, 0, 1 and the abort's 0; then 3, 7 (le=10) and 25 (+Inf).
	if want := []uint64{4, 0, 1, 0, 0, 1, 0, 1}; h.Count != 7 || h.Sum != 36 || !slices.Equal(h.Counts, want) {
		t.Errorf("histogram = %+v, want count 7, sum 36, counts %v", h, want)
	}

	if err := instrument.RecordFinishedErr(e, t.Context(), &stats.FinishedRequest{Preemptions: -1}); !errors.Is(err, stats.ErrNegative) {
		t.Errorf("negative preemptions: %v, want ErrNegative", err)
	}
	big := stats.FinishedRequest{Preemptions: math.MaxInt64 - 10}
	if err := instrument.RecordFinishedErr(e, t.Context(), &big); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("a preemption total past MaxInt64: %v, want ErrOverflow", err)
	}
	if got := r.Histogram("vllm:request_num_preemptions", engine0...); got.Count != 7 {
		t.Errorf("refused requests were observed: count %d, want 7", got.Count)
	}
}

// The MFU counters exist at zero from start-up and add each step's float
// estimates; the external prefix cache counters exist without a connector.
func TestMFUCountersAndExternalPrefixCache(t *testing.T) {
	r, rec := newReaderRecorder(t)
	families := []string{"vllm:estimated_flops_per_gpu_total", "vllm:estimated_read_bytes_per_gpu_total",
		"vllm:estimated_write_bytes_per_gpu_total", "vllm:external_prefix_cache_queries_total",
		"vllm:external_prefix_cache_hits_total"}
	for _, f := range families {
		if got := r.Value(f, engine0...); got != 0 {
			t.Errorf("%s = %v at start-up, want 0", f, got)
		}
	}
	e, _ := rec.Engine(0)
	step := stats.Scheduler{Perf: &stats.PerfEstimate{FLOPs: 2 * 8e9 * 4096, ReadBytes: 1.6e10 + 0.5, WriteBytes: 5.12e8}}
	for range 3 {
		e.RecordScheduler(t.Context(), &step)
	}
	for i, want := range []float64{3 * 2 * 8e9 * 4096, 3 * (1.6e10 + 0.5), 3 * 5.12e8} {
		if got := r.Value(families[i], engine0...); got != want {
			t.Errorf("%s = %v, want %v", families[i], got, want)
		}
	}
	bad := stats.Scheduler{Running: 5, Perf: &stats.PerfEstimate{FLOPs: math.Inf(1)}}
	if err := instrument.RecordSchedulerErr(e, t.Context(), &bad); !errors.Is(err, stats.ErrNotFinite) {
		t.Errorf("infinite FLOPs: %v, want ErrNotFinite", err)
	}
	if got := r.Value("vllm:num_requests_running", engine0...); got != 0 {
		t.Errorf("a refused step set running to %v", got)
	}
}

func TestKVFetchByStage(t *testing.T) {
	stages := func(r *testutil.Reader) []float64 {
		var out []float64
		for _, s := range stats.FetchStages() {
			out = append(out, r.Value("vllm:num_requests_kv_fetch_by_stage", withLabels("stage", s.String())...))
		}
		return out
	}
	// A KV consumer has the three stages at zero from start-up.
	r, rec := newReaderRecorder(t, instrument.WithKVConsumer())
	if got := stages(r); !slices.Equal(got, []float64{0, 0, 0}) {
		t.Errorf("at start-up = %v, want zeros", got)
	}
	e, _ := rec.Engine(0)
	for _, k := range []stats.KVFetch{{WaitingToStart: 2, InProgress: 3, CompletedWaiting: 1}, {InProgress: 1}} {
		e.RecordScheduler(t.Context(), &stats.Scheduler{KVFetch: &k})
	}
	if got := stages(r); !slices.Equal(got, []float64{0, 1, 0}) {
		t.Errorf("after two steps = %v, want the last step's [0 1 0]", got)
	}

	// Without the option the family is absent until a step reports it.
	r2, rec2 := newReaderRecorder(t)
	if slices.Contains(r2.Families(), "vllm:num_requests_kv_fetch_by_stage") {
		t.Error("vllm:num_requests_kv_fetch_by_stage present without WithKVConsumer")
	}
	e2, _ := rec2.Engine(0)
	e2.RecordScheduler(t.Context(), &stats.Scheduler{KVFetch: &stats.KVFetch{CompletedWaiting: 4}})
	if got := stages(r2); !slices.Equal(got, []float64{0, 0, 4}) {
		t.Errorf("after a reporting step = %v, want [0 0 4]", got)
	}
}

func TestNIXLNotificationsAfterExpiry(t *testing.T) {
	const family = "vllm:nixl_num_notifications_after_expiry_total"
	r, rec := newReaderRecorder(t)
	if slices.Contains(r.Families(), family) {
		t.Errorf("%s present without a KV connector", family)
	}
	e, _ := rec.Engine(0)
	for range 2 {
		e.RecordScheduler(t.Context(), &stats.Scheduler{KVTransfer: &stats.KVTransfer{NotificationsAfterExpiry: 3}})
	}
	if got := r.Value(family, engine0...); got != 6 {
		t.Errorf("%s = %v, want 6", family, got)
	}
	r2, _ := newReaderRecorder(t, instrument.WithKVConnector())
	if got := r2.Value(family, engine0...); got != 0 {
		t.Errorf("with a KV connector, %s = %v at start-up, want 0", family, got)
	}
}
