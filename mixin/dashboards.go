package mixin

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// board is a dashboard: what the generator builds with Grafana's SDK and
// docs/monitoring.md lists.
type board struct {
	file, uid, title, description string
	variables                     []variable
	rows                          []boardRow
}

// variable is a query variable of a dashboard: the values of label on the
// series of selector.
type variable struct {
	name, title, selector string
	all                   bool // an All option (a regular expression that matches any value), several values at once
}

// definition is the variable's query, as Grafana's label_values writes it.
func (v variable) definition() string {
	return fmt.Sprintf("label_values(%s, %s)", v.selector, v.name)
}

// boardRow is a row of panels; without a title the panels have no row.
type boardRow struct {
	title  string
	panels []panel
}

// panel is a time series or a heatmap, width out of 24 and 8 high.
type panel struct {
	title, description, unit string
	width                    uint32
	heatmap, stacked         bool
	targets                  []target
}

type target struct{ expr, legend string }

// rateInterval is the window of the dashboards' rates.
const rateInterval = "$__rate_interval"

// matchVariables are the matchers of the dashboard's variables on the
// labels of the same names.
func matchVariables(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + `=~"$` + n + `"`
	}
	return out
}

// quantiles are one target per quantile of a histogram family, grouped
// by g.
func quantiles(q query, f views.Family, g grouping, legend string, qs ...float64) []target {
	var out []target
	for _, x := range qs {
		out = append(out, target{q.quantile(x, f, g), "p" + number(x*100) + legend})
	}
	return out
}

// The families only the dashboards read.
var (
	iterationTokens   = family(instrument.NameIterationTokens)
	waitingByReason   = family(instrument.NameNumRequestsWaitingByReason)
	externalHits      = family(instrument.NameExternalPrefixCacheHits)
	externalQueries   = family(instrument.NameExternalPrefixCacheQueries)
	cachedBySource    = familyBySource(instrument.NamePromptTokensCached)
	requestPrompt     = family(instrument.NameRequestPromptTokens)
	requestGeneration = family(instrument.NameRequestGenerationTokens)
	prefillComputed   = family(instrument.NameRequestPrefillKVComputedTokens)
	httpRequests      = family(instrument.NameHTTPRequests)
	httpDuration      = family(instrument.NameHTTPRequestDuration)
	clientDuration    = family(instrument.NameGenAIClientOperationDuration)
	clientFirstChunk  = family(instrument.NameGenAIClientTimeToFirstChunk)
	clientTokens      = family(instrument.NameGenAIClientTokenUsage)
)

// Label names the dashboards group by.
var (
	modelName  = instrument.KeyModelName
	engineName = instrument.KeyEngine
	source     = instrument.KeySource
	backend    = label(instrument.KeyBackend)
	role       = label(instrument.KeyBackendRole)
	errorType  = label(instrument.KeyErrorType)
	tokenType  = label(instrument.KeyGenAITokenType)
)

// legendOf is the legend that shows a label's value.
func legendOf(label string) string { return "{{" + label + "}}" }

