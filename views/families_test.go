package views_test

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// Bucket lists of the compatibility reference, transcribed.
var specBuckets = map[string][]float64{
	"ttft": {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
	"itl": {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0},
	"latency": {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
		120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0},
	"residency": {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120,
		300, 600, 1200, 1800},
	// 1-2-5 below max_model_len 4096.
	"length":    {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000},
	"iteration": {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384},
	"n":         {1, 2, 5, 10, 20},
	"nixl_xfer": {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0},
	"nixl_post": {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0},
	// 2^11, 2^13, ..., 2^33.
	"nixl_bytes": {2048, 8192, 32768, 131072, 524288, 2097152, 8388608, 33554432, 134217728,
		536870912, 2147483648, 8589934592},
	"nixl_descriptors": {10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000},
	// vLLM's kv_connector/v1/offloading/metrics.py (TRANSFER_SIZE_BUCKETS and
	// the lookup delays) and kv_offload/cpu/spec.py (allocation size).
	"offload_size":         {1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6},
	"offload_lookup_sync":  {0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1},
	"offload_lookup_async": {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10},
	"offload_cpu_alloc":    {1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144},
	// REQUEST_NUM_PREEMPTIONS_BUCKETS (vllm/v1/metrics/buckets.py @139b1c3f).
	"preemptions": {1, 2, 3, 4, 5, 10, 20},
	// BUCKETS of vllm/entrypoints/serve/dev/sleep/metrics.py @47e7f394 and
	// the weight operations' of vllm/entrypoints/rl/online/metrics.py @6ae75879.
	"operations": {0.01, 0.1, 1, 10, 30, 60, 120, 300, 600},
}

// specFamily is one row of the family table as it appears in a scrape.
type specFamily struct {
	name string // as parsed: counters carry _total
	typ  dto.MetricType
	// extra is the label beyond model_name and engine, with every value the
	// scenario must show; for the info gauges, labels is the whole label set.
	extra   string
	values  []string
	labels  []string
	buckets string
}

func counter(name string) specFamily {
	return specFamily{name: name + "_total", typ: dto.MetricType_COUNTER}
}
func gauge(name string) specFamily { return specFamily{name: name, typ: dto.MetricType_GAUGE} }
func histogram(name, buckets string) specFamily {
	return specFamily{name: name, typ: dto.MetricType_HISTOGRAM, buckets: buckets}
}

func (f specFamily) with(extra string, values ...string) specFamily {
	f.extra, f.values = extra, values
	return f
}

// specFamilies is the family table of the compatibility reference plus the
// NIXL families, for the scenario's options (KV connector, 2 speculative
// positions, cache config, LoRA).
var specFamilies = []specFamily{
	gauge("vllm:num_requests_running"),
	gauge("vllm:num_requests_waiting"),
	gauge("vllm:num_requests_waiting_by_reason").with("reason", "capacity", "deferred"),
	gauge("vllm:engine_sleep_state").with("sleep_state", "awake", "weights_offloaded", "discard_all"),
	gauge("vllm:kv_cache_usage_perc"),
	counter("vllm:prefix_cache_queries"),
	counter("vllm:prefix_cache_hits"),
	counter("vllm:external_prefix_cache_queries"),
	counter("vllm:external_prefix_cache_hits"),
	counter("vllm:mm_cache_queries"),
	counter("vllm:mm_cache_hits"),
	counter("vllm:num_preemptions"),
	counter("vllm:prompt_tokens"),
	counter("vllm:prompt_tokens_by_source").with("source", "local_compute", "local_cache_hit", "external_kv_transfer"),
	counter("vllm:prompt_tokens_cached"),
	counter("vllm:generation_tokens"),
	counter("vllm:request_success").with("finished_reason", "stop", "length", "abort", "error", "repetition"),
	histogram("vllm:request_prompt_tokens", "length"),
	histogram("vllm:request_generation_tokens", "length"),
	histogram("vllm:iteration_tokens_total", "iteration"),
	histogram("vllm:request_max_num_generation_tokens", "length"),
	histogram("vllm:request_params_n", "n"),
	histogram("vllm:request_params_max_tokens", "length"),
	histogram("vllm:time_to_first_token_seconds", "ttft"),
	histogram("vllm:inter_token_latency_seconds", "itl"),
	histogram("vllm:request_time_per_output_token_seconds", "itl"),
	histogram("vllm:e2e_request_latency_seconds", "latency"),
	histogram("vllm:request_queue_time_seconds", "latency"),
	histogram("vllm:request_inference_time_seconds", "latency"),
	histogram("vllm:request_prefill_time_seconds", "latency"),
	histogram("vllm:request_decode_time_seconds", "latency"),
	histogram("vllm:request_prefill_kv_computed_tokens", "length"),
	histogram("vllm:kv_block_lifetime_seconds", "residency"),
	histogram("vllm:kv_block_idle_before_evict_seconds", "residency"),
	histogram("vllm:kv_block_reuse_gap_seconds", "residency"),
	{name: "vllm:lora_requests_info", typ: dto.MetricType_GAUGE,
		labels: []string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"}},
	{name: "vllm:cache_config_info", typ: dto.MetricType_GAUGE,
		labels: []string{"engine", "block_size", "num_gpu_blocks", "cache_dtype", "enable_prefix_caching"}},
	counter("vllm:spec_decode_num_drafts"),
	counter("vllm:spec_decode_num_draft_tokens"),
	counter("vllm:spec_decode_num_accepted_tokens"),
	counter("vllm:spec_decode_num_accepted_tokens_per_pos").with("position", "0", "1"),
	counter("vllm:corrupted_requests"),
	histogram("vllm:nixl_xfer_time_seconds", "nixl_xfer"),
	histogram("vllm:nixl_post_time_seconds", "nixl_post"),
	histogram("vllm:nixl_bytes_transferred", "nixl_bytes"),
	histogram("vllm:nixl_num_descriptors", "nixl_descriptors"),
	counter("vllm:nixl_num_failed_transfers"),
	counter("vllm:nixl_num_failed_notifications"),
	counter("vllm:nixl_num_kv_expired_reqs"),
	gauge("vllm:scheduler_policy_info").with("policy", "fcfs", "priority"),
	counter("vllm:kv_offload_load_bytes"),
	counter("vllm:kv_offload_load_time"),
	histogram("vllm:kv_offload_load_size", "offload_size"),
	counter("vllm:kv_offload_store_bytes"),
	counter("vllm:kv_offload_store_time"),
	histogram("vllm:kv_offload_store_size", "offload_size"),
	histogram("vllm:kv_offload_lookup_sync_delay_seconds", "offload_lookup_sync"),
	histogram("vllm:kv_offload_lookup_async_delay_seconds", "offload_lookup_async"),
	counter("vllm:kv_offload_allocation_failure"),
	gauge("vllm:kv_offload_cpu_cache_usage_perc"),
	gauge("vllm:kv_offload_cpu_cache_write_usage_perc"),
	gauge("vllm:kv_offload_cpu_cache_read_usage_perc"),
	histogram("vllm:kv_offload_cpu_allocation_size", "offload_cpu_alloc"),
	// Families of newer vLLM (see docs/metrics.md for the commits read).
	counter("vllm:prompt_tokens_cached_by_source").with("source", "device", "host", "p2p", "disk", "external_unspecified"),
	histogram("vllm:request_num_preemptions", "preemptions"),
	counter("vllm:estimated_flops_per_gpu"),
	counter("vllm:estimated_read_bytes_per_gpu"),
	counter("vllm:estimated_write_bytes_per_gpu"),
	counter("vllm:nixl_num_notifications_after_expiry"),
	gauge("vllm:num_requests_kv_fetch_by_stage").with("stage", "waiting_to_start", "in_progress", "completed_waiting"),
	// vllm/v1/kv_offload/cpu (store_threshold of 2 or more) and the
	// SimpleCPUOffloadConnector's vllm/v1/simple_kv_offload/metrics.py.
	counter("vllm:kv_offload_stores_skipped"),
	counter("vllm:simple_kv_offload_save_outcomes").with("outcome", "stored", "dropped_cpu_full", "dropped_request_gone",
		"dropped_null_block", "dropped_not_hashed", "skipped_already_cached", "skipped_in_flight"),
	counter("vllm:simple_kv_offload_load_blocks").with("phase", "issued", "completed"),
	gauge("vllm:simple_kv_offload_used_blocks"),
	gauge("vllm:simple_kv_offload_pending_store_blocks"),
	{name: "vllm:simple_kv_offload_info", typ: dto.MetricType_GAUGE,
		labels: []string{"engine", "model_name", "backend", "page_cache", "lazy_offload", "capacity_blocks"}},
	// The front end's admission rejections (PR #55812): reason, no engine.
	{name: "vllm:admission_rejections_total", typ: dto.MetricType_COUNTER, labels: []string{"model_name", "reason"},
		extra: "reason", values: []string{"max_num_queued_reqs", "max_num_queued_tokens"}},
	// The API server's operations: the operation label only.
	{name: "vllm:sleep_mode_operation_duration_seconds", typ: dto.MetricType_HISTOGRAM, buckets: "operations",
		labels: []string{"operation"}, extra: "operation", values: []string{"sleep", "wake"}},
	{name: "vllm:rl_weight_update_operation_duration_seconds", typ: dto.MetricType_HISTOGRAM, buckets: "operations",
		labels: []string{"operation"}, extra: "operation", values: []string{"init", "update"}},
}

// labelNames returns the sorted label names of a series.
func labelNames(m *dto.Metric) []string {
	var names []string
	for _, lp := range m.GetLabel() {
		names = append(names, lp.GetName())
	}
	slices.Sort(names)
	return names
}

// finiteBounds returns a histogram's le boundaries without +Inf.
func finiteBounds(m *dto.Metric) []float64 {
	var bounds []float64
	for _, b := range m.GetHistogram().GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	return bounds
}

// family returns a family of a parsed scrape, reporting it when it is missing
// (nil) or not of the given type.
func family(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType) *dto.MetricFamily {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		t.Errorf("family %s is missing from the scrape", name)
		return nil
	}
	if mf.GetType() != typ {
		t.Errorf("family %s has type %v, want %v", name, mf.GetType(), typ)
	}
	return mf
}

// checkFamily checks one family of a parsed scrape against its table row.
func checkFamily(t *testing.T, fams map[string]*dto.MetricFamily, f specFamily) {
	t.Helper()
	mf := family(t, fams, f.name, f.typ)
	if mf == nil {
		return
	}
	if mf.GetHelp() == "" {
		t.Errorf("family %s has an empty HELP", f.name)
	}
	want := f.labels
	if want == nil {
		want = []string{"engine", "model_name"}
		if f.extra != "" {
			want = append(want, f.extra)
		}
	}
	want = slices.Sorted(slices.Values(want))
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		if got := labelNames(m); !slices.Equal(got, want) {
			t.Errorf("family %s has a series with labels %v, want %v", f.name, got, want)
		}
		if f.labels == nil && labelValue(m, "model_name") != modelName {
			t.Errorf("family %s has model_name %q, want %q", f.name, labelValue(m, "model_name"), modelName)
		}
		if f.extra != "" {
			seen[labelValue(m, f.extra)] = true
		}
		if f.typ == dto.MetricType_HISTOGRAM {
			if got := finiteBounds(m); !slices.Equal(got, specBuckets[f.buckets]) {
				t.Errorf("family %s has le %v, want the %s list %v", f.name, got, f.buckets, specBuckets[f.buckets])
			}
		}
	}
	for _, v := range f.values {
		if !seen[v] {
			t.Errorf("family %s has no series with %s=%q", f.name, f.extra, v)
		}
	}
	if f.extra != "" && len(seen) != len(f.values) {
		t.Errorf("family %s has %s values %v, want exactly %v", f.name, f.extra, slices.Sorted(maps.Keys(seen)), f.values)
	}
}

// TestFamiliesMatchSpec walks the family table of the compatibility reference
// over a parsed scrape of the scenario.
func TestFamiliesMatchSpec(t *testing.T) {
	fams := scenarioFamilies(t)
	names := map[string]bool{}
	for _, f := range specFamilies {
		checkFamily(t, fams, f)
		names[f.name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		// Families outside vLLM's namespace (the P/D router's) are ours:
		// TestFamiliesDescribeTheScrape checks them.
		if !names[name] && strings.HasPrefix(name, "vllm:") {
			t.Errorf("family %s is not in the vLLM family table", name)
		}
	}
	// Every engine has its series; the info gauges aside.
	for _, name := range []string{"vllm:num_requests_running", "vllm:prompt_tokens_total", "vllm:iteration_tokens_total"} {
		var engines []string
		for _, m := range fams[name].GetMetric() {
			engines = append(engines, labelValue(m, "engine"))
		}
		if !slices.Equal(engines, []string{"0", "1"}) {
			t.Errorf("family %s has engines %v, want [0 1]", name, engines)
		}
	}
}
