package exporters

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The process families of vLLM's scrape (prometheus_client's process
// collector), which vLLM's instance dashboard reads.
var vllmProcessFamilies = []string{
	"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
	"process_start_time_seconds", "process_open_fds", "process_max_fds",
}

// familiesOf scrapes p and returns the family names, failing on an error
// status or a body that does not parse.
func familiesOf(t *testing.T, p *Provider) map[string]bool {
	t.Helper()
	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 {
		t.Fatalf("scrape: HTTP %d\n%s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	out := map[string]bool{}
	for name := range fams {
		out[name] = true
	}
	return out
}

func TestProcessMetrics(t *testing.T) {
	cleanEnv(t)
	p, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	recordGeneration(t, newRecorder(t, p), 1)
	fams := familiesOf(t, p)
	for _, name := range vllmProcessFamilies {
		if !fams[name] {
			t.Errorf("%s missing from the scrape", name)
		}
	}
	if !fams["vllm:generation_tokens_total"] {
		t.Error("vllm:generation_tokens_total missing from the scrape")
	}
	shutdown(t, p)

	p, err = Setup(t.Context(), WithoutProcessMetrics())
	if err != nil {
		t.Fatal(err)
	}
	recordGeneration(t, newRecorder(t, p), 1)
	for name := range familiesOf(t, p) {
		if strings.HasPrefix(name, "process_") {
			t.Errorf("WithoutProcessMetrics: %s in the scrape", name)
		}
	}
	shutdown(t, p)
}

// A registry that already has a process collector keeps it: Setup neither
// fails nor serves the families twice; two Setups sharing a registry work.
func TestProcessMetricsOnRegistryWithOne(t *testing.T) {
	cleanEnv(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p1, err := Setup(t.Context(), WithPrometheus(WithRegistry(reg)))
	if err != nil {
		t.Fatalf("Setup on a registry with a process collector: %v", err)
	}
	p2, err := Setup(t.Context(), WithPrometheus(WithRegistry(reg)))
	if err != nil {
		t.Fatalf("second Setup on the registry: %v", err)
	}
	fams := familiesOf(t, p1) // a duplicate would make the scrape fail
	for _, name := range vllmProcessFamilies {
		if !fams[name] {
			t.Errorf("%s missing from the scrape", name)
		}
	}
	shutdown(t, p2)
	shutdown(t, p1)
}
