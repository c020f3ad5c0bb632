package mixin

import (
	_ "embed"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
)

// configSource is config.go, whose doc comments of Config's fields the
// parameter table of docs/monitoring.md shows.
//
//go:embed config.go
var configSource string

// fieldDocs returns the doc comment of each field of Config, one line each.
func fieldDocs() (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", configSource, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range field.Names {
				docs[name.Name] = strings.Join(strings.Fields(field.Doc.Text()), " ")
			}
		}
		return false
	})
	return docs, nil
}

// value writes a parameter's value for the docs.
func value(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case string:
		if x == "" {
			return "(none)"
		}
		return "`" + x + "`"
	case Duration:
		if x == "" {
			return "(none)"
		}
		return "`" + string(x) + "`"
	case float64:
		return "`" + number(x) + "`"
	case []string:
		if len(x) == 0 {
			return "(none)"
		}
		return "`" + strings.Join(x, "`, `") + "`"
	case []float64:
		parts := make([]string, len(x))
		for i, f := range x {
			parts[i] = number(f)
		}
		return "`" + strings.Join(parts, "`, `") + "`"
	case Threshold:
		return fmt.Sprintf("`%s` for `%s`", number(x.Value), x.For)
	case SLO:
		return fmt.Sprintf("%s within `%s` s", percent(x.Objective), number(x.Seconds))
	case []BurnRate:
		parts := make([]string, len(x))
		for i, b := range x {
			parts[i] = fmt.Sprintf("%s/%s ×%s for %s (%s)", b.Long, b.Short, number(b.Factor), b.For, b.Severity)
		}
		return strings.Join(parts, "; ")
	}
	return fmt.Sprint(v.Interface())
}