// engineBoard is the engine dashboard: a vLLM-compatible engine's
// throughput, THE RULE's iteration tokens, latencies, queue, KV cache and
// finish reasons, per model and engine.
func engineBoard() board {
	q := query{matchers: matchVariables(modelName, engineName), window: rateInterval}
	all := by()
	p := []panel{
		{title: "Prompt tokens by source (tokens/s)", unit: "short", width: 12,
			description: "Prompt tokens by where their KV came from: computed here, the local prefix cache, a KV transfer.",
			targets:     []target{{q.sumRate(promptBySource, by(source)), legendOf(source)}}},
		{title: "Generation and total prompt throughput (tokens/s)", unit: "short", width: 12,
			description: "Generated tokens and prompt tokens of every source.",
			targets: []target{{q.sumRate(generation, all), "generation"},
				{q.sumRate(promptTokens, all), "prompt (all sources)"}}},
		{title: "Iteration tokens (computed + generated per step)", unit: "short", width: 12, heatmap: true,
			description: "Tokens an engine step computed: the prompt tokens computed for requests whose first token came in the step, plus the tokens generated in it (THE RULE).",
			targets:     []target{{q.sumRateOf(iterationTokens.ScrapeName()+"_bucket", by("le")), legendOf("le")}}},
		{title: "Iteration tokens quantiles", unit: "short", width: 12,
			description: "Tokens per engine step: quantiles and mean.",
			targets: append(quantiles(q, iterationTokens, all, "", 0.5, 0.9),
				target{q.mean(iterationTokens, all), "mean"})},
		{title: "Time to first token", unit: "s", width: 8, description: "From a request's arrival to its first token.",
			targets: quantiles(q, ttft, all, "", 0.5, 0.9, 0.99)},
		{title: "Inter-token latency", unit: "s", width: 8, description: "Between two outputs of a request.",
			targets: quantiles(q, itl, all, "", 0.5, 0.9, 0.99)},
		{title: "End-to-end request latency", unit: "s", width: 8, description: "From a request's arrival to its end.",
			targets: quantiles(q, e2eLatency, all, "", 0.5, 0.9, 0.99)},
		{title: "Requests running and waiting", unit: "short", width: 8,
			description: "Requests in the engines' batches and in their queues, the queue by reason.",
			targets: []target{{all.aggregate("sum", q.sel(running.ScrapeName())), "running"},
				{all.aggregate("sum", q.sel(waiting.ScrapeName())), "waiting"},
				{by(label(instrument.KeyWaitingReason)).aggregate("sum", q.sel(waitingByReason.ScrapeName())), "waiting: " + legendOf(label(instrument.KeyWaitingReason))}}},
		{title: "KV cache usage", unit: "percentunit", width: 8, description: "The share of each engine's KV cache blocks in use.",
			targets: []target{{by(engineName).aggregate("max", q.sel(kvCacheUsage.ScrapeName())), "engine " + legendOf(engineName)}}},
		{title: "Prefix cache hit rate", unit: "percentunit", width: 8,
			description: "Prompt tokens found in the local prefix cache, and through a KV connector, of those looked up.",
			targets: []target{{q.sumRate(prefixHits, all) + " / " + q.sumRate(prefixQueries, all), "local prefix cache"},
				{q.sumRate(externalHits, all) + " / " + q.sumRate(externalQueries, all), "external (KV connector)"}}},
		{title: "Finished requests by reason (req/s)", unit: "reqps", width: 12,
			description: "Finished requests by finished_reason: stop, length, abort, error, repetition.",
			targets:     []target{{q.sumRate(requestSuccess, by(finishedReason)), legendOf(finishedReason)}}},
		{title: "Preemptions (per s)", unit: "short", width: 12, description: "Requests preempted for lack of KV cache blocks.",
			targets: []target{{q.sumRate(preemptions, all), "preemptions"}}},
	}
	return board{file: "docs/grafana/infermetrics.json", uid: "infermetrics-vllm", title: "infermetrics: vLLM-compatible engine metrics",
		description: "A vLLM-compatible engine's throughput by prompt-token source, iteration tokens, latencies, queue, KV cache, prefix cache and finish reasons, per model and engine.",
		variables: []variable{
			{name: modelName, title: "Model", selector: running.ScrapeName(), all: true},
			{name: engineName, title: "Engine", selector: selector(running.ScrapeName(), matchVariables(modelName)...), all: true},
		},
		rows: []boardRow{{panels: p}}}
}

