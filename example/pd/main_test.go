package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// minDecodeExternalShare is the least share of the decode instance's prompt
// tokens that TestExampleSmoke wants from external_kv_transfer (README, docs/example.md).
const minDecodeExternalShare = 0.5

// TestExampleSmoke builds and runs the example for a few seconds of load with
// a fixed seed, then checks each printed /metrics endpoint, THE RULE on the
// decode instance, and a clean exit on SIGINT.
func TestExampleSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example")
	}
	bin := filepath.Join(t.TempDir(), "pd")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// One request in ten found corrupted (default: one in 200), so a few of
	// the ~60 requests are.
	cmd := exec.Command(bin, "-prefill-listen", "127.0.0.1:0", "-decode-listen", "127.0.0.1:0", "-router-listen", "127.0.0.1:0",
		"-rate", "20", "-duration", "3s", "-seed", "7", "-log-interval", "1s", "-corrupt", "0.1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("example stderr:\n%s", stderr.String())
		}
	})

	urls := map[string]string{}
	lines := bufio.NewScanner(stdout)
	for len(urls) < 2 && lines.Scan() {
		role, url, ok := strings.Cut(lines.Text(), " metrics: ")
		if ok {
			urls[role] = url
		}
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	if urls["prefill"] == "" || urls["decode"] == "" {
		t.Fatalf("the example printed no /metrics URLs: %v", urls)
	}

	final := map[string]map[string]*dto.MetricFamily{}
	for role, url := range urls {
		if role == "prefill" {
			// Its engines sleep once idle after the load; then nothing changes.
			waitAsleep(t, url, 90*time.Second)
		}
		final[role] = waitIdle(t, url, 90*time.Second)
		for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
			"vllm:prompt_tokens_total", "vllm:prompt_tokens_by_source_total", "vllm:generation_tokens_total",
			"vllm:iteration_tokens_total", "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
			"vllm:request_success_total", "vllm:cache_config_info"} {
			if final[role][name] == nil {
				t.Errorf("%s: family %s missing", role, name)
			}
		}
	}

	decode := final["decode"]
	for _, engine := range []string{"0", "1"} {
		computed := counter(decode, "vllm:prompt_tokens_by_source_total", engine, "local_compute")
		external := counter(decode, "vllm:prompt_tokens_by_source_total", engine, "external_kv_transfer")
		generation := counter(decode, "vllm:generation_tokens_total", engine, "")
		iterationSum := histogramSum(decode, "vllm:iteration_tokens_total", engine)
		if iterationSum != computed+generation {
			t.Errorf("decode engine %s: iteration_tokens_total sum = %v, want local_compute %v + generation %v",
				engine, iterationSum, computed, generation)
		}
		if external <= 0 {
			t.Errorf("decode engine %s: external_kv_transfer = %v, want > 0", engine, external)
		}
	}
	// The share of the decode instance's prompt tokens that arrive by KV
	// transfer: docs/example.md quotes this bound. The rest are mostly local
	// prefix-cache hits of the shared system prompts (and the one token a
	// transferred prompt recomputes, the fallbacks of failed transfers).
	var external, prompt float64
	for _, engine := range []string{"0", "1"} {
		external += counter(decode, "vllm:prompt_tokens_by_source_total", engine, "external_kv_transfer")
		prompt += counter(decode, "vllm:prompt_tokens_total", engine, "")
	}
	t.Logf("decode: external_kv_transfer %v of %v prompt tokens (%.1f%%)", external, prompt, 100*external/prompt)
	if external < minDecodeExternalShare*prompt {
		t.Errorf("decode: external_kv_transfer %v of %v prompt tokens, want at least %.0f%%", external, prompt, 100*minDecodeExternalShare)
	}
	if got := counter(final["prefill"], "vllm:prompt_tokens_by_source_total", "0", "external_kv_transfer"); got != 0 {
		t.Errorf("prefill: external_kv_transfer = %v, want 0", got)
	}
	checkFeatures(t, final)

	checkNewerFamilies(t, final)

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGINT: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the example did not exit within 30s of SIGINT")
	}
}

// waitIdle polls a /metrics endpoint until no request is running or waiting
// and two consecutive scrapes are identical but for the process_* families
// (CPU time and memory move on their own), and returns the last one.
func waitIdle(t *testing.T, url string, timeout time.Duration) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		text, err := get(url)
		text = withoutProcess(text)
		if err == nil && text == last && idle(text) {
			families, err := parse(text)
			if err != nil {
				t.Fatal(err)
			}
			return families
		}
		last = text
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s did not become idle within %v", url, timeout)
	return nil
}

// withoutProcess drops the lines of the process_* families from a scrape.
func withoutProcess(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "process_") && !strings.HasPrefix(line, "# HELP process_") &&
			!strings.HasPrefix(line, "# TYPE process_") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func idle(text string) bool {
	families, err := parse(text)
	if err != nil {
		return false
	}
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting"} {
		f := families[name]
		if f == nil {
			return false
		}
		for _, m := range f.GetMetric() {
			if m.GetGauge().GetValue() != 0 {
				return false
			}
		}
	}
	return true
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func parse(text string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(text))
}

// series returns the metric of a family with the given engine (and source,
// when not empty) label.
func series(families map[string]*dto.MetricFamily, name, engine, source string) *dto.Metric {
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["engine"] == engine && labels["source"] == source {
			return m
		}
	}
	return nil
}

