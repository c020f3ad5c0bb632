package mixin

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// SpendDashboardFile is the spend and usage dashboard, whose queries read
// the usage families only a front end with attribution or a price table
// records (the end-to-end suite checks it apart, with such a proxy).
const SpendDashboardFile = "docs/grafana/infermetrics-spend.json"

// The spend dashboard's own variables: the dimension to break down by,
// the values of it to show, how many values the top panels keep.
const (
	dimensionVar = "dimension"
	valueVar     = "value"
	topVar       = "top"
)

// topChoices are the choices of $top, topDefault its default.
var (
	topChoices = []float64{5, 10, 20, 50}
	topDefault = 10.0
)

// wholeKinds are the token kinds that partition a request's tokens: the
// prompt not cached, its cache reads and writes, the output. The others
// are parts of these (reasoning of output; audio and image of the prompt
// or the output), so a total over every kind would count them twice.
var wholeKinds = []stats.TokenKind{stats.TokenInput, stats.TokenCacheRead, stats.TokenCacheWrite, stats.TokenOutput}

// kindsMatcher selects the token kinds ks.
func kindsMatcher(ks []stats.TokenKind) string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.String()
	}
	return instrument.KeyKind + `=~"` + strings.Join(names, "|") + `"`
}

// dimensionRegex is the regex of $dimension's label names: every label of
// the usage requests but those that are no attribution dimension (the
// families' own labels, the Config's target labels, the name, the
// OpenTelemetry scope labels a collector adds).
func dimensionRegex(c Config) string {
	not := slices.Concat([]string{"__name__"}, usageLabels, c.JobLabels, c.ExtraGroupLabels, c.InstanceLabels, c.OtherTargetLabels)
	slices.Sort(not)
	quoted := make([]string, 0, len(not)+1)
	for _, l := range slices.Compact(not) {
		quoted = append(quoted, regexp.QuoteMeta(l))
	}
	quoted = append(quoted, "otel_scope_.*")
	return "/^(?!(?:" + strings.Join(quoted, "|") + ")$).+$/"
}

// byDimension groups by the chosen dimension.
var byDimension = by("$" + dimensionVar)

// topOf keeps the series of expr (grouped by the dimension) of the $top
// values of ranking (an expression grouped by the dimension).
func topOf(expr, ranking string) string {
	return expr + " and on ($" + dimensionVar + ") topk($" + topVar + ", " + ranking + ")"
}

// increaseOver is the increase of counter f in s over the dashboard's
// range, grouped by g.
func (s scope) increaseOver(f views.Family, g grouping) string {
	return g.aggregate("sum", "increase("+s.sel(f, f.ScrapeName())+"["+dashboardRange+"])")
}

