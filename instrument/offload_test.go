package instrument_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// offloadCounters and offloadGauges are vLLM's KV offloading counters and
// CPU tier gauges, as exposed (kv_connector/v1/offloading/metrics.py).
var (
	offloadCounters = []string{"vllm:kv_offload_load_bytes_total", "vllm:kv_offload_load_time_total",
		"vllm:kv_offload_store_bytes_total", "vllm:kv_offload_store_time_total", "vllm:kv_offload_allocation_failure_total"}
	offloadGauges = []string{"vllm:kv_offload_cpu_cache_usage_perc", "vllm:kv_offload_cpu_cache_write_usage_perc",
		"vllm:kv_offload_cpu_cache_read_usage_perc"}
)

func offloadStep() *stats.Scheduler {
	return &stats.Scheduler{KVOffload: &stats.KVOffload{
		Loads:            []stats.KVOffloadTransfer{{Bytes: 8e6, Seconds: 0.002}, {Bytes: 45e6, Seconds: 0.01}},
		Stores:           []stats.KVOffloadTransfer{{Bytes: 250e6, Seconds: 0.05}},
		LookupSyncDelay:  []float64{2e-5, 0.003},
		LookupAsyncDelay: []float64{0.2}, AllocationFailures: 3,
		CPU: &stats.KVOffloadCPU{CacheUsage: 0.4, WriteUsage: 0.25, ReadUsage: 0.15, AllocationChunks: []int64{3, 5000}},
	}}
}

func TestKVOffload(t *testing.T) {
	r, rec := priorityRecorder(t, instrument.WithKVOffloadCPU())
	labels := engineLabels("0")
	for _, name := range slices.Concat(offloadCounters, offloadGauges) {
		if v := r.Value(name, labels...); v != 0 {
			t.Errorf("%s = %v at start-up, want 0", name, v)
		}
	}
	for range 2 {
		rec.RecordScheduler(t.Context(), 0, offloadStep())
	}
	for name, want := range map[string]float64{
		"vllm:kv_offload_load_bytes_total": 2 * 53e6, "vllm:kv_offload_load_time_total": 2 * 0.012,
		"vllm:kv_offload_store_bytes_total": 2 * 250e6, "vllm:kv_offload_store_time_total": 2 * 0.05,
		"vllm:kv_offload_allocation_failure_total": 6, "vllm:kv_offload_cpu_cache_usage_perc": 0.4,
		"vllm:kv_offload_cpu_cache_write_usage_perc": 0.25, "vllm:kv_offload_cpu_cache_read_usage_perc": 0.15,
	} {
		if v := r.Value(name, labels...); !approx(v, want) {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	for _, c := range []struct {
		name   string
		count  uint64
		sum    float64
		bucket float64 // the upper bound of the first observation's bucket
	}{
		{"vllm:kv_offload_load_size", 4, 2 * 53e6, 10e6},
		{"vllm:kv_offload_store_size", 2, 2 * 250e6, math.Inf(1)},
		{"vllm:kv_offload_lookup_sync_delay_seconds", 4, 2 * 0.00302, 5e-5},
		{"vllm:kv_offload_lookup_async_delay_seconds", 2, 0.4, 0.5},
		{"vllm:kv_offload_cpu_allocation_size", 4, 2 * 5003, 4},
	} {
		h := r.Histogram(c.name, labels...)
		i := len(h.Bounds) // +Inf
		if !math.IsInf(c.bucket, 1) {
			i = slices.Index(h.Bounds, c.bucket)
		}
		if h.Count != c.count || !approx(h.Sum, c.sum) || i < 0 || h.Counts[i] == 0 {
			t.Errorf("%s: count %d, sum %v, counts %v over %v; want %d, %v and an observation in le=%v",
				c.name, h.Count, h.Sum, h.Counts, h.Bounds, c.count, c.sum, c.bucket)
		}
	}
}

// Without the option the counters appear with their first non-zero value
// and the CPU gauges with the first step that reports a CPU tier.
func TestKVOffloadNotConfigured(t *testing.T) {
	r, rec := priorityRecorder(t)
	has := func(name string) bool { return slices.Contains(r.Families(), name) }
	for _, name := range slices.Concat(offloadCounters, offloadGauges) {
		if has(name) {
			t.Errorf("%s exists without WithKVOffload and before any offloading", name)
		}
	}
	rec.RecordScheduler(t.Context(), 0, &stats.Scheduler{KVOffload: &stats.KVOffload{
		Loads: []stats.KVOffloadTransfer{{Bytes: 1e6, Seconds: 0.001}}}})
	for _, name := range offloadCounters {
		if want := name == "vllm:kv_offload_load_bytes_total" || name == "vllm:kv_offload_load_time_total"; has(name) != want {
			t.Errorf("%s present = %v after one load, want %v", name, has(name), want)
		}
	}
	rec.RecordScheduler(t.Context(), 0, &stats.Scheduler{KVOffload: &stats.KVOffload{CPU: &stats.KVOffloadCPU{}}})
	for _, name := range offloadGauges {
		if !has(name) {
			t.Errorf("%s missing after a step reported the CPU tier", name)
		}
	}
}

// A step whose offloaded bytes would take a total past MaxTotal is refused
// whole, like any other counter's.
func TestKVOffloadOverflow(t *testing.T) {
	r, rec := priorityRecorder(t, instrument.WithKVOffload())
	big := &stats.Scheduler{KVOffload: &stats.KVOffload{Stores: []stats.KVOffloadTransfer{{Bytes: instrument.MaxTotal - 10}}}}
	rec.RecordScheduler(t.Context(), 0, big)
	over := &stats.Scheduler{Running: 5, KVOffload: &stats.KVOffload{Stores: []stats.KVOffloadTransfer{{Bytes: 11}}}}
	if err := instrument.RecorderRecordSchedulerErr(rec, t.Context(), 0, over); !errors.Is(err, stats.ErrOverflow) {
		t.Fatalf("RecordScheduler = %v, want ErrOverflow", err)
	}
	if v := r.Value("vllm:num_requests_running", engineLabels("0")...); v != 0 {
		t.Errorf("the refused step set running to %v", v)
	}
}
