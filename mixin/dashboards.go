package mixin

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
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

// variable is a dashboard variable: a query variable, the values of label
// name (or of the label another variable names, label) on the series of
// selector (several at once, with an All that stands for the values
// listed, no custom all value); with labelNames, one of the label names of
// those series that regex (Grafana's, a JavaScript regular expression)
// matches; or, with options, a custom variable of one of those numbers,
// current by default.
type variable struct {
	name, title, selector string
	label                 string
	labelNames            bool
	regex                 string
	options               []float64
	current               float64
}

// definition is the variable's query, as Grafana's label_values and
// label_names write it, or a custom variable's options, as Grafana writes
// them.
func (v variable) definition() string {
	if v.options != nil {
		parts := make([]string, len(v.options))
		for i, o := range v.options {
			parts[i] = number(o)
		}
		return strings.Join(parts, ",")
	}
	if v.labelNames {
		return fmt.Sprintf("label_names(%s)", v.selector)
	}
	return fmt.Sprintf("label_values(%s, %s)", v.selector, cmp.Or(v.label, v.name))
}

// boardRow is a row of panels; without a title the panels have no row.
type boardRow struct {
	title  string
	panels []panel
}

// panel is a time series, a heatmap or a stat (one number: the targets
// are instant queries), width out of 24 and 8 high. A time series' axis
// starts at 0 unless signed (a quantity that can be negative). A panel of
// what only an engine records (its steps and state) is engine only, and
// names the optional feature it needs, if any; the others show any server
// that records requests, a gateway or P/D router's too.
type panel struct {
	title, description, unit       string
	width                          uint32
	heatmap, stacked, stat, signed bool
	engine                         bool
	feature, alsoBy                string
	targets                        []target
}

// Marks of the engine-only panels' descriptions, which docs/operators.md's
// table and the end-to-end suite read.
const (
	engineOnlyMark  = "Engine only"
	engineOnlyNote  = engineOnlyMark + ": a gateway or P/D router (infermetrics-proxy, openaihttp) sees requests, not engine steps, and records none of it."
	engineFeatureAt = engineOnlyMark + ", with "
)

// engineOnly returns p marked engine only.
func (p panel) engineOnly() panel {
	p.engine = true
	return p
}

// withFeature returns p marked engine only, with the optional feature f.
func (p panel) withFeature(f string) panel {
	p.engine, p.feature = true, f
	return p
}

// engineOnlyAnd returns p marked engine only, and shown by who too.
func (p panel) engineOnlyAnd(who string) panel {
	p.engine, p.alsoBy = true, who
	return p
}

// withFeatures marks every panel of ps engine only, with f.
func withFeatures(f string, ps ...panel) []panel {
	for i := range ps {
		ps[i] = ps[i].withFeature(f)
	}
	return ps
}

// fullDescription is the panel's description and, for an engine-only
// panel, its mark.
func (p panel) fullDescription() string {
	switch {
	case p.feature != "":
		return p.description + " " + engineFeatureAt + p.feature + "."
	case p.alsoBy != "":
		return p.description + " " + engineOnlyMark + ", and " + p.alsoBy + ": a gateway or P/D router sees requests, not engine steps."
	case p.engine:
		return p.description + " " + engineOnlyNote
	}
	return p.description
}

type target struct{ expr, legend string }

// rateInterval is the window of the dashboards' rates; dashboardRange is
// the dashboard's time range, the window of the SLO panels' totals.
const (
	rateInterval   = "$__rate_interval"
	dashboardRange = "$__range"
)

// scope is where a dashboard's queries read: the Config's Selector (the
// rules' too) and one matcher per scoping variable. A variable on a label
// of the families (model_name, engine, backend) matches only the families
// that carry it; one on a label of the targets (JobLabels, the instance)
// matches every series.
type scope struct {
	selector string
	vars     []string
	extra    []string
}

// scopeVar is a scoping variable: its label, its title, and the family
// whose series list its values.
type scopeVar struct {
	label, title string
	from         views.Family
}

// familyLabels are the labels of the exported families, as Prometheus
// names them: a variable on one of them matches only the families that
// carry it.
var familyLabels = func() map[string]bool {
	out := map[string]bool{}
	for _, f := range exported {
		for _, k := range f.Labels {
			out[label(k)] = true
		}
	}
	return out
}()

