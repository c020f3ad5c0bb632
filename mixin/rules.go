package mixin

import (
	"slices"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// ruleGroup is a group of a Prometheus rule file.
type ruleGroup struct {
	name  string
	rules []rule
}

// rule is a recording rule (record set) or an alerting rule (alert set).
type rule struct {
	record, alert string
	expr          string
	forDuration   Duration
	labels        []labelPair
	annotations   []labelPair
}

type labelPair struct{ name, value string }

// level is the aggregation level of every recording rule, the first part
// of its name (level:metric:operations): one series per model and
// deployment (the Config's JobLabels and ExtraGroupLabels), every other
// label summed away.
const level = instrument.KeyModelName

// recordName names a recording rule by the Prometheus convention
// level:metric:operations; the metric is the family's scrape name without
// _total, its colon an underscore (vllm:request_success_total is
// vllm_request_success).
func recordName(lvl string, f views.Family, ops string) string {
	metric := strings.ReplaceAll(strings.TrimSuffix(f.ScrapeName(), "_total"), ":", "_")
	return lvl + ":" + metric + ":" + ops
}

// rules is what the rules of a Config read and write: its selector, the
// grouping of its recording rules and their window.
type rules struct {
	Config
	q      query    // the selector and the rate window
	agg    grouping // by a deployment's labels and model_name
	deploy grouping // by a deployment's labels: JobLabels and ExtraGroupLabels
}

func newRules(c Config) rules {
	deploy := slices.Concat(c.JobLabels, c.ExtraGroupLabels)
	return rules{Config: c, q: query{matchers: []string{c.Selector}, window: string(c.RateWindow)},
		agg: by(append(deploy, instrument.KeyModelName)...), deploy: by(deploy...)}
}

// The families the rules read.
var (
	requestSuccess   = family(instrument.NameRequestSuccess)
	promptTokens     = family(instrument.NamePromptTokens)
	promptBySource   = familyBySource(instrument.NamePromptTokens)
	generation       = family(instrument.NameGenerationTokens)
	prefixHits       = family(instrument.NamePrefixCacheHits)
	prefixQueries    = family(instrument.NamePrefixCacheQueries)
	preemptions      = family(instrument.NameNumPreemptions)
	running          = family(instrument.NameNumRequestsRunning)
	waiting          = family(instrument.NameNumRequestsWaiting)
	kvCacheUsage     = family(instrument.NameKVCacheUsage)
	ttft             = family(instrument.NameTimeToFirstToken)
	itl              = family(instrument.NameInterTokenLatency)
	e2eLatency       = family(instrument.NameE2ERequestLatency)
	queueTime        = family(instrument.NameRequestQueueTime)
	prefillLeg       = family(instrument.NamePDPrefillLegDuration)
	handoff          = family(instrument.NamePDHandoffDuration)
	decodeLegChunk   = family(instrument.NamePDDecodeLegTimeToFirstChunk)
	invalidEvents    = family(instrument.NameInvalidEvents)
	corrupted        = family(instrument.NameCorruptedRequests)
	sleepState       = family(instrument.NameEngineSleepState)
	admission        = family(instrument.NameAdmissionRejections)
	errorReason      = stats.FinishError.String()
	finishedReason   = label(instrument.KeyFinishedReason)
	quantileFamilies = []views.Family{ttft, itl, e2eLatency, queueTime, prefillLeg, handoff, decodeLegChunk}
)

// window is the name part of a rate window: rate5m.
func window(d Duration) string { return "rate" + string(d) }

// Names of the recording rules the alerts and tests read.
func (r rules) successRate() string { return recordName(level, requestSuccess, window(r.RateWindow)) }
func (r rules) errorRatio() string {
	return recordName(level, requestSuccess, "error_ratio_"+window(r.RateWindow))
}
func (r rules) preemptionRate() string { return recordName(level, preemptions, window(r.RateWindow)) }
func (r rules) waitingSum() string     { return recordName(level, waiting, "sum") }
func (r rules) runningSum() string     { return recordName(level, running, "sum") }
func (r rules) kvCacheMax() string     { return recordName(level, kvCacheUsage, "max") }
func (r rules) quantileName(f views.Family) string {
	return recordName(level+"_quantile", f, "histogram_quantile_"+window(r.RateWindow))
}
func (r rules) sloMissRatio(f views.Family, w Duration) string {
	return recordName(level, f, "slo_miss_ratio_"+window(w))
}

// recordingGroups returns the recording rules: per model, the request and
// token rates, the error and prefix-cache hit ratios, the queue, running
// requests and KV cache usage, the latency quantiles (the P/D router's legs
// included), and the share of requests that miss each latency objective
// over every window of the burn-rate alerts.
func (r rules) recordingGroups() []ruleGroup {
	success := r.successRate()
	requests := ruleGroup{name: "infermetrics-requests", rules: []rule{
		{record: success, expr: r.q.sumRate(requestSuccess, r.agg.also(finishedReason))},
		{record: r.errorRatio(), expr: r.agg.aggregate("sum", selector(success, eq(finishedReason, errorReason))) +
			"\n/\n" + r.agg.aggregate("sum", success)},
		{record: recordName(level, promptTokens, window(r.RateWindow)), expr: r.q.sumRate(promptTokens, r.agg)},
		{record: recordName(level, promptBySource, window(r.RateWindow)), expr: r.q.sumRate(promptBySource, r.agg.also(label(instrument.KeySource)))},
		{record: recordName(level, generation, window(r.RateWindow)), expr: r.q.sumRate(generation, r.agg)},
		{record: recordName(level, prefixHits, "ratio_"+window(r.RateWindow)),
			expr: r.q.sumRate(prefixHits, r.agg) + "\n/\n" + r.q.sumRate(prefixQueries, r.agg)},
		{record: r.preemptionRate(), expr: r.q.sumRate(preemptions, r.agg)},
		{record: r.runningSum(), expr: r.agg.aggregate("sum", r.q.sel(running.ScrapeName()))},
		{record: r.waitingSum(), expr: r.agg.aggregate("sum", r.q.sel(waiting.ScrapeName()))},
		{record: r.kvCacheMax(), expr: r.agg.aggregate("max", r.q.sel(kvCacheUsage.ScrapeName()))},
	}}
	latency := ruleGroup{name: "infermetrics-latency"}
	for _, f := range quantileFamilies {
		for _, q := range r.Quantiles {
			latency.rules = append(latency.rules, rule{record: r.quantileName(f), expr: r.q.quantile(q, f, r.agg),
				labels: []labelPair{{"quantile", number(q)}}})
		}
	}
	slo := ruleGroup{name: "infermetrics-slo"}
	for _, s := range r.slos() {
		for _, w := range r.burnWindows() {
			q := query{matchers: r.q.matchers, window: string(w)}
			good := q.with(leMatcher(s.Seconds)).sumRateOf(s.family.ScrapeName()+"_bucket", r.agg)
			total := q.sumRateOf(s.family.ScrapeName()+"_count", r.agg)
			slo.rules = append(slo.rules, rule{record: r.sloMissRatio(s.family, w), expr: "1 - (\n  " + good + "\n/\n  " + total + "\n)"})
		}
	}
	return []ruleGroup{requests, latency, slo, r.usageGroup()}
}

// burnWindows are the windows of the burn-rate alerts, each once, in the
// order the alerts name them.
func (r rules) burnWindows() []Duration {
	var ws []Duration
	for _, b := range r.BurnRates {
		for _, w := range []Duration{b.Short, b.Long} {
			if !slices.Contains(ws, w) {
				ws = append(ws, w)
			}
		}
	}
	slices.SortStableFunc(ws, func(a, b Duration) int {
		x, _ := a.parse()
		y, _ := b.parse()
		return int((x - y) / 1e9)
	})
	return ws
}

// namedSLO is a latency objective with its family and its alert's name.
type namedSLO struct {
	SLO
	family views.Family
	alert  string
	what   string // what it times, for the annotations
	// observation is what one observation of the family is, counts what
	// the objective counts: requests, or gaps between two tokens.
	observation, counts string
}

func (r rules) slos() []namedSLO {
	return []namedSLO{
		{SLO: r.TTFT, family: ttft, alert: "VLLMTimeToFirstTokenBudgetBurn", what: "time to first token",
			observation: "request", counts: "requests"},
		{SLO: r.ITL, family: itl, alert: "VLLMInterTokenLatencyBudgetBurn", what: "inter-token latency",
			observation: "gap between two tokens of a request", counts: "gaps between tokens"},
	}
}
