package mixin

import (
	_ "embed"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"reflect"
	"slices"
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
	case SpendBudget:
		var budgets []string
		if x.Default != 0 {
			budgets = append(budgets, "`"+number(x.Default)+"` by default")
		}
		for _, d := range slices.Sorted(maps.Keys(x.PerDimension)) {
			budgets = append(budgets, fmt.Sprintf("`%s` for `%s`", number(x.PerDimension[d]), d))
		}
		if len(budgets) == 0 {
			return fmt.Sprintf("no budget (the spend over `%s` for `%s`)", x.Window, x.For)
		}
		return fmt.Sprintf("%s an hour for each value, the spend over `%s` for `%s`", strings.Join(budgets, ", "), x.Window, x.For)
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
	p("infermetrics; the P/D router, invalid-event, model-overflow and usage (spend, pricing,")
	p("attribution) alerts read infermetrics' own.")
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
	p("The example records no usage family: the spend dashboard, the `%s` rules and the usage", UsageRuleGroup)
	p("alerts are checked by `e2e/spend_test.go`, against two infermetrics-proxy deployments with")
	p("attribution and a price table, whose numbers every query of the dashboard must return.")
	p("A test fails when a committed file differs from what the generator writes.")
	p("")
	p("## Loading the rules")
	p("")
	p("Plain Prometheus (and Thanos or Mimir rulers, which take the same files): copy the two rule")
	p("files next to its configuration, name them, and reload it (`kill -HUP <pid>`, or")
	p("`curl -X POST http://<prometheus>:9090/-/reload` with `--web.enable-lifecycle`); its *Alerts* and")
	p("*Rules* pages then list them.")
	p("")
	p("```yaml")
	p("global:")
	p("  external_labels:")
	p("    cluster: eu-1          # optional: names this Prometheus's cluster on the alerts it sends")
	p("rule_files:")
	p("  - recording.yaml")
	p("  - alerts.yaml")
	p("alerting:")
	p("  alertmanagers:")
	p("    - static_configs:")
	p("        - targets: [\"alertmanager:9093\"]")
	p("```")
	p("")
	p("The alerts read the recording rules: load both. `promtool check rules recording.yaml alerts.yaml`")
	p("checks them, `promtool test rules tests.yaml` (beside the two) runs the unit tests. A plain")
	p("Prometheus has no `cluster` or `namespace` label on its series: the rules group by them all the")
	p("same (the label is empty), so each `job` is a deployment; an external label reaches only what")
	p("Prometheus sends out (alerts, remote write), not the rules' input. Scrape routers and gateways")
	p("(the P/D router, infermetrics-proxy) in jobs of their own, never the engines' job. Alertmanager")
	p("groups best by the labels that name a deployment, the summaries being static:")
	p("`group_by: [alertname, %s, model_name]`.", strings.Join(r.JobLabels, ", "))
	p("")
	p("The Prometheus Operator: `kubectl apply -n monitoring -f %s`. A Prometheus selects", PrometheusRuleFile)
	p("PrometheusRules by its `ruleSelector` and `ruleNamespaceSelector`: kube-prometheus-stack's wants")
	p("the label `release` set to the Helm release's name (`kubectl label -n monitoring prometheusrule")
	p("infermetrics release=<release>`), or `prometheus.prometheusSpec.ruleSelectorNilUsesHelmValues:")
	p("false` to select every PrometheusRule. `kubectl get prometheusrule -A` lists them, and the")
	p("Prometheus's *Rules* page shows whether they loaded. There `namespace` and `pod` are target labels,")
	p("`job` is the ServiceMonitor's Service name or the PodMonitor's `<namespace>/<name>` (either's")
	p("`jobLabel` overrides it), `instance` the pod's address, and `cluster` comes from a relabeling or")
	p("the Prometheus's `externalLabels` (then, as above, on the alerts only).")
	p("")
	p("jsonnet (kube-prometheus, mixtool, Tanka): [`mixin/mixin.libsonnet`](../mixin/mixin.libsonnet) is this")
	p("mixin as the monitoring mixins are imported, with `prometheusRules` (the recording rules),")
	p("`prometheusAlerts` (the alerts), `grafanaDashboards` (each dashboard by its file name) and `_config`")
	p("(the parameters, [`mixin/config.json`](../mixin/config.json)). It reads the generated files, so it")
	p("evaluates to exactly them (`TestMixinLibsonnet`, with go-jsonnet). It reads `docs/grafana/` too:")
	p("install the whole repository with jsonnet-bundler, not its `mixin` directory alone.")
	p("")
	p("```sh")
	p("jb install github.com/infermetrics/infermetrics@main")
	p("```")
	p("")
	p("```jsonnet")
	p("local addMixin = import 'kube-prometheus/lib/mixin.libsonnet';")
	p("local infermetrics = addMixin({")
	p("  name: 'infermetrics',")
	p("  mixin: import 'github.com/infermetrics/infermetrics/mixin/mixin.libsonnet',")
	p("});")
	p("// infermetrics.prometheusRules is a PrometheusRule of the rules and alerts,")
	p("// infermetrics.grafanaDashboards the dashboards.")
	p("```")
	p("")
	p("The rules are generated in Go, so `_config` changes none of them: a mixin that sets one of its")
	p("fields fails to evaluate. Generate the files with your parameters (below) and load those; the")
	p("generator's `-config` reads the JSON of `mixin/config.json`.")
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
	p("ratio, `source` for prompt tokens by source, `le` inside a quantile, `kind` for invalid events and")
	p("tokens by kind, each of `Dimensions` for the cost by attribution dimension, the instance labels and")
	p("`engine` for the per-engine and per-server alerts): any other label, `priority`")
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
		p("**How to confirm.** In Prometheus (or Grafana's Explore); add the alert's %s as matchers to see its", "`"+strings.Join(r.JobLabels, "`, `")+"`")
		p("deployment alone:")
		p("")
		p("```promql")
		for i, q := range a.confirm {
			if i > 0 && !strings.HasPrefix(a.confirm[i-1], "#") {
				p("")
			}
			p("%s", q)
		}
		p("```")
		p("")
		p("**First commands, and what to do.** %s", a.action)
		p("")
		p("The alert's rule:")
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
	p("Import: in Grafana, Dashboards, New, Import, upload a JSON file. Grafana asks for the Prometheus")
	p("data source (the file's `__inputs`, `%s`) and writes its uid wherever the file says", datasourceInput)
	p("`${%s}`: the current value of the data source variable, which every query reads", datasourceInput)
	p("(`pkg/services/dashboardimport/utils/dash_template_evaluator.go` of grafana/grafana @ 0425369);")
	p("the variable still switches to another. Provisioned from files (a dashboard provider's directory,")
	p("or the jsonnet mixin's `grafanaDashboards` in ConfigMaps), nothing is asked or replaced: the")
	p("variable's value `${%s}` is no data source, so Grafana takes the first Prometheus data", datasourceInput)
	p("source it lists (`MultiValueVariable` of grafana/scenes @ 0002681), and the viewer picks another")
	p("in the variable. The files are Grafana's classic dashboard model at `schemaVersion` 42, the")
	p("last of that model, which Grafana's v42 migration brought (grafana/grafana#110517, merged")
	p("2025-09-05): Grafana %s or later, the first release made after it (whether 12.2 holds it", minGrafana)
	p("we could not establish); their `__requires` say so. Their panels (time series, stat, heatmap)")
	p("are older than that. Every panel's query is run against a real Prometheus by")
	p("the end-to-end suite, and by promtool in the module's tests on synthetic series of every family")
	p("without cluster or namespace labels; `$__rate_interval` is Grafana's rate window, `$__range` the")
	p("dashboard's time range.")
	p("")
	p("Every dashboard is scoped as the Kubernetes monitoring mixins scope theirs (kubernetes-mixin's")
	p("`dashboards/resources/variables/common.libsonnet` @ 16f3cbb4: a data source, then cluster,")
	p("namespace and pod, each listed under the ones before it, refreshed with the time range): a")
	p("data source variable, then one variable per label of `JobLabels` (%s) and the instance (`%s`,", "`"+strings.Join(r.JobLabels, "`, `")+"`", r.InstanceLabels[0])
	p("the first of `InstanceLabels`), each listing the values of the deployments selected before it,")
	p("then the model and the engine (the gateway dashboard: the backend; the spend dashboard: the")
	p("attribution dimension, its values and how many the top panels keep). Each but the dimension")
	p("and the top takes several values and has an All of any value and none (`%s`): a deployment without a label (outside", allValue)
	p("Kubernetes: no cluster or namespace) is under All beside those with it in the same Prometheus.")
	p("Every series selector of every query, the variables' included, carries the `Selector`")
	p("parameter, as the rules do.")
	p("")
	p("The engine dashboards (engine, token accounting, features) list the deployments, instances,")
	p("models and engines of `%s`, which every server that feeds them exports, one series", scopeFamily.ScrapeName())
	p("per model and engine from start-up: vLLM (`PrometheusStatLogger.__init__` makes each engine's")
	p("series with `make_per_engine`: vllm/v1/metrics/loggers.py @005a810b), an engine instrumented")
	p("with infermetrics, with or without `instrument.WithCacheConfig`, and the front ends built on")
	p("`openaihttp` (infermetrics-proxy, a P/D router), whose Engine exports vLLM's always-on families")
	p("at zero (`TestScopeFamilyOnEveryPath`). A front end's requests (tokens, time to first token,")
	p("inter-token and end-to-end latency, finish reasons, per model) are on the panels that apply")
	p("to them; a panel of what only an engine records says %q in its description, and %q", engineOnlyMark, engineFeatureAt+"...")
	p("the optional feature it needs. All sums the deployments listed: a request through a proxy or a")
	p("router counts there and again at its engine, so pick a job to see one. The gateway dashboard")
	p("lists the deployments whose transport records `%s`: gateways and P/D routers,", gatewayFamily.ScrapeName()+"_count")
	p("from their first request upstream. Which way in is on which dashboard, and which panels stay")
	p("empty on it: [operators.md](operators.md).")
	p("")
	p("The spend dashboard lists the deployments of `%s`, which a front end records with", usageRequests.ScrapeName())
	p("attribution or a price table (infermetrics-proxy's `-attribute` and `-prices`), and `$%s`, one", dimensionVar)
	p("of the label names of those series (Grafana's `label_names`) but the families' own labels and")
	p("the target labels (`JobLabels`, `InstanceLabels`, `ExtraGroupLabels`, `OtherTargetLabels`):")
	p("whatever dimensions a proxy records are offered as they are, without generating the dashboard")
	p("again. Its panels group by `$%s` and keep the values of `$%s`.", dimensionVar, valueVar)
	p("")
	p("The SLO panels (engine and gateway dashboards) take the latency bound of the TTFT and ITL")
	p("objectives as a variable (`$ttft_seconds`, `$itl_seconds`: the histogram's bucket boundaries,")
	p("default the `TTFT` and `ITL` parameters' seconds) and show the share within it over time and")
	p("over the dashboard's range, and the error budget left over the range: 1 - misses / (1 -")
	p("objective), 100%% untouched, below 0 overspent. vLLM's overview dashboard")
	p("(`examples/observability/dashboards/grafana/vllm_overview.json` @ 0b9faa41) shows the share")
	p("within its `$ttft_slo` and `$tpot_slo` the same way, over `$__rate_interval`.")
	for _, bd := range bs {
		p("")
		p("### %s", bd.title)
		p("")
		p("[`%s`](../%s) (uid `%s`): %s", bd.file, bd.file, bd.uid, bd.description)
		p("")
		var vars []string
		for _, v := range bd.variables {
			if v.options != nil {
				vars = append(vars, fmt.Sprintf("`$%s` (one of `%s`, default `%s`)", v.name, v.definition(), number(v.current)))
				continue
			}
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
				p("| %s | %s | %s |", cell(pn.title), cell(pn.fullDescription()), cell(strings.Join(qs, "<br>")))
			}
		}
	}
	return []byte(b.String()), nil
}

// oneLine joins an expression's lines with spaces.
func oneLine(expr string) string { return strings.Join(strings.Fields(expr), " ") }
