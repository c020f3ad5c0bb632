package mixin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// The usage families the rules, the alerts and the spend dashboard read.
var (
	usageTokens    = family(instrument.NameUsageTokens)
	usageRequests  = family(instrument.NameUsageRequests)
	usageCost      = family(instrument.NameUsageCost)
	usageUncached  = family(instrument.NameUsageCostUncached)
	usageUnpriced  = family(instrument.NameUsageUnpricedRequests)
	usageDuration  = family(instrument.NameUsageRequestDuration)
	usageTTFT      = family(instrument.NameUsageTimeToFirstToken)
	attrOverflow   = family(instrument.NameAttributionOverflow)
	dimensionLabel = label(instrument.KeyDimension)
)

// foldedValues matches the dimension values that stand for many values,
// not one: those that could not be labels, and those past the cap.
var foldedValues = instrument.AttributionInvalid + "|" + instrument.AttributionOverflow

// perHour turns a rate per second into one per hour, the unit of the
// budgets and of the spend panels.
const perHour = "3600"

// Names of the usage recording rules.
func (r rules) usageCostRate(lvl string) string {
	return recordName(lvl, usageCost, window(r.RateWindow))
}
func (r rules) usageSavingsRate(lvl string) string {
	return recordName(lvl, usageCost, "savings_"+window(r.RateWindow))
}

// dimensionLevel is the level of the rules by model and dimension d.
func dimensionLevel(d string) string { return level + "_" + d }

// UsageRuleGroup is the group of the usage families' recording rules,
// whose series only a front end with attribution or a price table records
// (the end-to-end suite checks them apart, with such a proxy).
const UsageRuleGroup = "infermetrics-usage"

// usageGroup returns the recording rules of the usage families: per model
// the token rate by kind, the cost and uncached cost rates and what the
// prompt cache saved (uncached minus cost, negative when cache writes cost
// more than the reads saved), and per model and dimension of Dimensions
// the cost rate and the savings.
func (r rules) usageGroup() ruleGroup {
	cost, uncached := r.usageCostRate(level), recordName(level, usageUncached, window(r.RateWindow))
	g := ruleGroup{name: UsageRuleGroup, rules: []rule{
		{record: recordName(level, usageTokens, window(r.RateWindow)), expr: r.q.sumRate(usageTokens, r.agg.also(instrument.KeyKind))},
		{record: cost, expr: r.q.sumRate(usageCost, r.agg)},
		{record: uncached, expr: r.q.sumRate(usageUncached, r.agg)},
		{record: r.usageSavingsRate(level), expr: uncached + " - " + cost},
	}}
	for _, d := range r.Dimensions {
		byDim := r.agg.also(d)
		g.rules = append(g.rules,
			rule{record: r.usageCostRate(dimensionLevel(d)), expr: r.q.sumRate(usageCost, byDim)},
			rule{record: r.usageSavingsRate(dimensionLevel(d)), expr: r.q.sumRate(usageUncached, byDim) + "\n-\n" + r.q.sumRate(usageCost, byDim)})
	}
	return g
}

// testDimension is the attribution dimension of the unit tests' series:
// the first of Dimensions, tenant without any.
func (r rules) testDimension() string {
	if len(r.Dimensions) > 0 {
		return r.Dimensions[0]
	}
	return "tenant"
}

// usageAlerts are the alerts of the usage families: unpriced traffic,
// attribution past its cap, and with a budget, spend over it.
func (r rules) usageAlerts(target, engine0, perModel labelSet, w int) []alert {
	out := []alert{r.unpricedAlert(engine0, perModel, w), r.attributionOverflowAlert(target, w)}
	if a, ok := r.spendBudgetAlert(target); ok {
		out = append(out, a)
	}
	return out
}

