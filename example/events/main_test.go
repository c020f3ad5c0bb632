package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestEvents runs the example with a fixed seed until it has served its
// requests, and checks its /metrics, served by the exporters' handler: THE
// RULE (the iteration tokens are the computed prompt tokens plus the
// generation tokens, over windows that group several outputs), the prompt
// tokens by source summing to the total, every sequence finished once and
// every request's n observed once, the gauges back at zero, and nothing
// refused.
func TestEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	out, stdout := io.Pipe()
	exited := make(chan error, 1)
	go func() {
		exited <- run(ctx, []string{"-listen", "127.0.0.1:0", "-requests", "120", "-rate", "200", "-seed", "7",
			"-itl", "5ms", "-abort", "0.1", "-fail", "0.05", "-n2", "0.2"}, stdout)
		stdout.Close()
	}()
	lines := bufio.NewScanner(out)
	var url string
	var requests, sequences int
	for lines.Scan() {
		if u, ok := strings.CutPrefix(lines.Text(), "metrics: "); ok {
			url = u
		}
		if _, err := fmt.Sscanf(lines.Text(), "served %d requests (%d sequences)", &requests, &sequences); err == nil {
			break
		}
	}
	if url == "" || requests != 120 {
		cancel()
		t.Fatalf("the example printed %q and %d requests; want its /metrics URL and 120 requests (%v)", url, requests, <-exited)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	fams := scrape(t, url)
	value := func(name string, labels ...string) float64 {
		t.Helper()
		m := find(t, fams, name, labels...)
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
		t.Fatalf("%s is neither a counter nor a gauge", name)
		return 0
	}
	computed := value("vllm:prompt_tokens_by_source_total", "source", "local_compute")
	hits := value("vllm:prompt_tokens_by_source_total", "source", "local_cache_hit")
	external := value("vllm:prompt_tokens_by_source_total", "source", "external_kv_transfer")
	generation := value("vllm:generation_tokens_total")
	iterations := find(t, fams, "vllm:iteration_tokens_total").GetHistogram()
	if got := iterations.GetSampleSum(); got != computed+generation {
		t.Errorf("iteration tokens sum %v, want local_compute %v + generation %v", got, computed, generation)
	}
	if n := float64(iterations.GetSampleCount()); n == 0 || n >= generation {
		t.Errorf("%v windows for %v generation tokens: want windows of several outputs", n, generation)
	}
	if total := value("vllm:prompt_tokens_total"); total != computed+hits+external || hits == 0 || external != 0 {
		t.Errorf("prompt tokens %v: local_compute %v + local_cache_hit %v + external_kv_transfer %v; want the sum, hits, no transfer",
			total, computed, hits, external)
	}
	var finished float64
	for _, reason := range []string{"stop", "length", "abort", "error", "repetition"} {
		v := value("vllm:request_success_total", "finished_reason", reason)
		finished += v
		if v == 0 && reason != "repetition" {
			t.Errorf("no request finished by %s", reason)
		}
	}
	if finished != float64(sequences) {
		t.Errorf("%v sequences finished, want %d", finished, sequences)
	}
	n := find(t, fams, "vllm:request_params_n").GetHistogram()
	if n.GetSampleCount() != uint64(requests) || n.GetSampleSum() != float64(sequences) {
		t.Errorf("request_params_n: %d observations summing to %v; want one per request, %d, summing to %d sequences",
			n.GetSampleCount(), n.GetSampleSum(), requests, sequences)
	}
	for _, gauge := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} {
		if v := value(gauge); v != 0 {
			t.Errorf("%s = %v after the load, want 0", gauge, v)
		}
	}
	if q := value("vllm:prefix_cache_queries_total"); q < value("vllm:prefix_cache_hits_total") || q == 0 {
		t.Errorf("prefix cache: %v queries", q)
	}
	if fams["infermetrics_invalid_events_total"] != nil {
		t.Errorf("the Recorder refused events: %v", fams["infermetrics_invalid_events_total"])
	}

	cancel()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the example did not return within 30 s of its context's end")
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// find returns the series of a family with the given label pairs (besides
// model_name and engine).
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := have["engine"] == "0"
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && have[labels[i]] == labels[i+1]
		}
		if match {
			return m
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}
