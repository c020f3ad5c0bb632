package views_test

import (
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/infermetrics/infermetrics/instrument"
)

// Without our views every instrument is exported under its OpenTelemetry
// name, with all its attributes and vLLM's buckets as advisory boundaries,
// those of the families of older vLLM versions too.
func TestWithoutViews(t *testing.T) {
	fams := scrapeWith(t, nil, nil)
	want := 0
	for _, d := range slices.Concat(instrument.Descriptors(), instrument.LegacyDescriptors()) {
		if d.Feature != instrument.PriorityScheduling { // not in the FCFS scenario
			want++
		}
	}
	if len(fams) != want {
		t.Errorf("the scrape has %d families, want one per instrument of the FCFS scenario: %d", len(fams), want)
	}
	for name := range fams {
		if strings.Contains(name, ":") {
			t.Errorf("family %s carries a vLLM name without the views", name)
		}
	}
	for _, c := range []struct {
		name    string
		typ     dto.MetricType
		label   string // a label every series has
		buckets []float64
	}{
		{"vllm_prompt_tokens_total", dto.MetricType_COUNTER, "source", nil},
		{"vllm_kv_cache_usage_ratio", dto.MetricType_GAUGE, "engine", nil},
		{"vllm_request_success_total", dto.MetricType_COUNTER, "finished_reason", nil},
		{"vllm_time_to_first_token_seconds", dto.MetricType_HISTOGRAM, "engine", specBuckets["ttft"]},
		{"vllm_iteration_tokens", dto.MetricType_HISTOGRAM, "engine", specBuckets["iteration"]},
		{"vllm_request_prompt_tokens", dto.MetricType_HISTOGRAM, "model_name", specBuckets["length"]},
		{"vllm_nixl_bytes_transferred", dto.MetricType_HISTOGRAM, "engine", specBuckets["nixl_bytes"]},
	} {
		for _, m := range family(t, fams, c.name, c.typ).GetMetric() {
			if labelValue(m, c.label) == "" {
				t.Errorf("family %s has a series without %s: %v", c.name, c.label, m)
			}
			if c.buckets != nil && !slices.Equal(finiteBounds(m), c.buckets) {
				t.Errorf("family %s has le %v, want %v", c.name, finiteBounds(m), c.buckets)
			}
		}
	}
	// The source breakdown is there, but no total over sources: that family
	// is made by views.VLLM.
	var sources []string
	for _, m := range fams["vllm_prompt_tokens_total"].GetMetric() {
		if labelValue(m, "engine") == "0" {
			sources = append(sources, labelValue(m, "source"))
		}
	}
	if want := []string{"external_kv_transfer", "local_cache_hit", "local_compute"}; !slices.Equal(sources, want) {
		t.Errorf("vllm_prompt_tokens_total on engine 0 has sources %v, want %v", sources, want)
	}
}
