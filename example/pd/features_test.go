package main

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// checkFeatures checks the families of priority scheduling (both instances)
// and of the prefill instance's KV offload tier in the final scrapes of the
// smoke test: each is there, with moving values.
func checkFeatures(t *testing.T, final map[string]map[string]*dto.MetricFamily) {
	t.Helper()
	for role, fams := range final {
		// Priority scheduling: the label, the raw priorities, the policy.
		buckets := map[string]bool{}
		for _, m := range fams["vllm:e2e_request_latency_seconds"].GetMetric() {
			buckets[label(m, "priority")] = true
		}
		for _, b := range []string{"<-1", "-1", "0", "1", ">1"} {
			if !buckets[b] {
				t.Errorf("%s: vllm:e2e_request_latency_seconds has no series with priority %q: %v", role, b, buckets)
			}
		}
		if n := histogramCount(fams, "vllm:request_priority", nil); n == 0 {
			t.Errorf("%s: vllm:request_priority has no observations", role)
		}
		for _, m := range fams["vllm:scheduler_policy_info"].GetMetric() {
			if want := map[string]float64{"priority": 1, "fcfs": 0}[label(m, "policy")]; m.GetGauge().GetValue() != want {
				t.Errorf("%s: vllm:scheduler_policy_info{policy=%q} = %v, want %v", role, label(m, "policy"), m.GetGauge().GetValue(), want)
			}
		}
		if len(fams["vllm:scheduler_policy_info"].GetMetric()) == 0 {
			t.Errorf("%s: vllm:scheduler_policy_info missing", role)
		}
	}

	// The KV offload tier, on the prefill instance only.
	prefill := final["prefill"]
	for _, name := range []string{"vllm:kv_offload_load_bytes_total", "vllm:kv_offload_load_time_total",
		"vllm:kv_offload_store_bytes_total", "vllm:kv_offload_store_time_total"} {
		if v := counterTotal(prefill, name); v <= 0 {
			t.Errorf("prefill: %s = %v, want > 0", name, v)
		}
	}
	if prefill["vllm:kv_offload_allocation_failure_total"] == nil { // 5% of stores: may still be 0
		t.Errorf("prefill: vllm:kv_offload_allocation_failure_total missing")
	}
	for _, name := range []string{"vllm:kv_offload_load_size", "vllm:kv_offload_store_size",
		"vllm:kv_offload_lookup_sync_delay_seconds", "vllm:kv_offload_lookup_async_delay_seconds",
		"vllm:kv_offload_cpu_allocation_size"} {
		if n := histogramCount(prefill, name, nil); n == 0 {
			t.Errorf("prefill: %s has no observations", name)
		}
	}
	for _, name := range []string{"vllm:kv_offload_cpu_cache_usage_perc", "vllm:kv_offload_cpu_cache_write_usage_perc",
		"vllm:kv_offload_cpu_cache_read_usage_perc"} {
		if prefill[name] == nil {
			t.Errorf("prefill: %s missing", name)
		}
	}
	if final["decode"]["vllm:kv_offload_load_bytes_total"] != nil {
		t.Errorf("decode: has KV offload families without a tier")
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func counterTotal(fams map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	for _, m := range fams[name].GetMetric() {
		v += m.GetCounter().GetValue()
	}
	return v
}