// carries reports whether the series of f carry label l: every target
// label, and the family's own.
func carries(f views.Family, l string) bool {
	return !familyLabels[l] || slices.ContainsFunc(f.Labels, func(k string) bool { return label(k) == l })
}

// newScope returns the scope of c's Selector and vs, and the variables of
// vs, each filtered by the ones before it: the values of a label are
// those of the deployments, instances, models selected above.
func newScope(c Config, vs ...scopeVar) (scope, []variable) {
	s := scope{selector: c.Selector}
	var out []variable
	for _, v := range vs {
		out = append(out, variable{name: v.label, title: v.title, selector: s.sel(v.from, v.from.ScrapeName()+seriesSuffix(v.from))})
		s.vars = append(s.vars, v.label)
	}
	return s, out
}

// seriesSuffix is the suffix of a family's series that a variable lists:
// _count for a histogram, none for a counter or gauge.
func seriesSuffix(f views.Family) string {
	if f.Type == "histogram" {
		return "_count"
	}
	return ""
}

// jobVars are the variables that name a deployment and one of its
// servers: one per Config.JobLabels label and the instance
// (InstanceLabels[0]), their values listed from the series of from.
func jobVars(c Config, from views.Family) []scopeVar {
	var out []scopeVar
	for _, l := range append(slices.Clone(c.JobLabels), c.InstanceLabels[0]) {
		out = append(out, scopeVar{label: l, title: titleOf(l), from: from})
	}
	return out
}

// titleOf is a label's name as a variable's title: cluster is Cluster.
func titleOf(l string) string { return strings.ToUpper(l[:1]) + l[1:] }

// matchers are the Selector, the extra matchers and the matchers of the
// scope's variables on the series of f.
func (s scope) matchers(f views.Family) []string {
	out := slices.Concat([]string{s.selector}, s.extra)
	for _, v := range s.vars {
		if carries(f, v) {
			out = append(out, v+`=~"$`+v+`"`)
		}
	}
	return out
}

// with returns s with more matchers.
func (s scope) with(matchers ...string) scope {
	s.extra = slices.Concat(s.extra, matchers)
	return s
}

// of is the query of f's series in s over window.
func (s scope) of(f views.Family, window string) query {
	return query{matchers: s.matchers(f), window: window}
}

// sel selects the series name of f in s.
func (s scope) sel(f views.Family, name string) string { return selector(name, s.matchers(f)...) }

// sumRate sums the rate of a counter family in s with g.
func (s scope) sumRate(f views.Family, g grouping) string { return s.of(f, rateInterval).sumRate(f, g) }

// sumRateOf sums the rate of a histogram family's series of suffix
// (_sum, _count, _bucket) in s with g.
func (s scope) sumRateOf(f views.Family, suffix string, g grouping) string {
	return s.of(f, rateInterval).sumRateOf(f.ScrapeName()+suffix, g)
}

// mean is a histogram family's mean observation in s.
func (s scope) mean(f views.Family, g grouping) string { return s.of(f, rateInterval).mean(f, g) }

// gauge aggregates a gauge family in s with op and g.
func (s scope) gauge(op string, f views.Family, g grouping) string {
	return g.aggregate(op, s.sel(f, f.ScrapeName()))
}

// quantiles are one target per quantile of a histogram family in s,
// grouped by g.
func (s scope) quantiles(f views.Family, g grouping, legend string, qs ...float64) []target {
	q := s.of(f, rateInterval)
	var out []target
	for _, x := range qs {
		out = append(out, target{q.quantile(x, f, g), "p" + number(x*100) + legend})
	}
	return out
}

// latency is a panel of quantiles qs of a histogram family of seconds in s.
func (s scope) latency(title, description string, f views.Family, width uint32, qs ...float64) panel {
	return panel{title: title, unit: "s", width: width, description: description, targets: s.quantiles(f, by(), "", qs...)}
}

