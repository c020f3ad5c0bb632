package main

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// checkFeatures checks the families of priority scheduling (both instances),
// of the prefill instance's KV offload tier, of LoRA adapters, speculative
// decoding, sleep mode and corrupted requests in the final scrapes of the
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
	checkLoRA(t, final)
	checkSpecDecoding(t, final)
	checkSleep(t, final)
	checkCorrupted(t, final)
	checkDashboardFamilies(t, final)
}

// checkDashboardFamilies checks the families vLLM's dashboards read that
// the example added last: the multimodal cache on both instances, the
// prefill tier's skipped stores and its sleep mode operation, the decode
// instance's SimpleCPUOffloadConnector and RL weight updates.
func checkDashboardFamilies(t *testing.T, final map[string]map[string]*dto.MetricFamily) {
	t.Helper()
	for role, fams := range final {
		queries, hits := counterTotal(fams, "vllm:mm_cache_queries_total"), counterTotal(fams, "vllm:mm_cache_hits_total")
		if queries <= 0 || hits <= 0 || hits > queries {
			t.Errorf("%s: multimodal cache hits %v of %v queries, want some of some", role, hits, queries)
		}
	}
	prefill, decode := final["prefill"], final["decode"]
	if v := counterTotal(prefill, "vllm:kv_offload_stores_skipped_total"); v <= 0 {
		t.Errorf("prefill: vllm:kv_offload_stores_skipped_total = %v, want > 0", v)
	}
	if n := histogramCount(prefill, "vllm:sleep_mode_operation_duration_seconds", map[string]string{"operation": "sleep"}); n < 1 {
		t.Errorf("prefill: %v sleep operations, want the one after the load", n)
	}
	if v := sum(t, decode, "vllm:simple_kv_offload_save_outcomes_total", map[string]string{"outcome": "stored"}); v <= 0 {
		t.Errorf("decode: %v stores to the SimpleCPUOffloadConnector's pool, want some", v)
	}
	for _, name := range []string{"vllm:simple_kv_offload_load_blocks_total", "vllm:simple_kv_offload_used_blocks",
		"vllm:simple_kv_offload_pending_store_blocks", "vllm:simple_kv_offload_info"} {
		if decode[name] == nil {
			t.Errorf("decode: %s missing", name)
		}
	}
	if prefill["vllm:simple_kv_offload_save_outcomes_total"] != nil {
		t.Error("prefill: SimpleCPUOffloadConnector families without the connector")
	}
	for op, least := range map[string]float64{"init": 1, "update": 1} {
		if n := histogramCount(decode, "vllm:rl_weight_update_operation_duration_seconds", map[string]string{"operation": op}); n < least {
			t.Errorf("decode: %v weight-transfer operations %q, want at least %v", n, op, least)
		}
	}
}

// checkLoRA checks vllm:lora_requests_info on both instances: one series
// with vLLM's three labels, max_lora 4, and the time of its last update.
func checkLoRA(t *testing.T, final map[string]map[string]*dto.MetricFamily) {
	t.Helper()
	for role, fams := range final {
		ms := fams["vllm:lora_requests_info"].GetMetric()
		if len(ms) != 1 {
			t.Errorf("%s: %d vllm:lora_requests_info series, want 1", role, len(ms))
			continue
		}
		labels := labelMap(ms[0])
		_, running := labels["running_lora_adapters"]
		_, waiting := labels["waiting_lora_adapters"]
		if len(labels) != 3 || labels["max_lora"] != "4" || !running || !waiting {
			t.Errorf("%s: vllm:lora_requests_info labels %v, want max_lora=4 and the adapter lists only", role, labels)
		}
		// The value is the Unix time of the last update, during the load.
		if v := ms[0].GetGauge().GetValue(); v < float64(time.Now().Add(-time.Hour).Unix()) {
			t.Errorf("%s: vllm:lora_requests_info = %v, want the time of the last update", role, v)
		}
	}
}

