package views_test

import (
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// scenarioPriority is the priority of each scenario request, by prompt
// length: every bucket of the priority label and two raw values in one.
var scenarioPriority = map[int64]int{1000: -5, 40: 1, 20: 0, 10: -1, 3000: 7}

// scenarioOffload is the KV offloading step of the scenario: loads and
// stores on both sides of the size buckets, lookups, an allocation failure
// and the CPU tier's state.
func scenarioOffload() *stats.KVOffload {
	return &stats.KVOffload{
		Loads:           []stats.KVOffloadTransfer{{Bytes: 4 << 20, Seconds: 0.002}, {Bytes: 96 << 20, Seconds: 0.03}},
		Stores:          []stats.KVOffloadTransfer{{Bytes: 12 << 20, Seconds: 0.008}, {Bytes: 300 << 20, Seconds: 0.125}},
		LookupSyncDelay: []float64{3e-5, 0.0004}, LookupAsyncDelay: []float64{0.02},
		AllocationFailures: 2,
		CPU: &stats.KVOffloadCPU{CacheUsage: 0.5, WriteUsage: 0.375, ReadUsage: 0.125, AllocationChunks: []int64{12, 300},
			StoresSkipped: 3},
	}
}

// The scenario under priority scheduling: the finished-request families
// carry the priority label, vllm:request_priority observes the raw values.
func TestGoldenPriority(t *testing.T) {
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	checkGoldenWith(t, "vllm_priority.golden.prom", vs, append(slices.Clone(scenarioOptions), instrument.WithPriorityScheduling()))
}

// Under priority scheduling every family Families marks carries the
// priority label on every series, with every bucket the scenario has; the
// other families carry none.
func TestPriorityLabelsInScrape(t *testing.T) {
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	x := newExported(t, vs, append(slices.Clone(scenarioOptions), instrument.WithPriorityScheduling())...)
	recordScenario(t, x.rec)
	fams := families(t, x.scrape())
	for _, f := range views.Families() {
		mf, ok := fams[f.ScrapeName()]
		if !ok {
			t.Errorf("%s is not in the scrape", f.Name)
			continue
		}
		seen := map[string]bool{}
		for _, m := range mf.GetMetric() {
			has := slices.Contains(labelNames(m), "priority")
			if has != f.Instrument.Priority {
				t.Errorf("%s has a series with the priority label %v, want %v", f.Name, has, f.Instrument.Priority)
			}
			seen[labelValue(m, "priority")] = true
		}
		// The scenario's priorities -5, 1, 0, -1 and 7 make every bucket:
		// request_success has them all from start-up, e2e latency from its
		// observations (every finished request has one).
		if f.Name != "vllm:request_success_total" && f.Name != "vllm:e2e_request_latency_seconds" {
			continue
		}
		for _, b := range stats.PriorityBuckets() {
			if !seen[b.String()] {
				t.Errorf("%s has no series with priority %q", f.Name, b)
			}
		}
	}
}