// ratio is the rate of counter num over the rate of counter den in s.
func (s scope) ratio(num, den views.Family) string {
	return s.sumRate(num, by()) + " / " + s.sumRate(den, by())
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
	clientPerChunk    = family(instrument.NameGenAIClientTimePerOutputChunk)
	httpDurationHigh  = family(instrument.NameHTTPRequestDurationHigh)
	cachedTotal       = family(instrument.NamePromptTokensCached)
	attempts          = family(instrument.NameGatewayRequestAttempts)
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

// scopeFamily is the family whose series list the engine dashboards'
// deployments, instances, models and engines: vllm:num_requests_running,
// which every server that feeds them exports from start-up, one series per
// model and engine: vLLM, an engine instrumented with infermetrics (with or
// without instrument.WithCacheConfig), and the front ends of openaihttp
// (infermetrics-proxy, a P/D router), whose Engines export vLLM's always-on
// families at zero (TestScopeFamilyOnEveryPath). A front end's requests
// are on the panels that apply to them; the engine-only panels say so.
var scopeFamily = running

// cacheConfig is vllm:cache_config_info, which vLLM exports once per engine
// and an infermetrics engine with instrument.WithCacheConfig.
var cacheConfig = family(instrument.NameCacheConfigInfo)

// engineScope is the scope of the engine dashboards: the deployment and
// instance, the model, the engine, each listed from scopeFamily.
func engineScope(c Config) (scope, []variable) {
	return newScope(c, append(jobVars(c, scopeFamily),
		scopeVar{label: modelName, title: "Model", from: scopeFamily},
		scopeVar{label: engineName, title: "Engine", from: scopeFamily})...)
}

// engineScoped is what the engine dashboards' description says of their
// variables.
func engineScoped(c Config) string {
	return fmt.Sprintf(" Scoped by %s, %s, model and engine, listed from %s, which every server exports from start-up: vLLM, "+
		"an engine instrumented with infermetrics, infermetrics-proxy and a P/D router. A proxy's or router's requests are on "+
		"the panels that apply to them; the panels marked %q read what only an engine records. All sums the deployments "+
		"listed: a request through a proxy or a router counts there and at its engine.",
		strings.Join(c.JobLabels, ", "), c.InstanceLabels[0], scopeFamily.ScrapeName(), engineOnlyMark)
}

// engineBoard is the engine dashboard: a vLLM-compatible engine's
// throughput, THE RULE's iteration tokens, latencies, queue, KV cache,
// finish reasons and SLOs, per model and engine.
func engineBoard(c Config) board {
	s, vars := engineScope(c)
	all := by()
	reason := label(instrument.KeyWaitingReason)
	p := []panel{
		{title: "Prompt tokens by source (tokens/s)", unit: "short", width: 12,
			description: "Prompt tokens by where their KV came from: computed here, the local prefix cache, a KV transfer. A gateway counts the cached tokens of a response's usage as local_cache_hit, a P/D router those of its decode leg as external_kv_transfer.",
			targets:     []target{{s.sumRate(promptBySource, by(source)), legendOf(source)}}},
		{title: "Generation and total prompt throughput (tokens/s)", unit: "short", width: 12,
			description: "Generated tokens and prompt tokens of every source.",
			targets: []target{{s.sumRate(generation, all), "generation"},
				{s.sumRate(promptTokens, all), "prompt (all sources)"}}},
		panel{title: "Iteration tokens (computed + generated per step)", unit: "short", width: 12, heatmap: true,
			description: "Tokens an engine step computed: the prompt tokens computed for requests whose first token came in the step, plus the tokens generated in it (THE RULE).",
			targets:     []target{{s.sumRateOf(iterationTokens, "_bucket", by("le")), legendOf("le")}}}.engineOnly(),
		panel{title: "Iteration tokens quantiles", unit: "short", width: 12,
			description: "Tokens per engine step: quantiles and mean.",
			targets: append(s.quantiles(iterationTokens, all, "", 0.5, 0.9),
				target{s.mean(iterationTokens, all), "mean"})}.engineOnly(),
		s.latency("Time to first token", "From a request's arrival to its first token.", ttft, 8, 0.5, 0.9, 0.99),
		s.latency("Inter-token latency", "Between two outputs of a request.", itl, 8, 0.5, 0.9, 0.99),
		s.latency("End-to-end request latency", "From a request's arrival to its end.", e2eLatency, 8, 0.5, 0.9, 0.99),
		{title: "Requests running and waiting", unit: "short", width: 8,
			description: "Requests in the engines' batches and in their queues, the queue by reason; a gateway's or P/D router's requests in flight, which have no queue.",
			targets: []target{{s.gauge("sum", running, all), "running"},
				{s.gauge("sum", waiting, all), "waiting"},
				{s.gauge("sum", waitingByReason, by(reason)), "waiting: " + legendOf(reason)}}},
		panel{title: "KV cache usage", unit: "percentunit", width: 8, description: "The share of each engine's KV cache blocks in use.",
			targets: []target{{s.gauge("max", kvCacheUsage, by(engineName)), "engine " + legendOf(engineName)}}}.engineOnly(),
		prefixHitRate(s),
		{title: "Finished requests by reason (req/s)", unit: "reqps", width: 8,
			description: "Finished requests by finished_reason: stop, length, abort, error, repetition.",
			targets:     []target{{s.sumRate(requestSuccess, by(finishedReason)), legendOf(finishedReason)}}},
		{title: "Refused at admission (req/s)", unit: "reqps", width: 8,
			description: "Requests the front end refused with a 503 because a queue limit was reached, by reason: max_num_queued_reqs (--max-num-queued-reqs) or max_num_queued_tokens (--max-num-queued-tokens). Load shed, not failed: in no finished request. Counted per model, without engine.",
			targets:     []target{{s.sumRate(admission, by(reason)), legendOf(reason)}}},
		panel{title: "Preemptions (per s)", unit: "short", width: 8, description: "Requests preempted for lack of KV cache blocks.",
			targets: []target{{s.sumRate(preemptions, all), "preemptions"}}}.engineOnly(),
	}
	return board{file: "docs/grafana/infermetrics.json", uid: "infermetrics-vllm", title: "infermetrics: vLLM-compatible engine metrics",
		description: "A vLLM-compatible engine's throughput by prompt-token source, iteration tokens, latencies, queue, KV cache, prefix cache, finish reasons and latency SLOs, per model and engine." + engineScoped(c),
		variables:   append(vars, sloVariables(c)...),
		rows:        []boardRow{{panels: p}, sloRow(c, s)}}
}

// gatewayFamily is the family whose series list the gateway dashboard's
// deployments and instances: the GenAI client operations a gateway's
// transport records per backend.
var gatewayFamily = clientDuration

// gatewayBoard is the dashboard of a gateway or P/D router: what its
// clients see, the P/D legs, each backend, the HTTP families and each
// model.
func gatewayBoard(c Config) board {
	s, vars := newScope(c, append(jobVars(c, gatewayFamily),
		scopeVar{label: modelName, title: "Model", from: requestSuccess},
		scopeVar{label: backend, title: "Backend", from: clientDuration})...)
	all := by()
	slowest := c.Quantiles[len(c.Quantiles)-1]
	client := boardRow{title: "What clients see", panels: []panel{
		{title: "Requests by finish reason (req/s)", unit: "reqps", width: 8,
			description: "The gateway's finished requests by finished_reason: error counts upstreams that failed or cut a stream, abort clients that left.",
			targets:     []target{{s.sumRate(requestSuccess, by(finishedReason)), legendOf(finishedReason)}}},
		{title: "Error ratio", unit: "percentunit", width: 8,
			description: "The share of finished requests that ended in error.",
			targets: []target{{s.with(eq(finishedReason, errorReason)).sumRate(requestSuccess, all) + " / " +
				s.sumRate(requestSuccess, all), "error"}}},
		{title: "Requests in flight", unit: "short", width: 8, description: "Requests the gateway is serving.",
			targets: []target{{s.gauge("sum", running, all), "running"}}},
		s.latency("Time to first token", "From the gateway receiving a request to it forwarding the first content chunk.", ttft, 8, c.Quantiles...),
		s.latency("End-to-end request latency", "From the gateway receiving a request to its response's end.", e2eLatency, 8, c.Quantiles...),
		{title: "Tokens (tokens/s)", unit: "short", width: 8, description: "Prompt and generated tokens of the responses' usage.",
			targets: []target{{s.sumRate(promptTokens, all), "prompt"}, {s.sumRate(generation, all), "generation"}}},
	}}
	legs := boardRow{title: "P/D legs", panels: []panel{
		s.latency("Prefill leg", "From sending a routed request's prefill leg to the end of its response.", prefillLeg, 8, c.Quantiles...),
		s.latency("Handoff", "From the end of the prefill leg to the start of the decode leg.", handoff, 8, c.Quantiles...),
		s.latency("Decode leg to first chunk", "From sending the decode leg to its first content chunk.", decodeLegChunk, 8, c.Quantiles...),
		{title: "Time to first token, by part (mean)", unit: "s", width: 24,
			description: "The mean prefill leg, handoff and decode leg's first chunk against the mean time to first token, which holds them.",
			targets: []target{{s.mean(prefillLeg, all), "prefill leg"}, {s.mean(handoff, all), "handoff"},
				{s.mean(decodeLegChunk, all), "decode leg to first chunk"}, {s.mean(ttft, all), "time to first token"}}},
	}}
	byBackend := by(backend, role)
	backendRow := boardRow{title: "Backends", panels: []panel{
		{title: "Requests by backend and error (req/s)", unit: "reqps", width: 12,
			description: "Requests to each backend (a P/D leg, an upstream), by error_type for those that failed.",
			targets: []target{{s.sumRateOf(clientDuration, "_count", byBackend.also(errorType)),
				legendOf(backend) + " (" + legendOf(role) + ") " + legendOf(errorType)}}},
		{title: "Tokens by backend (tokens/s)", unit: "short", width: 12, description: "Input and output tokens of each backend's usage.",
			targets: []target{{s.sumRateOf(clientTokens, "_sum", byBackend.also(tokenType)),
				legendOf(backend) + " " + legendOf(tokenType)}}},
		{title: "Operation duration by backend", unit: "s", width: 8, description: "From sending a request to a backend to the end of its response.",
			targets: s.quantiles(clientDuration, byBackend, " "+legendOf(backend), slowest)},
		{title: "Time to first chunk by backend", unit: "s", width: 8, description: "From sending a streamed request to a backend to its first chunk.",
			targets: s.quantiles(clientFirstChunk, byBackend, " "+legendOf(backend), slowest)},
		{title: "Time per output chunk by backend", unit: "s", width: 8, description: "Between two chunks of a backend's streamed response, after the first.",
			targets: s.quantiles(clientPerChunk, byBackend, " "+legendOf(backend), slowest)},
		{title: "Attempts per client request", unit: "short", width: 24,
			description: "Requests the gateway sent upstream for one client request: 1, more with retries and fallbacks to another backend (infermetrics_gateway_request_attempts).",
			targets:     append([]target{{s.mean(attempts, all), "mean"}}, s.quantiles(attempts, all, "", slowest)...)},
	}}
	handler, status := label(instrument.KeyHTTPHandler), label(instrument.KeyHTTPStatus)
	httpRow := boardRow{title: "HTTP", panels: []panel{
		{title: "HTTP requests by route and status (req/s)", unit: "reqps", width: 8,
			description: "Every request on every path, as vLLM's API server counts them: handler is the route, none for a path no route takes.",
			targets:     []target{{s.sumRate(httpRequests, by(handler, status)), legendOf(handler) + " " + legendOf(status)}}},
		{title: "HTTP request duration by route", unit: "s", width: 8, description: "From the request's arrival to the response's end, per route.",
			targets: s.quantiles(httpDuration, by(handler), " "+legendOf(handler), slowest)},
		s.latency("HTTP request duration, fine buckets", "Every request's duration in the fine buckets of http_request_duration_highr_seconds (no route label).", httpDurationHigh, 8, c.Quantiles...),
	}}
	byModel := by(modelName)
	models := boardRow{title: "Per model", panels: []panel{
		{title: "Requests by model (req/s)", unit: "reqps", width: 8,
			description: fmt.Sprintf("Finished requests per model; `%s` is infermetrics-proxy's: models beyond its -max-models.", c.OverflowModel),
			targets:     []target{{s.sumRate(requestSuccess, byModel), legendOf(modelName)}}},
		{title: "Generation by model (tokens/s)", unit: "short", width: 8, description: "Generated tokens per model.",
			targets: []target{{s.sumRate(generation, byModel), legendOf(modelName)}}},
		{title: "Time to first token by model", unit: "s", width: 8, description: "The slowest quantile of each model's time to first token.",
			targets: s.quantiles(ttft, byModel, " "+legendOf(modelName), slowest)},
	}}
	return board{file: "docs/grafana/infermetrics-gateway.json", uid: "infermetrics-gateway",
		title: "infermetrics: gateway and P/D router",
		description: fmt.Sprintf("A gateway's or P/D router's view (infermetrics-proxy, a router built on openaihttp): what clients see, the P/D legs, each backend, the HTTP families, each model and the latency SLOs as clients see them. Scoped by %s, %s, model and backend; the deployments listed are those whose transport records %s.",
			strings.Join(c.JobLabels, ", "), c.InstanceLabels[0], gatewayFamily.ScrapeName()),
		variables: append(vars, sloVariables(c)...),
		rows:      []boardRow{client, sloRow(c, s), legs, backendRow, httpRow, models}}
}

// prefixHitRate is the panel of the prefix cache's hit rates, local and
// through a KV connector, 8 wide.
func prefixHitRate(s scope) panel {
	return panel{title: "Prefix cache hit rate", unit: "percentunit", width: 8,
		description: "Prompt tokens found in the local prefix cache, and through a KV connector, of those looked up.",
		targets: []target{{s.ratio(prefixHits, prefixQueries), "local prefix cache"},
			{s.ratio(externalHits, externalQueries), "external (KV connector)"}}}.engineOnly()
}

// wide returns p width w.
func (p panel) wide(w uint32) panel {
	p.width = w
	return p
}

// tokensBoard is the token-accounting dashboard: prompt tokens by source
// and cache tier, THE RULE's iteration tokens against the prompt tokens
// computed and the tokens generated, the KV transfer's share.
func tokensBoard(c Config) board {
	s, vars := engineScope(c)
	all := by()
	local := s.with(eq(source, stats.LocalCompute.String()))
	transfer := s.with(eq(source, stats.ExternalKVTransfer.String()))
	sources := boardRow{title: "Prompt tokens", panels: []panel{
		{title: "Prompt tokens by source (tokens/s)", unit: "short", width: 12, stacked: true,
			description: "Every prompt token has one source: computed here (local_compute), the local prefix cache (local_cache_hit), a KV transfer (external_kv_transfer).",
			targets:     []target{{s.sumRate(promptBySource, by(source)), legendOf(source)}}},
		{title: "Share of prompt tokens by source", unit: "percentunit", width: 12, stacked: true,
			description: "Each source's share of the prompt tokens.",
			targets: []target{{s.sumRate(promptBySource, by(source)) + " / ignoring(" + source + ") group_left " +
				s.sumRate(promptTokens, all), legendOf(source)}}},
		{title: "Cached prompt tokens by tier (tokens/s)", unit: "short", width: 12, stacked: true,
			description: "Prompt tokens not computed here, by the tier their KV came from, and their total (vllm:prompt_tokens_cached_total).",
			targets: []target{{s.sumRate(cachedBySource, by(source)), legendOf(source)},
				{s.sumRate(cachedTotal, all), "cached (all tiers)"}}},
		{title: "KV transfer share", unit: "percentunit", width: 12,
			description: "The share of prompt tokens whose KV came through a KV connector: on a P/D decode instance, what the prefill instance computed.",
			targets:     []target{{transfer.sumRate(promptBySource, all) + " / " + s.sumRate(promptTokens, all), "external_kv_transfer"}}},
	}}
	rule := boardRow{title: "THE RULE: iteration tokens", panels: []panel{
		{title: "Iteration tokens against prompt and generated tokens (tokens/s)", unit: "short", width: 12,
			description: "Iteration tokens are the prompt tokens computed (local_compute) plus the tokens generated: the first line is the sum of the next two, over time. All prompt tokens, cached ones included, for comparison. A gateway or P/D router records no iteration tokens: its first line stays at 0.",
			targets: []target{
				{s.sumRateOf(iterationTokens, "_sum", all), "iteration tokens"},
				{local.sumRate(promptBySource, all), "prompt tokens computed (local_compute)"},
				{s.sumRate(generation, all), "generated tokens"},
				{s.sumRate(promptTokens, all), "prompt tokens (all sources)"}}},
		panel{title: "Iteration tokens per step", unit: "short", width: 12,
			description: "Tokens an engine step computed: quantiles and mean.",
			targets:     append(s.quantiles(iterationTokens, all, "", 0.5, 0.9), target{s.mean(iterationTokens, all), "mean"})}.engineOnly(),
	}}
	requests := boardRow{title: "Per request", panels: []panel{
		{title: "Tokens per request (mean)", unit: "short", width: 12,
			description: "Prompt tokens, the prompt tokens computed at prefill (request_prefill_kv_computed_tokens) and the generated tokens of a finished request.",
			targets: []target{{s.mean(requestPrompt, all), "prompt"}, {s.mean(prefillComputed, all), "prompt computed"},
				{s.mean(requestGeneration, all), "generated"}}},
		prefixHitRate(s).wide(12),
	}}
	return board{file: "docs/grafana/infermetrics-tokens.json", uid: "infermetrics-tokens", title: "infermetrics: token accounting",
		description: "Where prompt tokens come from (computed, prefix cache, KV transfer; cache tiers), THE RULE's iteration tokens against the prompt tokens computed and generated, per model and engine." + engineScoped(c),
		variables:   vars,
		rows:        []boardRow{sources, rule, requests}}
}

// boards are every dashboard.
func boards(c Config) []board {
	return []board{engineBoard(c), gatewayBoard(c), tokensBoard(c), featuresBoard(c), spendBoard(c)}
}

// datasource is the dashboards' Prometheus, their first variable.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// datasourceInput is the input Grafana's import asks for: the Prometheus
// data source, whose uid replaces ${DS_PROMETHEUS} in every string of the
// dashboard (pkg/services/dashboardimport/utils/dash_template_evaluator.go
// of grafana/grafana @ 0425369), here the data source variable's current
// value, which every query reads. Provisioned from a file, nothing replaces
// it: the variable, whose current value is then no data source, takes the
// first Prometheus data source Grafana lists (MultiValueVariable of
// grafana/scenes @ 0002681), and the viewer may pick another.
const datasourceInput = "DS_PROMETHEUS"

// minGrafana is the oldest Grafana the dashboards are written for. Their
// schemaVersion, 42, is the last of Grafana's classic dashboard model
// (apps/dashboard/pkg/migration/schemaversion/README.md of grafana/grafana
// @ 2a93349), which its v42 migration brought (grafana/grafana#110517,
// merged into main on 2025-09-05); 12.3.0 was made from main after it
// (12.2.0 took its version number on 2025-09-18, #111346, on a branch that
// may or may not hold it). Their panels (time series, stat, and the
// heatmap of Grafana 9 and later) are older than both.
const minGrafana = "12.3.0"

// importHeader is what a dashboard exported for sharing begins with: the
// inputs of its import and what it requires.
type importHeader struct {
	Inputs   []importInput   `json:"__inputs"`
	Requires []importRequire `json:"__requires"`
}

type importInput struct {
	Name        string `json:"name"`
	Label       string `json:"label"`
	Description string `json:"description"`
	Type        string `json:"type"`
	PluginID    string `json:"pluginId"`
	PluginName  string `json:"pluginName"`
}

type importRequire struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

// panelNames are the names of the panel plugins the dashboards use.
var panelNames = map[string]string{"timeseries": "Time series", "stat": "Stat", "heatmap": "Heatmap"}

// header returns the import header of a dashboard of panels of types.
func header(types []string) importHeader {
	h := importHeader{
		Inputs: []importInput{{datasourceInput, "Prometheus", "The Prometheus that scrapes the servers (or receives their remote write).",
			"datasource", "prometheus", "Prometheus"}},
		Requires: []importRequire{{"grafana", "grafana", "Grafana", minGrafana}, {"datasource", "prometheus", "Prometheus", "1.0.0"}},
	}
	for _, t := range types {
		h.Requires = append(h.Requires, importRequire{"panel", t, panelNames[t], ""})
	}
	return h
}

// build returns the dashboard's JSON, built with Grafana's SDK.
func (b board) build() ([]byte, error) {
	//lint:ignore SA1019 the classic JSON model imports into every Grafana; the v2 schema (dashboardv2) only into Grafana 12 with dynamic dashboards.
	d := dashboard.NewDashboardBuilder(b.title).Uid(b.uid).Description(b.description).
		Tags([]string{"infermetrics", "vllm", "llm"}).Editable().Refresh("30s").Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus").
			Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("${" + datasourceInput + "}")},
				Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("${" + datasourceInput + "}")}}))
	for _, v := range b.variables {
		d = d.WithVariable(v.builder())
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
	body, err := json.Marshal(built)
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", b.uid, err)
	}
	var types []string
	for _, r := range b.rows {
		for _, p := range r.panels {
			types = append(types, p.pluginType())
		}
	}
	slices.Sort(types)
	head, err := json.Marshal(header(slices.Compact(types)))
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", b.uid, err)
	}
	// The header's fields first, as Grafana's export writes them.
	joined := append(append(head[:len(head)-1:len(head)-1], ','), body[1:]...)
	var out bytes.Buffer
	if err := json.Indent(&out, joined, "", "  "); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", b.uid, err)
	}
	return append(out.Bytes(), '\n'), nil
}

