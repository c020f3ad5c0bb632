package views_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// Families, the source of docs/metrics.md, describes the scrape exactly: the
// same family names, types, label names and bucket boundaries.
func TestFamiliesDescribeTheScrape(t *testing.T) {
	fams := scenarioFamilies(t)
	described := map[string]bool{}
	for _, f := range views.Families() {
		described[f.ScrapeName()] = true
		if f.Instrument.Feature == instrument.PriorityScheduling {
			continue // not in the FCFS scenario: see TestPriorityLabelsInScrape
		}
		mf, ok := fams[f.ScrapeName()]
		if !ok {
			t.Errorf("%s is described but not in the scrape", f.Name)
			continue
		}
		if got := mf.GetType().String(); got != map[string]string{"counter": "COUNTER", "gauge": "GAUGE", "histogram": "HISTOGRAM"}[f.Type] {
			t.Errorf("%s: described as %s, scraped as %s", f.Name, f.Type, got)
		}
		want := slices.Clone(f.Labels)
		if f.Instrument.Name == instrument.NameCacheConfigInfo {
			want = []string{"block_size", "cache_dtype", "enable_prefix_caching", "engine", "num_gpu_blocks"} // engine + the scenario's cache config
		}
		slices.Sort(want)
		m := mf.GetMetric()[0]
		if got := labelNames(m); !slices.Equal(got, want) {
			t.Errorf("%s: labels %v, described %v", f.Name, got, want)
		}
		if f.Type == "histogram" && !f.Instrument.LengthBuckets {
			if got := finiteBounds(m); !slices.Equal(got, f.Buckets) {
				t.Errorf("%s: buckets %v, described %v", f.Name, got, f.Buckets)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		if !described[name] {
			t.Errorf("%s is in the scrape but not described by Families", name)
		}
	}
}

// testutil names families as Families does: the scenario, read through a
// testutil.Reader, has every family under its Families name.
func TestTestutilNamesFamiliesAsFamilies(t *testing.T) {
	var want []string
	for _, f := range views.Families() {
		if f.Instrument.Feature != instrument.PriorityScheduling { // not in the FCFS scenario
			want = append(want, f.Name)
		}
	}
	slices.Sort(want)
	if got := scenarioReader(t).Families(); !slices.Equal(got, want) {
		t.Errorf("testutil names the families\n%v\nviews.Families names them\n%v", got, want)
	}
}