func (r rules) unpricedAlert(engine0, perModel labelSet, w int) alert {
	at := w + minutes(r.UnpricedFor) + 5
	dim := r.testDimension()
	// Two values of a dimension: the alert sums them, one page per model.
	series := func(name string, growing bool) []inputSeries {
		var out []inputSeries
		for _, v := range []string{"a", "b"} {
			out = append(out, inputSeries{engine0.with(labelPair{dim, v}).series(name), growth(growing, at+5)})
		}
		return out
	}
	return alert{
		name:    "InfermetricsUnpricedRequests",
		summary: "Requests are recorded without a price.",
		description: fmt.Sprintf("Requests of model %s (%s) with usage have no price in the price table, in every %s for %s: "+
			"their cost is on no cost series.", model, r.where(), r.RateWindow, r.UnpricedFor),
		means: fmt.Sprintf("`%s` keeps growing: the program that records (infermetrics-proxy with `-prices`, a Recorder "+
			"with `instrument.WithPriceTable`) serves a model none of whose names the price table has, and counts its "+
			"requests as unpriced instead of guessing a price. The spend dashboard, the cost rules and "+
			"InfermetricsSpendOverBudget leave them out: the spend they show is less than the real one.",
			usageUnpriced.ScrapeName()),
		confirm: []string{
			r.q.sumIncrease(usageUnpriced, "1h", r.byServer()),
			r.q.sumIncrease(usageCost, "1h", r.agg),
		},
		action: "The first query names the models and servers, the second the models that are priced. A request is " +
			"priced by the response's model, then the request's, each also without provider prefixes and a date " +
			"suffix (`go doc github.com/infermetrics/infermetrics/pricing`); look the name up in the table the proxy " +
			"reads (`jq 'has(\"<model>\")' <prices.json>`; its files: `kubectl get pod -n <namespace> <pod> -o " +
			"jsonpath='{.spec.containers[*].args}'`). Add the model to an override file of your own (`-prices` " +
			"again, after LiteLLM's list: its entry replaces the list's) and restart the proxy; a model you do not " +
			"bill for (a self-hosted one) can have prices of 0.",
		conditions: []condition{{
			expr:        r.increases(r.agg, usageUnpriced),
			forDuration: r.UnpricedFor, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "requests without a price keep coming", at: minute(at), firing: fires(perModel),
				series: series(usageUnpriced.ScrapeName(), true)},
			{name: "unpriced requests stopped", at: minute(at), series: series(usageUnpriced.ScrapeName(), false)},
			{name: "priced requests only", at: minute(at), series: series(usageCost.ScrapeName(), true)},
		},
	}
}

// twoModels are the series name of target with p, of two models (engine
// 0), each with values: what an alert summing over models reads.
func twoModels(target labelSet, name string, p labelPair, values string) []inputSeries {
	var out []inputSeries
	for _, m := range []string{testModel, testModel + "2"} {
		out = append(out, inputSeries{target.with(labelPair{instrument.KeyModelName, m}, labelPair{instrument.KeyEngine, "0"}, p).series(name), values})
	}
	return out
}

func (r rules) attributionOverflowAlert(target labelSet, w int) alert {
	at := w + minutes(r.AttributionOverflowFor) + 5
	dim := r.testDimension()
	// Overflows of two models: the alert sums them, one page per
	// deployment and dimension.
	series := func(dimension string, growing bool) []inputSeries {
		return twoModels(target, attrOverflow.ScrapeName(), labelPair{dimensionLabel, dimension}, growth(growing, at+5))
	}
	job := r.jobOf(target)
	return alert{
		name:    "InfermetricsAttributionOverflow",
		summary: "An attribution dimension has more values than its cap.",
		description: fmt.Sprintf("Deployment %s records requests with dimension {{ $labels.%s }} folded into %s: "+
			"its new values are not told apart.", r.where(), dimensionLabel, instrument.AttributionOverflow),
		means: fmt.Sprintf("`%s` grows: the program that records saw more distinct values of a dimension than its cap "+
			"(infermetrics-proxy's `-attribute-max-values`, `instrument.Dimension.MaxValues`; the cap is per process, "+
			"over every model) and records the requests of each new value under `%s`. `%s=%q` counts requests whose "+
			"combination of values was past the cap on combinations: all their dimensions are `%s`. Spend and "+
			"tokens stay right in total, but the values past the cap are one series: who they are is lost until the "+
			"process restarts.", attrOverflow.ScrapeName(), instrument.AttributionOverflow, dimensionLabel, instrument.OverflowCombinations,
			instrument.AttributionOverflow),
		confirm: []string{
			r.q.sumIncrease(attrOverflow, "1h", r.perTarget().also(dimensionLabel)),
			"count by (" + strings.Join(r.deploy.also("__name__").labels, ", ") + ") (" + r.q.sel(usageRequests.ScrapeName()) + ")",
		},
		action: "The first query names the proxies and dimensions, the second the series each deployment's usage " +
			"requests have. Look at the values the dimension gets: `curl -s http://<instance>/metrics | grep " +
			"'^infermetrics_usage_requests_total' | grep -o '<dimension>=\"[^\"]*\"' | sort | uniq -c | sort -rn | head`. " +
			"Values made per request (a request id or a timestamp in the header, a user id per session) will always " +
			"overflow: take the dimension from another header. Real values beyond the cap: raise " +
			"`-attribute-max-values` (each value costs series: docs/proxy.md states how many) and restart.",
		conditions: []condition{{
			expr:        r.increases(r.deploy.also(dimensionLabel), attrOverflow),
			forDuration: r.AttributionOverflowFor, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "values past the cap", at: minute(at), firing: fires(job.with(labelPair{dimensionLabel, dim})),
				series: series(dim, true)},
			{name: "overflow stopped", at: minute(at), series: series(dim, false)},
			{name: "values and combinations past the cap", at: minute(at),
				firing: []firing{{labels: job.with(labelPair{dimensionLabel, dim})}, {labels: job.with(labelPair{dimensionLabel, instrument.OverflowCombinations})}},
				series: slices.Concat(series(dim, true), series(instrument.OverflowCombinations, true))},
		},
	}
}