// pluginType is the panel's plugin: heatmap, stat or timeseries.
func (p panel) pluginType() string {
	switch {
	case p.heatmap:
		return "heatmap"
	case p.stat:
		return "stat"
	}
	return "timeseries"
}

// allValue is what a query variable's All stands for: every value, and no
// value, so that a deployment without a label (cluster, namespace outside
// Kubernetes) is under All beside those with it in the same Prometheus.
const allValue = ".*"

// builder returns the variable's SDK builder: a custom variable of its
// options, or a query variable with every value and an All of any value.
func (v variable) builder() cog.Builder[dashboard.VariableModel] {
	if v.options != nil {
		var opts []dashboard.VariableOption
		for _, o := range v.options {
			n := number(o)
			opts = append(opts, dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: &n},
				Value: dashboard.StringOrArrayOfString{String: &n}, Selected: cog.ToPtr(o == v.current)})
		}
		cur := number(v.current)
		return dashboard.NewCustomVariableBuilder(v.name).Label(v.title).Values(dashboard.StringOrMap{String: cog.ToPtr(v.definition())}).
			Options(opts).AllowCustomValue(false).Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: &cur},
			Value: dashboard.StringOrArrayOfString{String: &cur}, Selected: cog.ToPtr(true)})
	}
	q := dashboard.NewQueryVariableBuilder(v.name).Label(v.title).Datasource(datasource).
		Query(dashboard.StringOrMap{String: cog.ToPtr(v.definition())}).Definition(v.definition()).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)
	if v.labelNames {
		// One label to group by: several, or All, would make no by clause.
		return q.Regex(v.regex).IncludeAll(false).Multi(false)
	}
	return q.IncludeAll(true).Multi(true).AllValue(allValue)
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
		if p.stat {
			dq = dq.Instant()
		}
		queries = append(queries, dq)
	}
	if p.heatmap {
		return heatmap.NewPanelBuilder().Id(id).Title(p.title).Description(p.fullDescription()).Datasource(datasource).
			Span(p.width).Height(8).Unit(p.unit).Targets(queries).Calculate(false).
			YAxis(heatmap.NewYAxisConfigBuilder().Unit(p.unit))
	}
	if p.stat {
		return stat.NewPanelBuilder().Id(id).Title(p.title).Description(p.fullDescription()).Datasource(datasource).
			Span(p.width).Height(8).Unit(p.unit).Targets(queries).Decimals(2).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
	}
	ts := timeseries.NewPanelBuilder().Id(id).Title(p.title).Description(p.fullDescription()).Datasource(datasource).
		Span(p.width).Height(8).Unit(p.unit).Targets(queries).FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	if !p.signed {
		ts = ts.Min(0)
	}
	if p.stacked {
		ts = ts.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
	}
	return ts
}