// gatewayBoard is the dashboard of a gateway or P/D router: what its
// clients see, the P/D legs, each backend, the HTTP families and each
// model.
func gatewayBoard(c Config) board {
	job := c.JobLabels[0]
	q := query{matchers: matchVariables(job, modelName), window: rateInterval}
	http := query{matchers: matchVariables(job), window: rateInterval}
	backends := query{matchers: matchVariables(job, backend), window: rateInterval}
	all := by()
	client := boardRow{title: "What clients see", panels: []panel{
		{title: "Requests by finish reason (req/s)", unit: "reqps", width: 8,
			description: "The gateway's finished requests by finished_reason: error counts upstreams that failed or cut a stream, abort clients that left.",
			targets:     []target{{q.sumRate(requestSuccess, by(finishedReason)), legendOf(finishedReason)}}},
		{title: "Error ratio", unit: "percentunit", width: 8,
			description: "The share of finished requests that ended in error.",
			targets: []target{{q.with(eq(finishedReason, errorReason)).sumRate(requestSuccess, all) + " / " +
				q.sumRate(requestSuccess, all), "error"}}},
		{title: "Requests in flight", unit: "short", width: 8, description: "Requests the gateway is serving.",
			targets: []target{{all.aggregate("sum", q.sel(running.ScrapeName())), "running"}}},
		{title: "Time to first token", unit: "s", width: 8, description: "From the gateway receiving a request to it forwarding the first content chunk.",
			targets: quantiles(q, ttft, all, "", c.Quantiles...)},
		{title: "End-to-end request latency", unit: "s", width: 8, description: "From the gateway receiving a request to its response's end.",
			targets: quantiles(q, e2eLatency, all, "", c.Quantiles...)},
		{title: "Tokens (tokens/s)", unit: "short", width: 8, description: "Prompt and generated tokens of the responses' usage.",
			targets: []target{{q.sumRate(promptTokens, all), "prompt"}, {q.sumRate(generation, all), "generation"}}},
	}}
	legs := boardRow{title: "P/D legs", panels: []panel{
		{title: "Prefill leg", unit: "s", width: 8, description: "From sending a routed request's prefill leg to the end of its response.",
			targets: quantiles(q, prefillLeg, all, "", c.Quantiles...)},
		{title: "Handoff", unit: "s", width: 8, description: "From the end of the prefill leg to the start of the decode leg.",
			targets: quantiles(q, handoff, all, "", c.Quantiles...)},
		{title: "Decode leg to first chunk", unit: "s", width: 8, description: "From sending the decode leg to its first content chunk.",
			targets: quantiles(q, decodeLegChunk, all, "", c.Quantiles...)},
		{title: "Time to first token, by part (mean)", unit: "s", width: 24,
			description: "The mean prefill leg, handoff and decode leg's first chunk against the mean time to first token, which holds them.",
			targets: []target{{q.mean(prefillLeg, all), "prefill leg"}, {q.mean(handoff, all), "handoff"},
				{q.mean(decodeLegChunk, all), "decode leg to first chunk"}, {q.mean(ttft, all), "time to first token"}}},
	}}
	byBackend := by(backend, role)
	backendRow := boardRow{title: "Backends", panels: []panel{
		{title: "Requests by backend and error (req/s)", unit: "reqps", width: 12,
			description: "Requests to each backend (a P/D leg, an upstream), by error_type for those that failed.",
			targets: []target{{backends.sumRateOf(clientDuration.ScrapeName()+"_count", byBackend.also(errorType)),
				legendOf(backend) + " (" + legendOf(role) + ") " + legendOf(errorType)}}},
		{title: "Tokens by backend (tokens/s)", unit: "short", width: 12, description: "Input and output tokens of each backend's usage.",
			targets: []target{{backends.sumRateOf(clientTokens.ScrapeName()+"_sum", byBackend.also(tokenType)),
				legendOf(backend) + " " + legendOf(tokenType)}}},
		{title: "Operation duration by backend", unit: "s", width: 12, description: "From sending a request to a backend to the end of its response.",
			targets: quantiles(backends, clientDuration, byBackend, " "+legendOf(backend), c.Quantiles[len(c.Quantiles)-1])},
		{title: "Time to first chunk by backend", unit: "s", width: 12, description: "From sending a streamed request to a backend to its first chunk.",
			targets: quantiles(backends, clientFirstChunk, byBackend, " "+legendOf(backend), c.Quantiles[len(c.Quantiles)-1])},
	}}
	handler, status := label(instrument.KeyHTTPHandler), label(instrument.KeyHTTPStatus)
	httpRow := boardRow{title: "HTTP", panels: []panel{
		{title: "HTTP requests by route and status (req/s)", unit: "reqps", width: 12,
			description: "Every request on every path, as vLLM's API server counts them: handler is the route, none for a path no route takes.",
			targets:     []target{{http.sumRate(httpRequests, by(handler, status)), legendOf(handler) + " " + legendOf(status)}}},
		{title: "HTTP request duration by route", unit: "s", width: 12, description: "From the request's arrival to the response's end, per route.",
			targets: quantiles(http, httpDuration, by(handler), " "+legendOf(handler), c.Quantiles[len(c.Quantiles)-1])},
	}}
	perModel := query{matchers: matchVariables(job), window: rateInterval}
	byModel := by(modelName)
	models := boardRow{title: "Per model", panels: []panel{
		{title: "Requests by model (req/s)", unit: "reqps", width: 8,
			description: fmt.Sprintf("Finished requests per model; `%s` is infermetrics-proxy's: models beyond its -max-models.", c.OverflowModel),
			targets:     []target{{perModel.sumRate(requestSuccess, byModel), legendOf(modelName)}}},
		{title: "Generation by model (tokens/s)", unit: "short", width: 8, description: "Generated tokens per model.",
			targets: []target{{perModel.sumRate(generation, byModel), legendOf(modelName)}}},
		{title: "Time to first token by model", unit: "s", width: 8, description: "The slowest quantile of each model's time to first token.",
			targets: quantiles(perModel, ttft, byModel, " "+legendOf(modelName), c.Quantiles[len(c.Quantiles)-1])},
	}}
	return board{file: "docs/grafana/infermetrics-gateway.json", uid: "infermetrics-gateway",
		title:       "infermetrics: gateway and P/D router",
		description: "A gateway's or P/D router's view (infermetrics-proxy, a router built on openaihttp): what clients see, the P/D legs, each backend, the HTTP families and each model.",
		variables: []variable{
			{name: job, title: "Gateway", selector: clientDuration.ScrapeName() + "_count"},
			{name: modelName, title: "Model", selector: selector(requestSuccess.ScrapeName(), matchVariables(job)...), all: true},
			{name: backend, title: "Backend", selector: selector(clientDuration.ScrapeName()+"_count", matchVariables(job)...), all: true},
		},
		rows: []boardRow{client, legs, backendRow, httpRow, models}}
}