// spendAlert is the name of the alert of the spend budgets.
const spendAlert = "InfermetricsSpendOverBudget"

// budgeted are the dimensions of Dimensions with a budget.
func (r rules) budgeted() []string {
	return slices.DeleteFunc(slices.Clone(r.Dimensions), func(d string) bool { return r.SpendBudget.of(d) == 0 })
}

// budgetText lists the budgets per hour: tenant 10, user 5.
func (r rules) budgetText() string {
	var parts []string
	for _, d := range r.budgeted() {
		parts = append(parts, d+" "+number(r.SpendBudget.of(d)))
	}
	return strings.Join(parts, ", ")
}

// valueTemplate is the template of the dimension and value an alert of
// the budget names ("tenant acme"): each budgeted dimension's, of which
// the alert has one label (an annotation sees the expression's labels,
// not the rule's dimension label).
func (r rules) valueTemplate() string {
	var b strings.Builder
	for _, d := range r.budgeted() {
		b.WriteString("{{ with $labels." + d + " }}" + d + " {{ . }}{{ end }}")
	}
	return b.String()
}

// spend reads the series a budget is over: the rules' own, at the
// budget's window.
func (r rules) spend() query {
	return query{matchers: r.q.matchers, window: string(r.SpendBudget.Window)}
}

// spendOverBudget is the condition of dimension d's budget.
func (r rules) spendOverBudget(d string) string {
	q := r.spend().with(d+`!=""`, d+`!~"`+foldedValues+`"`)
	return perHour + " * " + q.sumRate(usageCost, r.deploy.also(d)) + "\n> " + number(r.SpendBudget.of(d))
}

