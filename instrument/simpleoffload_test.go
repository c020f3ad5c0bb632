package instrument_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// simpleOffloadFamilies are the SimpleCPUOffloadConnector's counters and
// gauges, as exposed (vllm/v1/simple_kv_offload/metrics.py).
var simpleOffloadFamilies = []string{"vllm:simple_kv_offload_save_outcomes_total",
	"vllm:simple_kv_offload_load_blocks_total", "vllm:simple_kv_offload_used_blocks",
	"vllm:simple_kv_offload_pending_store_blocks"}

func simpleOffloadStep() *stats.Scheduler {
	return &stats.Scheduler{SimpleKVOffload: &stats.SimpleKVOffload{Stored: 4, DroppedCPUFull: 1, DroppedRequestGone: 2,
		SkippedInFlight: 3, LoadBlocksIssued: 32, LoadBlocksCompleted: 16, UsedBlocks: 48, PendingStoreBlocks: 8}}
}

// With WithSimpleKVOffload every outcome and phase is at zero from
// start-up, the info series carries the deployment, and steps add up.
func TestSimpleKVOffload(t *testing.T) {
	cfg := stats.SimpleKVOffloadConfig{Backend: "disk", PageCache: true, CapacityBlocks: 4096}
	r, rec := priorityRecorder(t, instrument.WithSimpleKVOffload(cfg))
	labels := engineLabels("0")
	for _, o := range stats.SaveOutcomes() {
		if v := r.Value("vllm:simple_kv_offload_save_outcomes_total", append(labels, "outcome", o.String())...); v != 0 {
			t.Errorf("outcome %s = %v at start-up, want 0", o, v)
		}
	}
	if v := r.Value("vllm:simple_kv_offload_info", append(labels, "backend", "disk", "page_cache", "true",
		"lazy_offload", "false", "capacity_blocks", "4096")...); v != 1 {
		t.Errorf("vllm:simple_kv_offload_info = %v, want 1", v)
	}
	for range 2 {
		rec.RecordScheduler(t.Context(), 0, simpleOffloadStep())
	}
	for _, c := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"vllm:simple_kv_offload_save_outcomes_total", []string{"outcome", "stored"}, 8},
		{"vllm:simple_kv_offload_save_outcomes_total", []string{"outcome", "dropped_cpu_full"}, 2},
		{"vllm:simple_kv_offload_save_outcomes_total", []string{"outcome", "dropped_request_gone"}, 4},
		{"vllm:simple_kv_offload_save_outcomes_total", []string{"outcome", "skipped_in_flight"}, 6},
		{"vllm:simple_kv_offload_save_outcomes_total", []string{"outcome", "skipped_already_cached"}, 0},
		{"vllm:simple_kv_offload_load_blocks_total", []string{"phase", "issued"}, 64},
		{"vllm:simple_kv_offload_load_blocks_total", []string{"phase", "completed"}, 32},
		{"vllm:simple_kv_offload_used_blocks", nil, 48},
		{"vllm:simple_kv_offload_pending_store_blocks", nil, 8},
	} {
		if v := r.Value(c.family, append(slices.Clone(labels), c.labels...)...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, v, c.want)
		}
	}
}

// Without the option the families appear with the first step that reports
// the connector, and that step is recorded; a negative count is refused.
func TestSimpleKVOffloadNotConfigured(t *testing.T) {
	r := testutil.New(t)
	errs := &testutil.Errors{}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model), errs.Option())
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	for _, name := range simpleOffloadFamilies {
		if slices.Contains(r.Families(), name) {
			t.Errorf("%s exists without WithSimpleKVOffload and before any step", name)
		}
	}
	rec.RecordScheduler(t.Context(), 0, simpleOffloadStep())
	for _, name := range simpleOffloadFamilies {
		if !slices.Contains(r.Families(), name) {
			t.Errorf("%s missing after a step reported the connector", name)
		}
	}
	if got := errs.Take(); len(got) != 1 || !errors.Is(got[0], instrument.ErrFeatureNotConfigured) {
		t.Errorf("reports %v, want one ErrFeatureNotConfigured", got)
	}
	rec.RecordScheduler(t.Context(), 0, &stats.Scheduler{Running: 3, SimpleKVOffload: &stats.SimpleKVOffload{Stored: 1, SkippedAlreadyCached: -1}})
	if got := errs.Take(); len(got) != 1 || !errors.Is(got[0], stats.ErrNegative) {
		t.Errorf("reports %v, want one ErrNegative", got)
	}
	if v := r.Value("vllm:simple_kv_offload_save_outcomes_total", append(engineLabels("0"), "outcome", "stored")...); v != 4 {
		t.Errorf("stored = %v after a refused step, want the first step's 4", v)
	}
	if _, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName("other"),
		instrument.WithSimpleKVOffload(stats.SimpleKVOffloadConfig{Backend: "nvme"})); !errors.Is(err, instrument.ErrConfig) {
		t.Errorf("NewRecorder with backend nvme: %v, want ErrConfig", err)
	}
}

// vllm:kv_offload_stores_skipped_total exists from start-up with a store
// threshold of 2 or more, as in vLLM, and counts the skipped blocks;
// without one it appears with the first skipped block.
func TestKVOffloadStoresSkipped(t *testing.T) {
	const family = "vllm:kv_offload_stores_skipped_total"
	skip := &stats.Scheduler{KVOffload: &stats.KVOffload{CPU: &stats.KVOffloadCPU{StoresSkipped: 7}}}
	for _, c := range []struct {
		threshold int
		atStart   bool
	}{{2, true}, {1, false}, {0, false}} {
		var opts []instrument.Option
		if c.threshold > 0 {
			opts = append(opts, instrument.WithKVOffloadStoreThreshold(c.threshold))
		} else {
			opts = append(opts, instrument.WithKVOffloadCPU())
		}
		r, rec := priorityRecorder(t, opts...)
		if got := slices.Contains(r.Families(), family); got != c.atStart {
			t.Errorf("threshold %d: %s at start-up %v, want %v", c.threshold, family, got, c.atStart)
		}
		for range 2 {
			rec.RecordScheduler(t.Context(), 0, skip)
		}
		if v := r.Value(family, engineLabels("0")...); v != 14 {
			t.Errorf("threshold %d: %s = %v, want 14", c.threshold, family, v)
		}
	}
}