// tokensBoard is the token-accounting dashboard: prompt tokens by source
// and cache tier, THE RULE's iteration tokens against the prompt tokens
// computed and the tokens generated, the KV transfer's share.
func tokensBoard() board {
	q := query{matchers: matchVariables(modelName, engineName), window: rateInterval}
	all := by()
	local := q.with(eq(source, stats.LocalCompute.String()))
	transfer := q.with(eq(source, stats.ExternalKVTransfer.String()))
	sources := boardRow{title: "Prompt tokens", panels: []panel{
		{title: "Prompt tokens by source (tokens/s)", unit: "short", width: 12, stacked: true,
			description: "Every prompt token has one source: computed here (local_compute), the local prefix cache (local_cache_hit), a KV transfer (external_kv_transfer).",
			targets:     []target{{q.sumRate(promptBySource, by(source)), legendOf(source)}}},
		{title: "Share of prompt tokens by source", unit: "percentunit", width: 12, stacked: true,
			description: "Each source's share of the prompt tokens.",
			targets: []target{{q.sumRate(promptBySource, by(source)) + " / ignoring(" + source + ") group_left " +
				q.sumRate(promptTokens, all), legendOf(source)}}},
		{title: "Cached prompt tokens by tier (tokens/s)", unit: "short", width: 12, stacked: true,
			description: "Prompt tokens not computed here, by the tier their KV came from.",
			targets:     []target{{q.sumRate(cachedBySource, by(source)), legendOf(source)}}},
		{title: "KV transfer share", unit: "percentunit", width: 12,
			description: "The share of prompt tokens whose KV came through a KV connector: on a P/D decode instance, what the prefill instance computed.",
			targets:     []target{{transfer.sumRate(promptBySource, all) + " / " + q.sumRate(promptTokens, all), "external_kv_transfer"}}},
	}}
	rule := boardRow{title: "THE RULE: iteration tokens", panels: []panel{
		{title: "Iteration tokens against prompt and generated tokens (tokens/s)", unit: "short", width: 12,
			description: "Iteration tokens are the prompt tokens computed (local_compute) plus the tokens generated: the first line is the sum of the next two, over time. All prompt tokens, cached ones included, for comparison.",
			targets: []target{
				{q.sumRateOf(iterationTokens.ScrapeName()+"_sum", all), "iteration tokens"},
				{local.sumRate(promptBySource, all), "prompt tokens computed (local_compute)"},
				{q.sumRate(generation, all), "generated tokens"},
				{q.sumRate(promptTokens, all), "prompt tokens (all sources)"}}},
		{title: "Iteration tokens per step", unit: "short", width: 12,
			description: "Tokens an engine step computed: quantiles and mean.",
			targets:     append(quantiles(q, iterationTokens, all, "", 0.5, 0.9), target{q.mean(iterationTokens, all), "mean"})},
	}}
	requests := boardRow{title: "Per request", panels: []panel{
		{title: "Tokens per request (mean)", unit: "short", width: 12,
			description: "Prompt tokens, the prompt tokens computed at prefill (request_prefill_kv_computed_tokens) and the generated tokens of a finished request.",
			targets: []target{{q.mean(requestPrompt, all), "prompt"}, {q.mean(prefillComputed, all), "prompt computed"},
				{q.mean(requestGeneration, all), "generated"}}},
		{title: "Prefix cache hit rate", unit: "percentunit", width: 12,
			description: "Prompt tokens found in the local prefix cache, and through a KV connector, of those looked up.",
			targets: []target{{q.sumRate(prefixHits, all) + " / " + q.sumRate(prefixQueries, all), "local prefix cache"},
				{q.sumRate(externalHits, all) + " / " + q.sumRate(externalQueries, all), "external (KV connector)"}}},
	}}
	return board{file: "docs/grafana/infermetrics-tokens.json", uid: "infermetrics-tokens", title: "infermetrics: token accounting",
		description: "Where prompt tokens come from (computed, prefix cache, KV transfer; cache tiers), THE RULE's iteration tokens against the prompt tokens computed and generated, per model and engine.",
		variables: []variable{
			{name: modelName, title: "Model", selector: running.ScrapeName(), all: true},
			{name: engineName, title: "Engine", selector: selector(running.ScrapeName(), matchVariables(modelName)...), all: true},
		},
		rows: []boardRow{sources, rule, requests}}
}

