package instrument_test

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// gauges are the scheduler gauges of engine 0, and its prefix cache
// counters.
type gauges struct {
	running, waiting, capacity, deferred, kvUsage, offloaded, queries, hits float64
}

func readGauges(r *testutil.Reader) gauges {
	return gauges{
		running:   r.Value("vllm:num_requests_running", withLabels()...),
		waiting:   r.Value("vllm:num_requests_waiting", withLabels()...),
		capacity:  r.Value("vllm:num_requests_waiting_by_reason", withLabels("reason", instrument.WaitingCapacity)...),
		deferred:  r.Value("vllm:num_requests_waiting_by_reason", withLabels("reason", instrument.WaitingDeferred)...),
		kvUsage:   r.Value("vllm:kv_cache_usage_perc", withLabels()...),
		offloaded: r.Value("vllm:engine_sleep_state", withLabels("sleep_state", "weights_offloaded")...),
		queries:   r.Value("vllm:prefix_cache_queries_total", withLabels()...),
		hits:      r.Value("vllm:prefix_cache_hits_total", withLabels()...),
	}
}

// Each gauge set on its own changes it alone, and a prefix cache lookup
// adds to the counters alone: an engine without a step changes what changed,
// where a RecordScheduler to change one gauge sets every other to zero.
func TestSetOneGauge(t *testing.T) {
	r, rec := newReaderRecorder(t)
	e, _ := rec.Engine(0)
	if got, want := readGauges(r), (gauges{}); got != want {
		t.Fatalf("at start-up %+v, want every series at zero", got)
	}
	e.RecordScheduler(t.Context(), &stats.Scheduler{Running: 3, WaitingCapacity: 2, KVCacheUsage: 0.5,
		PrefixCache: stats.CacheQueries{Queries: 10, Hits: 4}})
	want := gauges{running: 3, waiting: 2, capacity: 2, kvUsage: 0.5, queries: 10, hits: 4}
	for _, step := range []struct {
		name   string
		change func()
		want   func(*gauges)
	}{
		{"SetKVCacheUsage", func() { e.SetKVCacheUsage(0.75) }, func(g *gauges) { g.kvUsage = 0.75 }},
		{"SetRunning", func() { e.SetRunning(5) }, func(g *gauges) { g.running = 5 }},
		{"SetWaiting", func() { e.SetWaiting(1, 2) }, func(g *gauges) { g.waiting, g.capacity, g.deferred = 3, 1, 2 }},
		{"SetSleepState", func() { e.SetSleepState(stats.WeightsOffloaded) }, func(g *gauges) { g.offloaded = 1 }},
		{"AddPrefixCache", func() { e.AddPrefixCache(stats.CacheQueries{Queries: 6, Hits: 6}) }, func(g *gauges) { g.queries, g.hits = 16, 10 }},
		{"SetRunning 0", func() { e.SetRunning(0) }, func(g *gauges) { g.running = 0 }},
	} {
		step.change()
		step.want(&want)
		if got := readGauges(r); got != want {
			t.Errorf("after %s: %+v, want %+v", step.name, got, want)
		}
	}
	if got := r.Value("vllm:engine_sleep_state", withLabels("sleep_state", "awake")...); got != 0 {
		t.Errorf("awake = %v after SetSleepState(WeightsOffloaded), want 0", got)
	}
}

// A bad value is refused whole, by the rules of stats.Scheduler.Validate:
// nothing changes, and the refusal is counted (kind scheduler) and reported
// with the method and the field.
func TestSetOneGaugeRefused(t *testing.T) {
	testlog.StdLogger(t) // what a nil Engine refuses goes to otel.Handle, which logs it: to the test's log
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	e.RecordScheduler(t.Context(), &stats.Scheduler{Running: 3, WaitingCapacity: 2, KVCacheUsage: 0.5,
		PrefixCache: stats.CacheQueries{Queries: 10, Hits: 4}})
	e.AddPrefixCache(stats.CacheQueries{Queries: instrument.MaxTotal - 10})
	before := readGauges(r)
	for _, c := range []struct {
		call    func()
		mention []string
	}{
		{func() { e.SetRunning(-1) }, []string{"SetRunning", "Running = -1"}},
		{func() { e.SetWaiting(math.MaxInt64, 1) }, []string{"SetWaiting", "WaitingDeferred"}},
		{func() { e.SetWaiting(-2, 0) }, []string{"SetWaiting", "WaitingCapacity = -2"}},
		{func() { e.SetKVCacheUsage(math.NaN()) }, []string{"SetKVCacheUsage", "KVCacheUsage"}},
		{func() { e.SetKVCacheUsage(1.5) }, []string{"SetKVCacheUsage", "want 0 to 1"}},
		{func() { e.SetSleepState(stats.SleepState(9)) }, []string{"SetSleepState", "unknown sleep state"}},
		{func() { e.AddPrefixCache(stats.CacheQueries{Queries: 1, Hits: 2}) }, []string{"AddPrefixCache", "more than Queries"}},
		{func() { e.AddPrefixCache(stats.CacheQueries{Queries: -1}) }, []string{"AddPrefixCache", "Queries = -1"}},
		{func() { e.AddPrefixCache(stats.CacheQueries{Queries: 1}) }, []string{"AddPrefixCache", "overflows"}},
	} {
		c.call()
		got := errs.Take()
		if len(got) != 1 {
			t.Fatalf("%v: %d reports, want 1", c.mention, len(got))
		}
		for _, m := range c.mention {
			if !strings.Contains(got[0].Error(), m) {
				t.Errorf("report %q does not say %q", got[0], m)
			}
		}
	}
	if after := readGauges(r); after != before {
		t.Errorf("refused values changed the series: %+v, was %+v", after, before)
	}
	if got := r.Value(invalidFamily, withLabels("kind", "scheduler")...); got != 9 {
		t.Errorf("invalid scheduler events %v, want 9", got)
	}
	var none *instrument.Engine
	none.SetRunning(1) // reported to otel.Handle, no panic
	none.AddPrefixCache(stats.CacheQueries{})
}