// checkSpecDecoding checks the speculative decoding counters of each decode
// engine: 3 draft tokens per draft, some but not all accepted, positions
// summing to the accepted tokens and accepting less the later they are, and
// each draft's step giving 1 + its accepted tokens of generation. The
// prefill instance decodes nothing and has none.
func checkSpecDecoding(t *testing.T, final map[string]map[string]*dto.MetricFamily) {
	t.Helper()
	decode := final["decode"]
	for _, engine := range []string{"0", "1"} {
		at := map[string]string{"engine": engine}
		drafts := sum(t, decode, "vllm:spec_decode_num_drafts_total", at)
		draftTokens := sum(t, decode, "vllm:spec_decode_num_draft_tokens_total", at)
		accepted := sum(t, decode, "vllm:spec_decode_num_accepted_tokens_total", at)
		if drafts <= 0 || draftTokens != 3*drafts || accepted <= 0 || accepted >= draftTokens {
			t.Errorf("decode engine %s: %v drafts, %v draft tokens, %v accepted; want 3 draft tokens per draft, some accepted",
				engine, drafts, draftTokens, accepted)
		}
		var perPos float64
		prev := drafts
		for _, pos := range []string{"0", "1", "2"} {
			v := sum(t, decode, "vllm:spec_decode_num_accepted_tokens_per_pos_total", with(at, "position", pos))
			if v <= 0 || v > prev {
				t.Errorf("decode engine %s: position %s accepted %v, want > 0 and at most position before (%v)", engine, pos, v, prev)
			}
			perPos, prev = perPos+v, v
		}
		if perPos != accepted {
			t.Errorf("decode engine %s: positions sum to %v, accepted tokens %v", engine, perPos, accepted)
		}
		// Every request's first output has no draft; then each step's
		// output is the draft's accepted tokens plus one.
		if generation := sum(t, decode, "vllm:generation_tokens_total", at); generation < drafts+accepted || generation > drafts+accepted+drafts {
			t.Errorf("decode engine %s: %v generation tokens, want drafts + accepted (%v) plus the first outputs", engine, generation, drafts+accepted)
		}
	}
	if final["prefill"]["vllm:spec_decode_num_drafts_total"] != nil {
		t.Error("prefill: speculative decoding families on an instance that does not decode")
	}
}

// checkSleep checks vllm:engine_sleep_state: the prefill engine asleep
// (level 1) after the load, the decode engines awake.
func checkSleep(t *testing.T, final map[string]map[string]*dto.MetricFamily) {
	t.Helper()
	for role, want := range map[string]string{"prefill": "weights_offloaded", "decode": "awake"} {
		for _, m := range final[role]["vllm:engine_sleep_state"].GetMetric() {
			state := label(m, "sleep_state")
			if v := m.GetGauge().GetValue(); (state == want) != (v == 1) {
				t.Errorf("%s engine %s: vllm:engine_sleep_state{sleep_state=%q} = %v, want the engine %s",
					role, label(m, "engine"), state, v, want)
			}
		}
	}
}

// checkCorrupted checks that the decode instance found corrupted requests
// and finished each with an error (the only errors of the example); the
// prefill instance finds none.
func checkCorrupted(t *testing.T, final map[string]map[string]*dto.MetricFamily) {
	t.Helper()
	decode := final["decode"]
	corrupted := sum(t, decode, "vllm:corrupted_requests_total", nil)
	errored := sum(t, decode, "vllm:request_success_total", map[string]string{"finished_reason": "error"})
	if corrupted <= 0 || errored != corrupted {
		t.Errorf("decode: %v corrupted requests, %v finished with an error; want some, the same", corrupted, errored)
	}
	if final["prefill"]["vllm:corrupted_requests_total"] != nil {
		t.Error("prefill: corrupted requests found")
	}
}

// waitAsleep polls a /metrics endpoint until every engine's sleep state is
// weights_offloaded.
func waitAsleep(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		text, err := get(url)
		if err != nil {
			continue
		}
		fams, err := parse(withoutProcess(text))
		if err != nil {
			t.Fatal(err)
		}
		asleep := 0
		for _, m := range fams["vllm:engine_sleep_state"].GetMetric() {
			if label(m, "sleep_state") == "weights_offloaded" && m.GetGauge().GetValue() == 1 {
				asleep++
			}
		}
		if asleep > 0 && 3*asleep == len(fams["vllm:engine_sleep_state"].GetMetric()) {
			return
		}
	}
	t.Fatalf("%s: the engines did not go to sleep within %v", url, timeout)
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