// spendOverBudget fires when one value of a budgeted dimension spends more
// per hour than its budget; ok is false without a budget.
func (r rules) spendBudgetAlert(target labelSet) (alert, bool) {
	dims := r.budgeted()
	if len(dims) == 0 {
		return alert{}, false
	}
	win := minutes(r.SpendBudget.Window)
	at := win + minutes(r.SpendBudget.For) + 5
	job := r.jobOf(target)
	// The spend of one value, per hour, over two models (summed).
	spend := func(d, value string, amount float64) []inputSeries {
		return twoModels(target, usageCost.ScrapeName(), labelPair{d, value}, ramp(0, amount/60/2, at+5))
	}
	a := alert{
		name:    spendAlert,
		summary: "A tenant, user or API key spends over its budget.",
		description: fmt.Sprintf("%s spent more per hour over the last %s than the budget of its dimension (%s per hour) "+
			"in deployment %s.", r.valueTemplate(), r.SpendBudget.Window, r.budgetText(), r.where()),
		means: fmt.Sprintf("The cost rate of one value of an attribution dimension (`%s`, summed over the deployment's "+
			"models and servers) over the last %s, times 3600, is above its dimension's budget for %s: %s per hour, in "+
			"the price table's currency (`SpendBudget`; the alert's `%s` label names the dimension, the dimension's own "+
			"label the value). `%s` counts as one value, the requests without one; `%s` and `%s` stand for many values "+
			"and are never paged on (InfermetricsAttributionOverflow is about them). Unpriced requests are not in the "+
			"spend (InfermetricsUnpricedRequests).", usageCost.ScrapeName(), r.SpendBudget.Window, r.SpendBudget.For,
			r.budgetText(), dimensionLabel, instrument.AttributionNone, instrument.AttributionOverflow, instrument.AttributionInvalid),
		action: "The first query ranks the values by spend per hour, the second splits one value's by model. Find who " +
			"the value is: a header's value as the client sent it, an end-user id, or an API key's hash prefix (the " +
			"first 12 hex digits of HMAC-SHA256 of the key, keyed with the proxy's salt: `printf %s \"$KEY\" | openssl " +
			"dgst -sha256 -hmac \"$SALT\"` for each key you issued). The spend dashboard, with the dimension and the " +
			"value chosen, shows the tokens by kind and the models. Then limit the client at the gateway, ask its owner, " +
			"or raise the budget (`SpendBudget`, then `cd mixin && go run ./cmd/generate -config my.json -out DIR`). " +
			"On a proxy: `curl -s http://<instance>/metrics | grep '^infermetrics_usage_cost_total' | grep '<dimension>=\"<value>\"'`.",
	}
	for i, d := range dims {
		a.conditions = append(a.conditions, condition{expr: r.spendOverBudget(d), forDuration: r.SpendBudget.For,
			labels: []labelPair{{"severity", "warning"}, {dimensionLabel, d}}})
		budget := r.SpendBudget.of(d)
		over := func(value string) firing { return firing{labels: job.with(labelPair{d, value}), condition: i} }
		a.scenarios = append(a.scenarios,
			scenario{name: d + ": a value over its budget", at: minute(at), firing: []firing{over("acme")},
				series: slices.Concat(spend(d, "acme", 2*budget), spend(d, "beta", budget/2))},
			scenario{name: d + ": values within the budget", at: minute(at),
				series: slices.Concat(spend(d, "acme", budget/2), spend(d, "beta", budget/2))},
			scenario{name: d + ": the values that stand for many over the budget", at: minute(at),
				series: slices.Concat(spend(d, instrument.AttributionOverflow, 2*budget), spend(d, instrument.AttributionInvalid, 2*budget))},
			scenario{name: d + ": requests without a value over the budget", at: minute(at), firing: []firing{over(instrument.AttributionNone)},
				series: spend(d, instrument.AttributionNone, 2*budget)},
		)
		// The spend per value of each dimension, ranked; one value's by model.
		a.confirm = append(a.confirm,
			"sort_desc("+perHour+" * "+r.spend().sumRate(usageCost, r.deploy.also(d))+")",
			perHour+" * "+r.spend().with(eq(d, "<value>")).sumRate(usageCost, r.agg.also(d)))
	}
	return a, true
}

// usageErrorTypes are the error.type values of the requests panels'
// descriptions.
func usageErrorTypes() string {
	var out []string
	for _, e := range stats.ErrorTypes() {
		out = append(out, "`"+e.String()+"`")
	}
	return strings.Join(out, ", ")
}

// exampleBudget is the budget the runbook shows InfermetricsSpendOverBudget
// with when the Config has none: per hour, on a dimension tenant.
const exampleBudget = 10

// documented returns the alerts the runbook describes: alerts, and
// InfermetricsSpendOverBudget as a budget of exampleBudget on a dimension
// tenant would make it when alerts lack it (the Config has no budget), so
// that its runbook_url always has a section to point to.
func (r rules) documented(alerts []alert, target labelSet) []alert {
	if slices.ContainsFunc(alerts, func(a alert) bool { return a.name == spendAlert }) {
		return alerts
	}
	ex := r.Config
	ex.Dimensions = []string{"tenant"}
	ex.SpendBudget.Default, ex.SpendBudget.PerDimension = exampleBudget, nil
	a, _ := newRules(ex).spendBudgetAlert(target)
	a.means = fmt.Sprintf("Generated only with a budget (`Dimensions` and `SpendBudget`, which these files set none of): "+
		"shown here as a budget of %d per hour on a dimension `tenant` makes it. ", exampleBudget) + a.means
	return append(slices.Clone(alerts), a)
}