// RecordSchedulerCounts records what a step adds and the optional states it
// carries, and leaves the gauges; a gauge set in it is refused with the
// method that sets it.
func TestRecordSchedulerCounts(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option(), instrument.WithSpecDecoding(2), instrument.WithKVConnector())
	e, _ := rec.Engine(0)
	e.SetRunning(4)
	e.SetKVCacheUsage(0.25)
	e.RecordSchedulerCounts(t.Context(), &stats.Scheduler{
		PrefixCache:          stats.CacheQueries{Queries: 8, Hits: 3},
		ConnectorPrefixCache: &stats.CacheQueries{Queries: 5, Hits: 5},
		SpecDecoding:         &stats.SpecDecoding{Drafts: 1, DraftTokens: 2, AcceptedTokens: 1, AcceptedPerPosition: []int64{1, 0}},
		KVTransfer:           &stats.KVTransfer{XferTime: []float64{0.02}, BytesTransferred: []int64{4096}},
		LoRA:                 &stats.LoRA{MaxLoRA: 2, Running: []string{"sql"}},
	})
	if got := readGauges(r); got != (gauges{running: 4, kvUsage: 0.25, queries: 8, hits: 3}) {
		t.Errorf("after RecordSchedulerCounts: %+v", got)
	}
	for family, want := range map[string]float64{
		"vllm:external_prefix_cache_queries_total": 5, "vllm:spec_decode_num_drafts_total": 1,
		"vllm:spec_decode_num_accepted_tokens_total": 1,
	} {
		if got := r.Value(family, withLabels()...); got != want {
			t.Errorf("%s = %v, want %v", family, got, want)
		}
	}
	if h := r.Histogram("vllm:nixl_xfer_time_seconds", withLabels()...); h.Count != 1 {
		t.Errorf("KV transfer times: %d, want 1", h.Count)
	}
	if got := r.Value("vllm:lora_requests_info", "max_lora", "2", "waiting_lora_adapters", "", "running_lora_adapters", "sql"); got == 0 {
		t.Error("the LoRA state was not set")
	}
	for _, s := range []stats.Scheduler{{Running: 1}, {WaitingDeferred: 2}, {KVCacheUsage: 0.5}, {SleepState: stats.DiscardAll}} {
		e.RecordSchedulerCounts(t.Context(), &s)
	}
	e.RecordSchedulerCounts(t.Context(), nil)
	got := errs.Take()
	if len(got) != 5 || !errors.Is(got[4], instrument.ErrNilStats) {
		t.Fatalf("reports %v, want 4 gauges and a nil Scheduler", got)
	}
	for i, method := range []string{"SetRunning", "SetWaiting", "SetKVCacheUsage", "SetSleepState"} {
		if !strings.Contains(got[i].Error(), method) || !errors.Is(got[i], stats.ErrOutOfRange) {
			t.Errorf("report %q does not name %s", got[i], method)
		}
	}
	if got := readGauges(r); got.running != 4 || got.kvUsage != 0.25 || got.queries != 8 {
		t.Errorf("refused calls changed the series: %+v", got)
	}
}

// Many goroutines add prefix cache lookups and set gauges at once: every
// lookup counts once (run with -race).
func TestSetOneGaugeConcurrent(t *testing.T) {
	r, rec := newReaderRecorder(t)
	e, _ := rec.Engine(0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				e.AddPrefixCache(stats.CacheQueries{Queries: 3, Hits: 1})
				e.SetRunning(int64(g*100 + i))
				e.SetKVCacheUsage(float64(i) / 100)
			}
		})
	}
	wg.Wait()
	if got := readGauges(r); got.queries != 2400 || got.hits != 800 {
		t.Errorf("prefix cache %v queries, %v hits; want 2400, 800", got.queries, got.hits)
	}
}

// Setting a gauge or adding a lookup allocates nothing.
func TestSetOneGaugeDoesNotAllocate(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	counts := stats.Scheduler{PrefixCache: stats.CacheQueries{Queries: 4, Hits: 1}}
	for name, call := range map[string]func(){
		"SetRunning":            func() { e.SetRunning(3) },
		"SetWaiting":            func() { e.SetWaiting(2, 1) },
		"SetKVCacheUsage":       func() { e.SetKVCacheUsage(0.5) },
		"SetSleepState":         func() { e.SetSleepState(stats.Awake) },
		"AddPrefixCache":        func() { e.AddPrefixCache(stats.CacheQueries{Queries: 4, Hits: 1}) },
		"RecordSchedulerCounts": func() { e.RecordSchedulerCounts(t.Context(), &counts) },
	} {
		t.Run(name, func(t *testing.T) { checkNoAllocs(t, func() error { call(); return h.refused() }) })
	}
}
