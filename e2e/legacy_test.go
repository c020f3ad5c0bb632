package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// exampleVLLMVersion is the vLLM version whose families TestEndToEnd's
// example also exports (its -vllm-version flag, views.WithVersion): 0.10
// exported every legacy family.
const exampleVLLMVersion = "0.10"

// wvaNamespace is the Kubernetes namespace label Prometheus gives the
// example's series (wvaRelabel), as a ServiceMonitor does in a cluster:
// llm-d's autoscaler selects its model's series by it.
const wvaNamespace = "llm-d-sim"

// wvaRelabel is the scrape job's relabelling that adds wvaNamespace.
var wvaRelabel = fmt.Sprintf(`    relabel_configs:
      - target_label: namespace
        replacement: %s
`, wvaNamespace)

// wvaQueriesFile holds the PromQL of llm-d's workload variant autoscaler
// (source and commits in its header).
const wvaQueriesFile = "testdata/llmd_wva_queries.txt"

// checkWVAQueries: every query llm-d's workload variant autoscaler runs
// gives it what it takes for the example's model on the real Prometheus:
// series for its validation query, one positive number for the others, its
// ITL among them, which reads
// vllm:time_per_output_token_seconds; that one equals the same query on
// vllm:inter_token_latency_seconds, the family that replaced it.
func (e *env) checkWVAQueries(t *testing.T, at time.Time) {
	models := e.prom.byLabel(t, `count by (model_name) (vllm:num_requests_running{path="direct"})`, "model_name", at)
	if len(models) != 1 {
		t.Fatalf("models %v, want the example's one", models)
	}
	var model string
	for m := range models {
		model = m
	}
	substitute := strings.NewReplacer("$model", model, "$namespace", wvaNamespace)
	values := map[string]float64{}
	for _, q := range readExprFile(t, wvaQueriesFile) {
		name, expr := q.file, substitute.Replace(q.expr)
		result, err := e.prom.query(expr, at)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(result) == 0 {
			t.Errorf("%s: no data: %s", name, expr)
			continue
		}
		if name == "validate" { // the autoscaler asks only for series, fresh ones
			continue
		}
		if v := result[0].value; len(result) != 1 || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			t.Errorf("%s: %d samples, the first %g; want one positive number: %s", name, len(result), v, expr)
		}
		values[name] = result[0].value
	}
	itl := e.prom.scalar(t, substitute.Replace(fmt.Sprintf(`sum(rate(%[1]s_sum{model_name="$model",namespace="$namespace"}[1m]))/sum(rate(%[1]s_count{model_name="$model",namespace="$namespace"}[1m]))`,
		"vllm:inter_token_latency_seconds")), at)
	if !sameValue(values["itl"], itl) {
		t.Errorf("the autoscaler's ITL %g from vllm:time_per_output_token_seconds, %g from vllm:inter_token_latency_seconds: want equal", values["itl"], itl)
	}
	t.Logf("llm-d WVA queries for %s: %v", model, values)
}

// checkLegacyFamilies: in Prometheus every family of the example's vLLM
// version that later versions renamed has, series by series, exactly the
// samples of the family that replaced it.
func (e *env) checkLegacyFamilies(t *testing.T, at time.Time) {
	for _, f := range views.LegacyFamilies() {
		if f.Replacement == "" {
			continue // removed without a successor: no family to compare with, and not one of 0.10
		}
		suffixes := []string{""}
		if f.Type == instrument.Histogram.String() {
			suffixes = []string{"_bucket", "_sum", "_count"}
		}
		for _, suffix := range suffixes {
			samples := func(name string) map[string]float64 {
				m := map[string]float64{}
				for _, s := range e.prom.mustQuery(t, fmt.Sprintf(`%s{path="direct"}`, name+suffix), at) {
					s.name = "" // compared across the two names
					m[identity(s)] = s.value
				}
				return m
			}
			old, cur := samples(f.Name), samples(f.Replacement)
			if len(old) == 0 || len(old) != len(cur) {
				t.Errorf("%s%s: %d series, %s%s: %d; want the same, and some", f.Name, suffix, len(old), f.Replacement, suffix, len(cur))
			}
			for id, v := range cur {
				if w, ok := old[id]; !ok || !sameValue(v, w) {
					t.Errorf("%s%s = %g (present: %v), %s%s = %g", f.Name, suffix, w, ok, f.Replacement, suffix, v)
				}
			}
		}
	}
}