// spendBoard is the spend and usage dashboard: who spends and uses what
// (top values of a dimension by cost and by tokens), cost by model, what
// the prompt cache saved, tokens by kind, why requests failed, latency by
// value, and how well attribution and pricing work (unpriced requests,
// attribution past its cap, requests without a value).
func spendBoard(c Config) board {
	s, vars := newScope(c, append(jobVars(c, usageRequests),
		scopeVar{label: modelName, title: "Model", from: usageRequests})...)
	dimension := variable{name: dimensionVar, title: "Dimension", labelNames: true, regex: dimensionRegex(c),
		selector: s.sel(usageRequests, usageRequests.ScrapeName())}
	value := variable{name: valueVar, title: "Value", label: "$" + dimensionVar, selector: s.sel(usageRequests, usageRequests.ScrapeName())}
	top := variable{name: topVar, title: "Top", options: topChoices, current: topDefault}
	// The families that carry the dimensions, at the values chosen; the
	// overflow counter carries none.
	v := s.with("$" + dimensionVar + `=~"$` + valueVar + `"`)
	d := "$" + dimensionVar
	dl := legendOf(d)
	all := by()
	tokens := v.with(kindsMatcher(wholeKinds))
	rate := v.sumRate
	costRank := v.increaseOver(usageCost, byDimension)
	tokenRank := tokens.increaseOver(usageTokens, byDimension)
	slowest := c.Quantiles[len(c.Quantiles)-1]
	wholes := make([]string, len(wholeKinds))
	for i, k := range wholeKinds {
		wholes[i] = k.String()
	}
	whole := strings.Join(wholes, ", ")
	topRow := boardRow{title: "Who spends: the top values of the dimension", panels: []panel{
		{title: "Cost over the range, top $top", unit: "currencyUSD", width: 12, stat: true,
			description: fmt.Sprintf("The $top values of $dimension that cost most over the dashboard's time range (%s, in the price table's currency: US dollars for LiteLLM's list). Unpriced requests cost nothing here.", usageCost.ScrapeName()),
			targets:     []target{{"topk($" + topVar + ", " + costRank + ")", dl}}},
		{title: "Tokens over the range, top $top", unit: "short", width: 12, stat: true,
			description: fmt.Sprintf("The $top values of $dimension that used most tokens over the dashboard's time range: %s (%s), which partition a request's tokens; reasoning, audio and image tokens are parts of them.", whole, usageTokens.ScrapeName()),
			targets:     []target{{"topk($" + topVar + ", " + tokenRank + ")", dl}}},
		{title: "Spend per hour, top $top", unit: "currencyUSD", width: 12,
			description: "The cost rate of the $top values of $dimension that cost most over the range, per hour.",
			targets:     []target{{topOf(perHour+" * "+rate(usageCost, byDimension), costRank), dl}}},
		{title: "Tokens per second, top $top", unit: "short", width: 12,
			description: fmt.Sprintf("The token rate (%s) of the $top values of $dimension that used most tokens over the range.", whole),
			targets:     []target{{topOf(tokens.sumRate(usageTokens, byDimension), tokenRank), dl}}},
	}}
	savings := func(g grouping) string {
		return perHour + " * (" + rate(usageUncached, g) + " - " + rate(usageCost, g) + ")"
	}
	costRow := boardRow{title: "Cost", panels: []panel{
		{title: "Spend per hour by model", unit: "currencyUSD", width: 8,
			description: "The cost rate of each model, per hour, for the values of $dimension chosen.",
			targets:     []target{{perHour + " * " + rate(usageCost, by(modelName)), legendOf(modelName)}}},
		{title: "Cache savings per hour by model", unit: "currencyUSD", width: 8, signed: true,
			description: fmt.Sprintf("What prompt caching saved per hour: the cost of the same tokens without a prompt cache (%s: cache reads and writes at the input price) minus the cost. Negative when cache writes cost more than the reads saved: caching did not pay.", usageUncached.ScrapeName()),
			targets:     []target{{savings(by(modelName)), legendOf(modelName)}}},
		{title: "Cost over the range", unit: "currencyUSD", width: 8, stat: true,
			description: "The cost over the dashboard's time range, what the same requests would have cost without a prompt cache, and the difference, what caching saved (negative when it cost more).",
			targets: []target{{v.increaseOver(usageCost, all), "cost"},
				{v.increaseOver(usageUncached, all), "without a prompt cache"},
				{v.increaseOver(usageUncached, all) + " - " + v.increaseOver(usageCost, all), "saved by caching"}}},
		{title: "Spend per hour by $dimension and model, top $top", unit: "currencyUSD", width: 12,
			description: "The cost rate per hour of each model for the $top values of $dimension that cost most over the range.",
			targets:     []target{{topOf(perHour+" * "+rate(usageCost, byDimension.also(modelName)), costRank), dl + " " + legendOf(modelName)}}},
		{title: "Cache savings per hour by $dimension, top $top", unit: "currencyUSD", width: 12, signed: true,
			description: "What prompt caching saved per hour for the $top values of $dimension that cost most over the range; negative when cache writes cost more than the reads saved.",
			targets:     []target{{topOf(savings(byDimension), costRank), dl}}},
	}}
	errorType := label(instrument.KeyErrorType)
	usage := boardRow{title: "Tokens and requests", panels: []panel{
		{title: "Tokens by kind (tokens/s)", unit: "short", width: 12,
			description: fmt.Sprintf("Tokens by kind (%s): input is the prompt neither read from nor written to a prompt cache, so that input, cache_read, cache_write and output partition the tokens; reasoning is a part of output, input_audio and input_image parts of the prompt, output_audio and output_image parts of the output. A kind the responses did not report is not counted.", usageTokens.ScrapeName()),
			targets:     []target{{rate(usageTokens, by(instrument.KeyKind)), legendOf(instrument.KeyKind)}}},
		{title: "Requests by finish reason and error type (req/s)", unit: "reqps", width: 12,
			description: fmt.Sprintf("Requests by finished_reason and, for those that failed or were aborted for a known cause, error_type (%s; _OTHER a failure of unknown cause): %s.", usageErrorTypes(), usageRequests.ScrapeName()),
			targets: []target{{rate(usageRequests, by(finishedReason, errorType)),
				legendOf(finishedReason) + " " + legendOf(errorType)}}},
		{title: "Failed requests by $dimension and error type (req/s)", unit: "reqps", width: 12,
			description: "The requests that failed, by value of $dimension and error_type: who meets rate limits, context length refusals, authentication failures.",
			targets: []target{{v.with(errorType+`!=""`).sumRate(usageRequests, byDimension.also(errorType)),
				dl + " " + legendOf(errorType)}}},
		{title: "Requests by $dimension (req/s), top $top", unit: "reqps", width: 12,
			description: "The request rate of the $top values of $dimension that cost most over the range.",
			targets:     []target{{topOf(rate(usageRequests, byDimension), costRank), dl}}},
	}}
	latency := boardRow{title: "Latency", panels: []panel{
		{title: fmt.Sprintf("Request duration by $dimension (p%s)", number(slowest*100)), unit: "s", width: 12,
			description: fmt.Sprintf("The %s quantile of the time from a request's arrival to the end of its response (%s), per value of $dimension.", number(slowest), usageDuration.ScrapeName()),
			targets:     v.quantiles(usageDuration, byDimension, " "+dl, slowest)},
		{title: fmt.Sprintf("Time to first token by $dimension (p%s)", number(slowest*100)), unit: "s", width: 12,
			description: fmt.Sprintf("The %s quantile of the time from a streamed request's arrival to its first content chunk (%s), per value of $dimension.", number(slowest), usageTTFT.ScrapeName()),
			targets:     v.quantiles(usageTTFT, byDimension, " "+dl, slowest)},
	}}
	health := boardRow{title: "Attribution and pricing", panels: []panel{
		{title: "Unpriced requests by model (req/s)", unit: "reqps", width: 8,
			description: fmt.Sprintf("Requests with usage whose model has no price in the price table (%s): never priced by a guess, so their cost is on no cost panel. InfermetricsUnpricedRequests pages on them.", usageUnpriced.ScrapeName()),
			targets:     []target{{rate(usageUnpriced, by(modelName)), legendOf(modelName)}}},
		{title: "Attribution overflow by dimension (req/s)", unit: "reqps", width: 8,
			description: fmt.Sprintf("Requests whose value of a dimension was new past its cap and recorded as %s (%s, by dimension; %s: the combination of values was past the cap on combinations). InfermetricsAttributionOverflow pages on them.", instrument.AttributionOverflow, attrOverflow.ScrapeName(), instrument.OverflowCombinations),
			targets:     []target{{s.sumRate(attrOverflow, by(dimensionLabel)), legendOf(dimensionLabel)}}},
		{title: "Requests without a value of $dimension (req/s)", unit: "reqps", width: 8,
			description: fmt.Sprintf("Requests recorded with no value of $dimension (%s), one that could not be a label (%s: longer than the bound, not UTF-8) or one past the cap (%s).", instrument.AttributionNone, instrument.AttributionInvalid, instrument.AttributionOverflow),
			targets:     []target{{v.with(d+`=~"`+instrument.AttributionNone+"|"+foldedValues+`"`).sumRate(usageRequests, byDimension), dl}}},
	}}
	return board{file: SpendDashboardFile, uid: "infermetrics-spend", title: "infermetrics: spend and usage",
		description: fmt.Sprintf("Who used the models and what it cost, from the usage families (infermetrics-proxy with -attribute or -prices, a Recorder with instrument.WithAttribution or WithPriceTable): the top values of an attribution dimension by cost and by tokens, cost by model, what the prompt cache saved, tokens by kind, why requests failed, latency, unpriced requests and attribution past its cap. Scoped by %s, %s and model, listed from %s; $dimension is one of the label names of its series that are no target or family label, so any dimension a proxy records is offered without changing the dashboard; $value filters its values, $top sets how many the top panels keep.",
			strings.Join(c.JobLabels, ", "), c.InstanceLabels[0], usageRequests.ScrapeName()),
		variables: append(vars, dimension, value, top),
		rows:      []boardRow{topRow, costRow, usage, latency, health}}
}
