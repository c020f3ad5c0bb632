package exporters

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// WithGoMetrics adds the Go runtime's go_* families to the scrape; without
// it there are none (a library's scrape stays vLLM's). A registry that has
// a Go collector keeps it, and two Setups on one registry serve them once.
func TestGoMetrics(t *testing.T) {
	cleanEnv(t)
	goFamilies := []string{"go_goroutines", "go_threads", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds", "go_info"}
	p, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for name := range familiesOf(t, p) {
		if strings.HasPrefix(name, "go_") {
			t.Errorf("without WithGoMetrics: %s in the scrape", name)
		}
	}
	shutdown(t, p)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	for _, opts := range [][]Option{{WithGoMetrics()}, {WithGoMetrics(), WithPrometheus(WithRegistry(reg))}} {
		p1, err := Setup(t.Context(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := Setup(t.Context(), opts...)
		if err != nil {
			t.Fatalf("second Setup: %v", err)
		}
		recordGeneration(t, newRecorder(t, p1), 1)
		fams := familiesOf(t, p1) // a duplicate would make the scrape fail
		for _, name := range append(goFamilies, "vllm:generation_tokens_total", "process_cpu_seconds_total") {
			if !fams[name] {
				t.Errorf("%s missing from the scrape", name)
			}
		}
		shutdown(t, p2)
		shutdown(t, p1)
	}
}