// cell escapes a table cell's pipes.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// runbook writes docs/monitoring.md: how to load the rules and import the
// dashboards, the parameters, the recording rules, each alert with what
// it means and what to do, and each dashboard's panels with their queries.
func runbook(r rules, alerts []alert, recording []ruleGroup, bs []board) ([]byte, error) {
	docs, err := fieldDocs()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("<!-- %s -->", generated)
	p("")
	p("# Alerts, recording rules and dashboards")
	p("")
	p("Prometheus rules and Grafana dashboards for the families infermetrics exports, generated from one")
	p("source, the Go code in [`mixin/`](../mixin), which names every family from package `views` (the")
	p("one definition of the scrape), as the Kubernetes monitoring mixins do. The engine alerts read")
	p("vLLM's own families, so they serve a vLLM server as they serve an engine instrumented with")
	p("infermetrics; the P/D router, invalid-event and model-overflow alerts read infermetrics' own.")
	p("")
	p("| file | what |")
	p("|---|---|")
	p("| [`%s`](../%s) | the recording rules, a Prometheus rule file |", RecordingRulesFile, RecordingRulesFile)
	p("| [`%s`](../%s) | the alerts, a Prometheus rule file |", AlertsFile, AlertsFile)
	p("| [`%s`](../%s) | both as a `PrometheusRule` of the Prometheus Operator |", PrometheusRuleFile, PrometheusRuleFile)
	p("| [`%s`](../%s) | `promtool test rules` unit tests: each alert fires on series that should fire it and stays quiet on others |", UnitTestsFile, UnitTestsFile)
	for _, bd := range bs {
		p("| [`%s`](../%s) | Grafana dashboard: %s |", bd.file, bd.file, bd.title)
	}
	p("")
	p("Each is tested: `promtool check rules` and `promtool test rules` (Prometheus 2.42 and 3.16) in")
	p("the module's tests, and in the end-to-end suite (`e2e/mixin_test.go`) Prometheus 2.42 and 3.16")
	p("load the rule files while scraping the example P/D deployment (`example/pd`, its router driven by")
	p("HTTP clients): every recording rule and every dashboard query returns data, and")
	p("VLLMRequestErrors fires for the decode instance when the example corrupts a share of its requests.")
	p("A test fails when a committed file differs from what the generator writes.")
	p("")
	p("## Loading the rules")
	p("")
	p("Plain Prometheus (and Thanos or Mimir rulers, which take the same files): copy the two rule")
	p("files next to its configuration and name them.")
	p("")
	p("```yaml")
	p("rule_files:")
	p("  - recording.yaml")
	p("  - alerts.yaml")
	p("```")
	p("")
	p("The alerts read the recording rules: load both. `promtool check rules recording.yaml alerts.yaml`")
	p("checks them, `promtool test rules tests.yaml` (beside the two) runs the unit tests.")
	p("")
	p("The Prometheus Operator: `kubectl apply -n monitoring -f %s`. A Prometheus selects", PrometheusRuleFile)
	p("PrometheusRules by its `ruleSelector`: kube-prometheus-stack's wants the label `release` set to")
	p("the Helm release's name; add it under `metadata.labels`.")
	p("")
	p("The rules read classic histograms (`_bucket` series), as vLLM's own dashboards do; a deployment")
	p("that exports only native histograms (`views.WithExponentialLatency`) gets no latency rules.")
	p("")
	p("### Parameters")
	p("")
	p("Thresholds and selectors are parameters (`mixin.Config`). To generate the files with your own,")
	p("write the fields you change as JSON and run the generator (from a checkout):")
	p("")
	p("```sh")
	p("cd mixin && go run ./cmd/generate -config my.json -out /tmp/rules   # {\"Selector\": \"namespace=\\\"llm\\\"\", \"ErrorRatio\": {\"Value\": 0.01, \"For\": \"5m\"}}")
	p("```")
	p("")
	p("| parameter | default | meaning |")
	p("|---|---|---|")
	cv := reflect.ValueOf(r.Config)
	for i := range cv.NumField() {
		name := cv.Type().Field(i).Name
		p("| `%s` | %s | %s |", name, cell(value(cv.Field(i))), cell(docs[name]))
	}
	p("")
	p("## Recording rules")
	p("")
	p("Named `level:metric:operations`: the level `%s` is one series per model and deployment, the", level)
	p("metric the family read. Every rule and alert aggregates with `by (%s)` (`JobLabels`,", strings.Join(r.agg.labels, ", "))
	p("`ExtraGroupLabels` and `model_name`), plus the labels it needs (`finished_reason` for the error")
	p("ratio, `source` for prompt tokens by source, `le` inside a quantile, `kind` for invalid events, the")
	p("instance labels and `engine` for the per-engine and per-server alerts): any other label, `priority`")
	p("under priority scheduling, a LoRA adapter, one a relabeling adds, is summed away, so it neither splits")
	p("a page nor breaks a ratio of two families of which one carries it. A label a setup lacks (`cluster`")
	p("and `namespace` on a plain Prometheus) is empty, and `by` keeps working. The quantile rules carry a")
	p("`quantile` label.")
	p("")
	for _, g := range recording {
		p("Group `%s`:", g.name)
		p("")
		p("| record | labels | expression |")
		p("|---|---|---|")
		for _, rl := range g.rules {
			var labels []string
			for _, l := range rl.labels {
				labels = append(labels, fmt.Sprintf("%s=%q", l.name, l.value))
			}
			p("| `%s` | %s | `%s` |", rl.record, cell(strings.Join(labels, ", ")), cell(oneLine(rl.expr)))
		}
		p("")
	}
	p("## Alerts")
	p("")
	p("Each alert's `runbook_url` points to its section here.")
	p("")
	p("| alert | severity | for |")
	p("|---|---|---|")
	for _, a := range alerts {
		var sev, fors []string
		for _, c := range a.conditions {
			sev = append(sev, c.labels[0].value)
			fors = append(fors, string(c.forDuration))
		}
		p("| [%s](#%s) | %s | %s |", a.name, strings.ToLower(a.name), strings.Join(sev, ", "), strings.Join(fors, ", "))
	}
	for _, a := range alerts {
		p("")
		p("### %s", a.name)
		p("")
		p("%s", a.means)
		p("")
		p("**What to do.** %s", a.action)
		p("")
		p("```promql")
		for i, c := range a.conditions {
			if i > 0 {
				p("")
			}
			var labels []string
			for _, l := range c.labels {
				labels = append(labels, l.name+"="+l.value)
			}
			p("# for: %s, %s", c.forDuration, strings.Join(labels, ", "))
			p("%s", c.expr)
		}
		p("```")
	}
	p("")
	p("## Dashboards")
	p("")
	p("Import each JSON file in Grafana (Dashboards, New, Import) and pick a Prometheus data source,")
	p("or provision them from a directory. Every panel's query is run against a real Prometheus by")
	p("the end-to-end suite; `$__rate_interval` is Grafana's rate window.")
	for _, bd := range bs {
		p("")
		p("### %s", bd.title)
		p("")
		p("[`%s`](../%s) (uid `%s`): %s", bd.file, bd.file, bd.uid, bd.description)
		p("")
		var vars []string
		for _, v := range bd.variables {
			vars = append(vars, fmt.Sprintf("`$%s` (`%s`)", v.name, v.definition()))
		}
		p("Variables: `$datasource`, %s.", strings.Join(vars, ", "))
		for _, row := range bd.rows {
			p("")
			if row.title != "" {
				p("**%s**", row.title)
				p("")
			}
			p("| panel | what | queries |")
			p("|---|---|---|")
			for _, pn := range row.panels {
				var qs []string
				for _, t := range pn.targets {
					qs = append(qs, "`"+t.expr+"`")
				}
				p("| %s | %s | %s |", cell(pn.title), cell(pn.description), cell(strings.Join(qs, "<br>")))
			}
		}
	}
	return []byte(b.String()), nil
}

// oneLine joins an expression's lines with spaces.
func oneLine(expr string) string { return strings.Join(strings.Fields(expr), " ") }