// boards are every dashboard.
func boards(c Config) []board { return []board{engineBoard(), gatewayBoard(c), tokensBoard()} }

// datasource is the dashboards' Prometheus, their first variable.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// build returns the dashboard's JSON, built with Grafana's SDK.
func (b board) build() ([]byte, error) {
	//lint:ignore SA1019 the classic JSON model imports into every Grafana; the v2 schema (dashboardv2) only into Grafana 12 with dynamic dashboards.
	d := dashboard.NewDashboardBuilder(b.title).Uid(b.uid).Description(b.description).
		Tags([]string{"infermetrics", "vllm", "llm"}).Editable().Refresh("30s").Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus"))
	for _, v := range b.variables {
		vb := dashboard.NewQueryVariableBuilder(v.name).Label(v.title).Datasource(datasource).
			Query(dashboard.StringOrMap{String: cog.ToPtr(v.definition())}).Definition(v.definition()).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)
		if v.all {
			vb = vb.IncludeAll(true).Multi(true).AllValue(".*")
		}
		d = d.WithVariable(vb)
	}
	id := uint32(0)
	for _, r := range b.rows {
		if r.title != "" {
			id++
			d = d.WithRow(dashboard.NewRowBuilder(r.title).Id(id))
		}
		for _, p := range r.panels {
			id++
			d = d.WithPanel(p.builder(id))
		}
	}
	built, err := d.Build()
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", b.uid, err)
	}
	out, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", b.uid, err)
	}
	return append(out, '\n'), nil
}

// panelBuilder is what the panel builders of the SDK have in common.
type panelBuilder = cog.Builder[dashboard.Panel]

// builder returns the panel's SDK builder.
func (p panel) builder(id uint32) panelBuilder {
	var queries []cog.Builder[variants.Dataquery]
	for i, t := range p.targets {
		dq := prometheus.NewDataqueryBuilder().RefId(string(rune('A' + i))).Expr(t.expr).LegendFormat(t.legend).Datasource(datasource)
		if p.heatmap {
			dq = dq.Format(prometheus.PromQueryFormatHeatmap)
		}
		queries = append(queries, dq)
	}
	if p.heatmap {
		return heatmap.NewPanelBuilder().Id(id).Title(p.title).Description(p.description).Datasource(datasource).
			Span(p.width).Height(8).Unit(p.unit).Targets(queries).Calculate(false).
			YAxis(heatmap.NewYAxisConfigBuilder().Unit(p.unit))
	}
	ts := timeseries.NewPanelBuilder().Id(id).Title(p.title).Description(p.description).Datasource(datasource).
		Span(p.width).Height(8).Unit(p.unit).Targets(queries).Min(0).FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	if p.stacked {
		ts = ts.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
	}
	return ts
}
