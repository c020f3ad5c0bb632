package instrument_test

import (
	"maps"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// The series vLLM pre-creates for every (model_name, engine), transcribed from
// the family table of the compatibility reference.
var (
	// startupCounters are the always-on counters without extra labels.
	startupCounters = []string{"vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
		"vllm:mm_cache_queries", "vllm:mm_cache_hits", "vllm:num_preemptions",
		"vllm:prompt_tokens", "vllm:prompt_tokens_cached", "vllm:generation_tokens",
		// Always registered in newer vLLM: the external prefix cache counters
		// (0 without a connector) and the MFU counters (0 without estimates).
		"vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits",
		"vllm:estimated_flops_per_gpu", "vllm:estimated_read_bytes_per_gpu", "vllm:estimated_write_bytes_per_gpu"}
	// startupGauges are the always-on gauges without extra labels.
	startupGauges = []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"}
	// startupLabelled are the always-on families with one extra label: every
	// value of it exists, at the given value.
	startupLabelled = []struct {
		family, key string
		values      map[string]float64
	}{
		{"vllm:prompt_tokens_by_source", "source",
			map[string]float64{"local_compute": 0, "local_cache_hit": 0, "external_kv_transfer": 0}},
		{"vllm:prompt_tokens_cached_by_source", "source",
			map[string]float64{"device": 0, "host": 0, "p2p": 0, "disk": 0, "external_unspecified": 0}},
		{"vllm:request_success", "finished_reason",
			map[string]float64{"stop": 0, "length": 0, "abort": 0, "error": 0, "repetition": 0}},
		{"vllm:num_requests_waiting_by_reason", "reason", map[string]float64{"capacity": 0, "deferred": 0}},
		{"vllm:engine_sleep_state", "sleep_state", map[string]float64{"awake": 1, "weights_offloaded": 0, "discard_all": 0}},
		{"vllm:scheduler_policy_info", "policy", map[string]float64{"fcfs": 1, "priority": 0}},
	}
	// connectorCounters exist from start-up with a KV connector.
	connectorCounters = []string{"vllm:nixl_num_failed_transfers", "vllm:nixl_num_failed_notifications",
		"vllm:nixl_num_kv_expired_reqs", "vllm:nixl_num_notifications_after_expiry"}
	// specCounters exist from start-up with speculative decoding.
	specCounters = []string{"vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
		"vllm:spec_decode_num_accepted_tokens"}
)

// startupSeries returns every series expected right after NewRecorder, as
// series keys and values, for the given ranks and extra constant labels.
func startupSeries(ranks []string, constant []string, connector bool, specPositions int) map[string]float64 {
	want := map[string]float64{}
	for _, rank := range ranks {
		labels := append(engineLabels(rank), constant...)
		names := slices.Concat(startupCounters, startupGauges)
		if connector {
			names = append(names, connectorCounters...)
		}
		if specPositions > 0 {
			names = append(names, specCounters...)
		}
		for _, name := range names {
			want[series(name, labels...)] = 0
		}
		for _, f := range startupLabelled {
			for v, x := range f.values {
				want[series(f.family, append(labels, f.key, v)...)] = x
			}
		}
		for p := range specPositions {
			want[series("vllm:spec_decode_num_accepted_tokens_per_pos", append(labels, "position", string(rune('0'+p)))...)] = 0
		}
	}
	// The front end's admission rejections: one series per reason, without
	// engine, whatever the ranks.
	for _, reason := range []string{"max_num_queued_reqs", "max_num_queued_tokens"} {
		want[series("vllm:admission_rejections", append([]string{"model_name", model, "reason", reason}, constant...)...)] = 0
	}
	return want
}

// checkStartup compares a snapshot with the expected series: every one must be
// there with its value, and no other series may exist.
func checkStartup(t *testing.T, s snapshot, want map[string]float64) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		p, ok := s[k]
		if !ok {
			t.Errorf("series %s missing at start-up", k)
			continue
		}
		if p.kind == "histogram" || p.value != want[k] {
			t.Errorf("series %s = %v at start-up, want %v", k, p, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s)) {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series at start-up: %s %v", k, s[k])
		}
	}
}

func TestStartupSeries(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1))
	// 2 engines x (13 counters + 3 gauges + 3 sources + 5 tiers + 5 reasons + 2 waiting reasons
	// + 3 sleep states + 2 scheduler policies) + 2 admission reasons = 74.
	want := startupSeries([]string{"0", "1"}, nil, false, 0)
	if len(want) != 74 {
		t.Fatalf("expected list has %d series, want 74", len(want))
	}
	checkStartup(t, h.collect(), want)
}

func TestStartupSeriesWithFeatures(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1), instrument.WithKVConnector(), instrument.WithSpecDecoding(2),
		instrument.WithAttributes(attribute.String("role", "decode")),
		instrument.WithCacheConfig(stats.CacheConfig{"block_size": "16", "num_gpu_blocks": "2048"}))
	want := startupSeries([]string{"0", "1"}, []string{"role", "decode"}, true, 2)
	// The info gauge: engine and config fields only (no model_name, no constant attributes), value 1.
	for _, rank := range []string{"0", "1"} {
		want[series("vllm:cache_config_info", "engine", rank, "block_size", "16", "num_gpu_blocks", "2048")] = 1
	}
	// 74 + 2 engines x (4 connector + 3 spec + 2 positions + 1 info) = 94.
	if len(want) != 94 {
		t.Fatalf("expected list has %d series, want 94", len(want))
	}
	checkStartup(t, h.collect(), want)
}