func counter(families map[string]*dto.MetricFamily, name, engine, source string) float64 {
	return series(families, name, engine, source).GetCounter().GetValue()
}

func histogramSum(families map[string]*dto.MetricFamily, name, engine string) float64 {
	return series(families, name, engine, "").GetHistogram().GetSampleSum()
}

// checkNewerFamilies checks, in the final scrapes, one thing per family of
// newer vLLM versions the example exercises.
func checkNewerFamilies(t *testing.T, final map[string]map[string]*dto.MetricFamily) {
	t.Helper()
	engines := map[string][]string{"prefill": {"0"}, "decode": {"0", "1"}}
	for role, fams := range final {
		for _, engine := range engines[role] {
			at := map[string]string{"engine": engine}
			// The tiers sum to the cached tokens.
			var tiers float64
			for _, tier := range []string{"device", "host", "p2p", "disk", "external_unspecified"} {
				tiers += sum(t, fams, "vllm:prompt_tokens_cached_by_source_total", with(at, "source", tier))
			}
			if cached := sum(t, fams, "vllm:prompt_tokens_cached_total", at); tiers != cached {
				t.Errorf("%s engine %s: tiers sum to %v, vllm:prompt_tokens_cached_total = %v", role, engine, tiers, cached)
			}
			// Every finished request observed its preemptions.
			finished := sum(t, fams, "vllm:request_success_total", at)
			if n := histogramCount(fams, "vllm:request_num_preemptions", at); n != finished || n == 0 {
				t.Errorf("%s engine %s: vllm:request_num_preemptions count = %v, want the %v finished requests", role, engine, n, finished)
			}
			for _, name := range []string{"vllm:estimated_flops_per_gpu_total", "vllm:estimated_read_bytes_per_gpu_total",
				"vllm:estimated_write_bytes_per_gpu_total"} {
				if v := sum(t, fams, name, at); v <= 0 {
					t.Errorf("%s engine %s: %s = %v, want > 0", role, engine, name, v)
				}
			}
			if v := sum(t, fams, "vllm:external_prefix_cache_queries_total", at); role == "decode" && v <= 0 {
				t.Errorf("decode engine %s: external prefix cache queries = %v, want > 0", engine, v)
			}
		}
		for _, m := range fams["vllm:cache_config_info"].GetMetric() {
			labels := labelMap(m)
			if labels["kv_cache_size_tokens"] == "" || labels["kv_cache_max_concurrency"] == "" || labels["enable_prefix_caching"] != "True" {
				t.Errorf("%s: vllm:cache_config_info labels %v, want vLLM's fields", role, labels)
			}
		}
	}
	decode, prefill := final["decode"], final["prefill"]
	if v := sum(t, decode, "vllm:prompt_tokens_cached_by_source_total", map[string]string{"source": "p2p"}); v <= 0 {
		t.Errorf("decode: p2p tier = %v, want > 0 (KV from the prefill node)", v)
	}
	if v := sum(t, prefill, "vllm:prompt_tokens_cached_by_source_total", map[string]string{"source": "p2p"}); v != 0 {
		t.Errorf("prefill: p2p tier = %v, want 0", v)
	}
	if v := sum(t, prefill, "vllm:nixl_num_notifications_after_expiry_total", nil); v <= 0 {
		t.Errorf("prefill: vllm:nixl_num_notifications_after_expiry_total = %v, want > 0", v)
	}
	// Only the decode node is a KV consumer: three stages per engine.
	if n := len(decode["vllm:num_requests_kv_fetch_by_stage"].GetMetric()); n != 3*len(engines["decode"]) {
		t.Errorf("decode: %d vllm:num_requests_kv_fetch_by_stage series, want %d", n, 3*len(engines["decode"]))
	}
	if prefill["vllm:num_requests_kv_fetch_by_stage"] != nil {
		t.Error("prefill: vllm:num_requests_kv_fetch_by_stage present on a node that receives no KV")
	}
}

func labelMap(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

func with(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for key, val := range labels {
		out[key] = val
	}
	return out
}

// sum adds the counter or gauge values of a family's series that carry every
// given label; the family must exist.
func sum(t *testing.T, families map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := families[name]
	if f == nil {
		t.Errorf("family %s missing", name)
		return 0
	}
	var total float64
	for _, m := range f.GetMetric() {
		labels, match := labelMap(m), true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// histogramCount sums the observations of a histogram family's series whose
// labels include want (every series for nil).
func histogramCount(families map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var n uint64
	for _, m := range families[name].GetMetric() {
		labels, match := labelMap(m), true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return float64(n)
}

// TestWaitStart checks -start-on-signal's wait: the load starts once the
// signal came, not before, and not when the run ends while it waits.
func TestWaitStart(t *testing.T) {
	start := make(chan os.Signal) // unbuffered: a send is taken only by a waitStart that waits for it
	result := make(chan bool, 1)
	go func() { result <- waitStart(t.Context(), 0, start) }()
	select {
	case start <- syscall.SIGUSR1:
	case r := <-result:
		t.Fatalf("waitStart returned %v before the signal", r)
	}
	if !<-result {
		t.Error("the signal came: want the load started")
	}
	if !waitStart(t.Context(), 0, nil) {
		t.Error("no signal asked for: want the load started after -idle")
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() { result <- waitStart(ctx, 0, make(chan os.Signal)) }()
	cancel()
	if <-result {
		t.Error("the run ended before any signal: want no load")
	}
}
