package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/mixin"
)

// A JSON file of parameters changes what the files hold; a field that is
// not a parameter is refused.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "my.json")
	if err := os.WriteFile(config, []byte(`{"Selector": "namespace=\"llm\"", "ErrorRatio": {"Value": 0.01, "For": "5m"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(config, dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(mixin.AlertsFile)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"model_name:vllm_request_success:error_ratio_rate5m > 0.01\n        for: 5m", `(up{namespace="llm"}) == 0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not hold %q", mixin.AlertsFile, want)
		}
	}
	if err := os.WriteFile(config, []byte(`{"ErrorRatios": 0.01}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(config, dir); err == nil || !strings.Contains(err.Error(), "ErrorRatios") {
		t.Errorf("an unknown parameter: %v, want an error naming it", err)
	}
}

// The budget of docs/operators.md (its excerpt of testdata/budget.json)
// makes InfermetricsSpendOverBudget, one condition per dimension at its
// budget, and the cost rules per dimension.
func TestBudgetConfig(t *testing.T) {
	dir := t.TempDir()
	if err := run(filepath.Join("testdata", "budget.json"), dir); err != nil {
		t.Fatal(err)
	}
	for file, wants := range map[string][]string{
		mixin.AlertsFile: {"sum by (cluster, namespace, job, tenant) (rate(infermetrics_usage_cost_total{tenant!=\"\", tenant!~\"_invalid|_overflow\"}[1h]))\n          > 50\n        for: 15m",
			"sum by (cluster, namespace, job, api_key) (rate(infermetrics_usage_cost_total{api_key!=\"\", api_key!~\"_invalid|_overflow\"}[1h]))\n          > 5\n        for: 15m"},
		mixin.RecordingRulesFile: {"model_name_tenant:infermetrics_usage_cost:rate5m", "model_name_api_key:infermetrics_usage_cost:savings_rate5m"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s does not hold %q", file, want)
			}
		}
	}
}
