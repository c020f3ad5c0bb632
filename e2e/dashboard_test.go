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
	substitute := strings.NewReplacer(
		"$__rate_interval", fmt.Sprintf("%ds", windowSeconds),
		"$model_name", ".*",
		"$engine", ".*",
	)
	run := func(what, expr string) {
		t.Helper()
		if strings.Contains(expr, "$") {
			t.Errorf("%s: unsubstituted variable in %s", what, expr)
			return
		}
		result, err := e.prom.query(expr, at)
		switch {
		case err != nil:
			t.Errorf("%s: %s: %v", what, expr, err)
		case len(result) == 0:
			t.Errorf("%s: %s: empty result", what, expr)
		}
	}
	queries := 0
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: unsupported query %q", v.Name, v.Definition)
			continue
		}
		run("variable "+v.Name, substitute.Replace(fmt.Sprintf("count by (%s) (%s)", m[2], m[1])))
		queries++
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			run("panel "+p.Title, substitute.Replace(target.Expr))
			queries++
		}
	}
	t.Logf("%d dashboard expressions returned data", queries)
}
