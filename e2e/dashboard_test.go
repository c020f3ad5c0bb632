package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// dashboardFile is the Grafana dashboard shipped with the library.
const dashboardFile = "../docs/grafana/infermetrics.json"

// dashboard is the part of a Grafana dashboard JSON that holds PromQL.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// labelValuesQuery turns a Grafana label_values(selector, label) variable
// definition into the query that gives its values.
func labelValuesQuery(def string) (string, bool) {
	m := labelValues.FindStringSubmatch(def)
	if m == nil {
		return "", false
	}
	return fmt.Sprintf("count by (%s) (%s)", m[2], m[1]), true
}

// dashboardVars substitutes the Grafana template variables of our dashboard
// and of vLLM's: every selector variable matches everything, the time
// variables become a window covering the whole run, and vLLM's SLO
// variables take their defaults (ttft_slo 1.0 s, tpot_slo 0.1 s), written
// as vLLM's dashboards write them into le="...".
func dashboardVars(windowSeconds int) *strings.Replacer {
	window := fmt.Sprintf("%ds", windowSeconds)
	return strings.NewReplacer(
		"$__rate_interval", window,
		"$__range", window,
		"$job", ".*",
		"$instance", ".*",
		"$model_name", ".*",
		"$engine", ".*",
		"$ttft_slo", "1.0",
		"$tpot_slo", "0.1",
	)
}

// dashboardQuery runs one substituted dashboard expression at time at and
// returns its series; an unsubstituted variable is an error.
func (e *env) dashboardQuery(expr string, at time.Time) ([]series, error) {
	if strings.Contains(expr, "$") {
		return nil, fmt.Errorf("unsubstituted variable in %s", expr)
	}
	return e.prom.query(expr, at)
}

// checkDashboard runs every PromQL expression of the dashboard, template
// variables substituted, against Prometheus holding the example's data, and
// fails on any error or empty result. $__rate_interval becomes a window that
// covers the whole run.
func (e *env) checkDashboard(t *testing.T, at time.Time, windowSeconds int) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	substitute := dashboardVars(windowSeconds)
	run := func(what, expr string) {
		t.Helper()
		result, err := e.dashboardQuery(substitute.Replace(expr), at)
		switch {
		case err != nil:
			t.Errorf("%s: %v", what, err)
		case len(result) == 0:
			t.Errorf("%s: %s: empty result", what, expr)
		}
	}
	queries := 0
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, ok := labelValuesQuery(v.Definition)
		if !ok {
			t.Errorf("variable %s: unsupported query %q", v.Name, v.Definition)
			continue
		}
		run("variable "+v.Name, q)
		queries++
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			run("panel "+p.Title, target.Expr)
			queries++
		}
	}
	t.Logf("%d dashboard expressions returned data", queries)
}
