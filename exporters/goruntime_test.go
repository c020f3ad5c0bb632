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

// A registry that already serves go_* or process_* families keeps its own
// collector, whatever its options: Setup with WithGoMetrics neither fails
// ("descriptor ... already exists") nor serves a family twice.
func TestGoMetricsOnRegistryWithOwnCollectors(t *testing.T) {
	cleanEnv(t)
	for name, own := range map[string][]prometheus.Collector{
		"Go, GC runtime metrics":  {collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsGC))},
		"Go, all runtime metrics": {collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll))},
		"Go, no memstats":         {collectors.NewGoCollector(collectors.WithGoCollectorMemStatsMetricsDisabled())},
		"Go, scheduler metrics and process, reporting errors": {
			collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{ReportErrors: true}),
		},
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(own...)
			p, err := Setup(t.Context(), WithGoMetrics(), WithPrometheus(WithRegistry(reg)))
			if err != nil {
				t.Fatalf("Setup with WithGoMetrics on a registry with %s: %v", name, err)
			}
			defer shutdown(t, p)
			recordGeneration(t, newRecorder(t, p), 1)
			fams := familiesOf(t, p) // a duplicate would make the scrape fail
			for _, f := range []string{"go_goroutines", "process_cpu_seconds_total", "vllm:generation_tokens_total"} {
				if !fams[f] {
					t.Errorf("%s missing from the scrape", f)
				}
			}
		})
	}
}
