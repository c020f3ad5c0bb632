package instrument_test

import (
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// The external prefix cache counters need no option, as the feature
// table of docs/engines.md says: vLLM registers them with or without a connector, and
// Scheduler.ConnectorPrefixCache is recorded on a Recorder without
// WithKVConnector with nothing reported.
func TestConnectorPrefixCacheNeedsNoOption(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	families := r.Families()
	for _, f := range []string{"vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total"} {
		if !slices.Contains(families, f) {
			t.Errorf("%s is not there from start-up without WithKVConnector", f)
		}
	}
	e, _ := rec.Engine(0)
	e.RecordScheduler(t.Context(), &stats.Scheduler{ConnectorPrefixCache: &stats.CacheQueries{Queries: 100, Hits: 60}})
	if q, h := r.Value("vllm:external_prefix_cache_queries_total", withLabels()...),
		r.Value("vllm:external_prefix_cache_hits_total", withLabels()...); q != 100 || h != 60 {
		t.Errorf("external prefix cache queries %v, hits %v; want 100, 60", q, h)
	}
	if reported := errs.Take(); len(reported) != 0 {
		t.Errorf("reports %v, want none", reported)
	}
}
