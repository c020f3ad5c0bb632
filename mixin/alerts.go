package mixin

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// alert is one alert: its rules (one per condition: the burn-rate alerts
// have one per window pair), its annotations, its runbook entry and the
// scenarios of its promtool unit tests.
type alert struct {
	name string
	// summary is static text (no template), so that Alertmanager groups
	// the alert's instances by it; description is a Prometheus template
	// of the alert's labels ($labels), which the unit tests render as
	// Prometheus does (render).
	summary, description string
	// means, confirm and action are the runbook's: what the alert says
	// (Markdown), the PromQL queries that show the fault (the Config's
	// selector in them), and the first commands to run and what to do
	// (Markdown).
	means      string
	confirm    []string
	action     string
	conditions []condition
	scenarios  []scenario
}

// condition is one alerting rule of an alert.
type condition struct {
	expr        string
	forDuration Duration
	labels      []labelPair // severity first
}

// scenario is a promtool unit test of an alert: input series sampled every
// minute, the time of the check, and the alerts that must be firing then.
type scenario struct {
	name   string
	series []inputSeries
	at     time.Duration
	firing []firing
}

// firing is an alert expected to fire: the labels of its expression's
// result and the index of its condition, whose labels it has too.
type firing struct {
	labels    labelSet
	condition int
}

// fires is the firing alert of an alert's only condition.
func fires(labels labelSet) []firing { return []firing{{labels: labels}} }

type inputSeries struct{ series, values string }

// severity is the severity label.
func severity(s string) []labelPair { return []labelPair{{"severity", s}} }

// minutes returns d in whole minutes of the unit tests' samples.
func minutes(d Duration) int {
	v, _ := d.parse()
	return int((v + time.Minute - 1) / time.Minute)
}

// ramp is a series that starts at start and grows by step a minute for n
// minutes, in promtool's notation.
func ramp(start, step float64, n int) string {
	return fmt.Sprintf("%s+%sx%d", number(start), number(step), n)
}

// steady is a series at v for n minutes.
func steady(v float64, n int) string { return fmt.Sprintf("%sx%d", number(v), n) }

// labelSet is an ordered set of labels of test series and alerts.
type labelSet []labelPair

func (s labelSet) with(more ...labelPair) labelSet { return slices.Concat(s, more) }

// matchers writes the set as equality matchers.
func (s labelSet) matchers() []string {
	out := make([]string, len(s))
	for i, l := range s {
		out[i] = eq(l.name, l.value)
	}
	return out
}

// series names a test series of the set.
func (s labelSet) series(name string) string { return selector(name, s.matchers()...) }

// Label values of the unit tests' series.
const (
	testJob      = "vllm"
	testInstance = "server-0"
	testModel    = "m"
)

// deployment are the labels of a test target: the job labels (a
// selector's matcher of the same label overrides its value; the varied
// one is testJob, each other <label>-0, so that a description shows their
// order), the selector's other equality matchers and the instance labels.
func (r rules) deployment(selector labelSet) labelSet {
	var s labelSet
	varied := r.variedLabel(selector)
	for _, l := range r.JobLabels {
		switch {
		case slices.ContainsFunc(selector, func(m labelPair) bool { return m.name == l }):
		case l == varied:
			s = append(s, labelPair{l, testJob})
		default:
			s = append(s, labelPair{l, l + "-0"})
		}
	}
	s = append(s, selector...)
	for _, l := range r.InstanceLabels {
		s = append(s, labelPair{l, testInstance})
	}
	return s
}

// keep returns the labels of s named in names, in s's order.
func (s labelSet) keep(names []string) labelSet {
	return slices.DeleteFunc(slices.Clone(s), func(l labelPair) bool { return !slices.Contains(names, l.name) })
}

// aggregated are the labels the recording rules keep of a series's: the
// deployment's and model_name.
func (r rules) aggregated(s labelSet) labelSet { return s.keep(r.agg.labels) }

// jobOf returns the labels that name the deployment of a test target's.
func (r rules) jobOf(target labelSet) labelSet { return target.keep(r.deploy.labels) }

// where is the template of the labels that name a deployment, joined by
// "/": cluster/namespace/job; a label the alert lacks is left out with its
// "/" (plain Prometheus has no cluster or namespace: job alone), but the
// last, which names it (job).
func (r rules) where() string {
	var b strings.Builder
	last := len(r.JobLabels) - 1
	for _, l := range r.JobLabels[:last] {
		b.WriteString("{{ with $labels." + l + " }}{{ . }}/{{ end }}")
	}
	b.WriteString("{{ $labels." + r.JobLabels[last] + " }}")
	return b.String()
}

// model is the template of the model's name.
const model = "{{ $labels." + instrument.KeyModelName + " }}"

// alerts returns every alert of the Config, with its unit tests' scenarios
// for the labels sel of the selector's equality matchers.
func (r rules) alerts(sel labelSet) []alert {
	target := r.deployment(sel)
	engine0 := target.with(labelPair{instrument.KeyModelName, testModel}, labelPair{instrument.KeyEngine, "0"})
	perModel := r.aggregated(engine0)
	w := minutes(r.RateWindow)
	out := []alert{r.errorsAlert(engine0, perModel, w), r.httpErrorsAlert(target, engine0, w),
		r.sheddingAlert(target, engine0, perModel, w)}
	for _, s := range r.slos() {
		out = append(out, r.burnAlert(s, engine0, perModel))
	}
	out = append(out,
		r.kvCacheAlert(engine0, perModel),
		r.preemptionsAlert(engine0, perModel, w),
		r.queueAlert(engine0, perModel),
		r.stuckAlert(engine0),
		r.targetDownAlert(target, engine0),
		r.metricsAbsentAlert(target, engine0),
		r.trafficStoppedAlert(target, engine0),
		r.restartAlert(target, engine0),
		r.handoffAlert(engine0, perModel, w),
		r.invalidEventsAlert(engine0, perModel, w),
		r.valueDroppedAlert(engine0, perModel, w),
		r.overflowAlert(target, perModel, w),
		r.cardinalityAlert(target, engine0),
	)
	out = append(out, r.usageAlerts(target, engine0, perModel, w)...)
	if varied := r.variedLabel(sel); varied != "" {
		for i := range out {
			out[i] = r.withDerived(out[i], engine0, varied, sel)
		}
	}
	return out
}

func (r rules) errorsAlert(engine0, perModel labelSet, w int) alert {
	at := w + minutes(r.ErrorRatio.For) + 5
	finished := func(errShare float64) []inputSeries {
		return []inputSeries{
			{engine0.with(labelPair{finishedReason, stats.FinishStop.String()}).series(requestSuccess.ScrapeName()), ramp(0, 60*(1-errShare), at+5)},
			{engine0.with(labelPair{finishedReason, errorReason}).series(requestSuccess.ScrapeName()), ramp(0, 60*errShare, at+5)},
		}
	}
	return alert{
		name:    "VLLMRequestErrors",
		summary: "Requests of a model end in error.",
		description: fmt.Sprintf("More than %s of the requests of model %s (%s) finished with finished_reason=%q over the last %s.",
			percent(r.ErrorRatio.Value), model, r.where(), errorReason, r.RateWindow),
		means: fmt.Sprintf("`%s` counts the model's finished requests by `finished_reason`; more than %s of them ended in `%s` "+
			"for %s. An engine counts a request it failed (an exception in the model runner; corrupted output, which "+
			"`vllm:corrupted_requests_total` counts too); a gateway (infermetrics-proxy, a P/D router) a request whose "+
			"upstream failed to answer or cut its stream before its end.",
			requestSuccess.ScrapeName(), percent(r.ErrorRatio.Value), errorReason, r.ErrorRatio.For),
		confirm: []string{
			r.byServer().aggregate("sum", r.q.with(eq(finishedReason, errorReason)).rate(requestSuccess.ScrapeName())) +
				"\n/\n" + r.q.sumRate(requestSuccess, r.byServer()),
			r.q.sumRate(corrupted, r.byServer()),
		},
		action: "The first query names the failing servers. Their log names the failing requests: " +
			"`kubectl logs -n <namespace> <pod> --since=30m | grep -iE 'error|exception'` (or `journalctl -u <unit>`). " +
			"`vllm:corrupted_requests_total` rising means the model produced NaN logits: a bad checkpoint, dtype or " +
			"kernel, often just deployed (`kubectl rollout history -n <namespace> deploy/<name>`; roll back). Behind a " +
			"gateway, the gateway dashboard's *Backends* row shows which backend fails and how (`error_type`).",
		conditions: []condition{{expr: r.errorRatio() + " > " + number(r.ErrorRatio.Value), forDuration: r.ErrorRatio.For,
			labels: severity("critical")}},
		scenarios: []scenario{
			{name: "errors above the threshold", series: finished(min(0.99, 2*r.ErrorRatio.Value)), at: minute(at),
				firing: fires(perModel)},
			{name: "errors below the threshold", series: finished(r.ErrorRatio.Value / 2), at: minute(at)},
		},
	}
}

// minute is n minutes.
func minute(n int) time.Duration { return time.Duration(n) * time.Minute }

// burnRates are the queries of an SLO's burn rate over each window.
func burnRates(r rules, s namedSLO) []string {
	var out []string
	for _, w := range r.burnWindows() {
		out = append(out, r.sloMissRatio(s.family, w)+" / (1 - "+number(s.Objective)+")")
	}
	return out
}

func (r rules) burnAlert(s namedSLO, engine0, perModel labelSet) alert {
	fastest := 0.0
	for _, b := range r.BurnRates {
		fastest = max(fastest, b.Factor)
	}
	a := alert{
		name:    s.alert,
		summary: fmt.Sprintf("A model burns its %s error budget.", s.what),
		description: fmt.Sprintf("The %s of model %s (%s) miss the %s objective (%s of them within %ss) fast "+
			"enough to spend the error budget early; the alert's long and short labels name the windows.",
			s.counts, model, r.where(), s.what, percent(s.Objective), number(s.Seconds)),
		means: fmt.Sprintf("The objective: %s of the observations of `%s` (one per %s) are at most %ss. The alert "+
			"compares the share that miss it with the error budget (%s) over a long and a short window (the `long` "+
			"and `short` labels): multi-window, multi-burn-rate alerting as Google's SRE workbook describes it "+
			"(chapter \"Alerting on SLOs\"), with the tiers of kubernetes-mixin (`BurnRates` says why). The burn rate "+
			"is that share over the budget: at 1 a 30-day budget lasts 30 days, at %s about %s days.",
			percent(s.Objective), s.family.ScrapeName(), s.observation, number(s.Seconds), percent(1-s.Objective),
			number(fastest), number(math.Round(300/fastest)/10)),
		confirm: slices.Concat([]string{"# the burn rate over each window: at 1 the budget lasts 30 days"},
			burnRates(r, s),
			[]string{"# the share that misses it, per server, over the rate window",
				"1 - (\n  " + r.q.with(leMatcher(s.Seconds)).sumRateOf(s.family.ScrapeName()+"_bucket", r.byServer()) +
					"\n/\n  " + r.q.sumRateOf(s.family.ScrapeName()+"_count", r.byServer()) + "\n)"}),
		action: map[string]string{
			ttft.Name: "Look at what the first token waits for: the queue (`vllm:request_queue_time_seconds`, " +
				"*Requests running and waiting*), long prompts computed locally (the token dashboard's prompt tokens by " +
				"source: a fall of the cache hit share makes prefill heavier), preemptions, and behind a P/D router the " +
				"prefill leg and the handoff (gateway dashboard). On a server the query names: " +
				"`curl -s http://<instance>/metrics | grep -E '^vllm:num_requests_(running|waiting)'`. More replicas or a " +
				"lower `--max-num-seqs` shorten the queue.",
			itl.Name: "Inter-token latency grows with the batch: many running requests, long contexts, prefill chunks " +
				"interleaved with decode steps (`--max-num-batched-tokens`), preemptions and a full KV cache. On a server " +
				"the query names: `curl -s http://<instance>/metrics | grep -E '^vllm:(num_requests_running|kv_cache_usage_perc)'` " +
				"and `kubectl exec -n <namespace> <pod> -- nvidia-smi` (clocks, memory, another process on the GPU). " +
				"Compare with *Requests running and waiting* and *KV cache usage* on the engine dashboard.",
		}[s.family.Name],
	}
	threshold := func(b BurnRate) string { return fmt.Sprintf("(%s * (1 - %s))", number(b.Factor), number(s.Objective)) }
	maxFor := 0
	for _, b := range r.BurnRates {
		a.conditions = append(a.conditions, condition{
			expr: r.sloMissRatio(s.family, b.Long) + " > " + threshold(b) + "\nand\n" +
				r.sloMissRatio(s.family, b.Short) + " > " + threshold(b),
			forDuration: b.For,
			labels:      []labelPair{{"severity", b.Severity}, {"long", string(b.Long)}, {"short", string(b.Short)}},
		})
		maxFor = max(maxFor, minutes(b.For))
	}
	// Every window sees the same share of misses: the tiers whose
	// threshold it exceeds fire once their for: is over.
	at := maxFor + 30
	bounds := make([]float64, len(r.BurnRates))
	for i, b := range r.BurnRates {
		bounds[i] = b.Factor * (1 - s.Objective)
	}
	lowest := slices.Min(bounds)
	next := 1.0
	for _, b := range bounds {
		if b > lowest && b < next {
			next = b
		}
	}
	misses := func(name string, share float64) scenario {
		sc := scenario{name: name, at: minute(at), series: []inputSeries{
			{engine0.with(labelPair{"le", leText(s.Seconds)}).series(s.family.ScrapeName() + "_bucket"), ramp(0, 60*(1-share), at+5)},
			{engine0.series(s.family.ScrapeName() + "_count"), ramp(0, 60, at+5)},
		}}
		for i, b := range bounds {
			if share > b {
				sc.firing = append(sc.firing, firing{labels: perModel, condition: i})
			}
		}
		return sc
	}
	a.scenarios = []scenario{
		misses("misses burn every budget", min(1, 2*slices.Max(bounds))),
		misses("misses burn the slowest budget only", (lowest+next)/2),
		misses("misses within the budget", lowest/2),
	}
	return a
}

func (r rules) kvCacheAlert(engine0, perModel labelSet) alert {
	at := minutes(r.KVCacheUsage.For) + 10
	engine1 := slices.Clone(engine0)
	engine1[len(engine1)-1].value = "1"
	usage := func(v float64) []inputSeries {
		return []inputSeries{
			{engine0.series(kvCacheUsage.ScrapeName()), steady(v, at+5)},
			{engine1.series(kvCacheUsage.ScrapeName()), steady(0.1, at+5)},
		}
	}
	return alert{
		name:    "VLLMKVCacheSaturated",
		summary: "An engine has its KV cache full.",
		description: fmt.Sprintf("The fullest engine of model %s (%s) uses more than %s of its KV cache.",
			model, r.where(), percent(r.KVCacheUsage.Value)),
		means: fmt.Sprintf("`%s` of the fullest engine of the model stayed above %s for %s. A full KV cache admits no "+
			"more requests (they wait) and preempts running ones, whose KV is then recomputed or swapped.",
			kvCacheUsage.ScrapeName(), number(r.KVCacheUsage.Value), r.KVCacheUsage.For),
		confirm: []string{
			r.perEngine().aggregate("max", r.q.sel(kvCacheUsage.ScrapeName())),
			r.q.sumRate(preemptions, r.byServer()),
		},
		action: "The first query names the full engines; the second whether they preempt. On one: " +
			"`curl -s http://<instance>/metrics | grep -E '^vllm:(kv_cache_usage_perc|num_preemptions_total|num_requests_running)'`, " +
			"and the engine's start-up log for its KV cache size (`grep -i 'kv cache' `). More KV cache: a larger " +
			"`--gpu-memory-utilization`, a smaller `--max-model-len`, a KV offload tier, a quantised KV cache " +
			"(`--kv-cache-dtype`), or more replicas; fewer concurrent sequences (`--max-num-seqs`) preempt less.",
		conditions: []condition{{expr: r.kvCacheMax() + " > " + number(r.KVCacheUsage.Value), forDuration: r.KVCacheUsage.For,
			labels: severity("warning")}},
		scenarios: []scenario{
			{name: "one engine full", series: usage((1 + r.KVCacheUsage.Value) / 2), at: minute(at), firing: fires(perModel)},
			{name: "usage below the threshold", series: usage(r.KVCacheUsage.Value * 0.9), at: minute(at)},
		},
	}
}

func (r rules) preemptionsAlert(engine0, perModel labelSet, w int) alert {
	at := w + minutes(r.PreemptionRatio.For) + 5
	series := func(ratio float64) []inputSeries {
		return []inputSeries{
			{engine0.with(labelPair{finishedReason, stats.FinishStop.String()}).series(requestSuccess.ScrapeName()), ramp(0, 60, at+5)},
			{engine0.series(preemptions.ScrapeName()), ramp(0, 60*ratio, at+5)},
		}
	}
	return alert{
		name:    "VLLMPreemptionsHigh",
		summary: "Engines of a model preempt many requests.",
		description: fmt.Sprintf("Model %s (%s) preempts more than %s requests per finished request.",
			model, r.where(), number(r.PreemptionRatio.Value)),
		means: fmt.Sprintf("`%s` grew by more than %s per finished request (`%s`) for %s: the scheduler ran out of KV "+
			"cache blocks for its running requests and evicted some, whose work is redone later.",
			preemptions.ScrapeName(), number(r.PreemptionRatio.Value), requestSuccess.ScrapeName(), r.PreemptionRatio.For),
		confirm: []string{
			r.q.sumRate(preemptions, r.byServer()) + "\n/\n" + r.q.sumRate(requestSuccess, r.byServer()),
			r.perEngine().aggregate("max", r.q.sel(kvCacheUsage.ScrapeName())),
		},
		action: "The first query names the servers that preempt most per finished request, the second their KV cache " +
			"usage. On one: `curl -s http://<instance>/metrics | grep -E '^vllm:(num_preemptions_total|kv_cache_usage_perc)'`. " +
			"The KV cache is too small for the batch: see VLLMKVCacheSaturated's remedies. " +
			"`vllm:request_num_preemptions` shows how often each request was preempted.",
		conditions: []condition{{
			expr: r.preemptionRate() + "\n/\n" + r.agg.aggregate("sum", r.successRate()) +
				"\n> " + number(r.PreemptionRatio.Value),
			forDuration: r.PreemptionRatio.For, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "preemptions above the threshold", series: series(2 * r.PreemptionRatio.Value), at: minute(at),
				firing: fires(perModel)},
			{name: "preemptions below the threshold", series: series(r.PreemptionRatio.Value / 2), at: minute(at)},
		},
	}
}

func (r rules) queueAlert(engine0, perModel labelSet) alert {
	at := minutes(r.QueueWindow) + minutes(r.QueueWaiting.For) + 5
	return alert{
		name:    "VLLMQueueGrowing",
		summary: "The queue of a model keeps growing.",
		description: fmt.Sprintf("More than %s requests of model %s (%s) wait, and the queue grew over the last %s.",
			number(r.QueueWaiting.Value), model, r.where(), r.QueueWindow),
		means: fmt.Sprintf("`%s` summed over the model's engines is above %s and grew over the last %s, for %s: "+
			"requests arrive faster than the engines finish them.", waiting.ScrapeName(), number(r.QueueWaiting.Value),
			r.QueueWindow, r.QueueWaiting.For),
		confirm: []string{
			r.byServer().aggregate("sum", r.q.sel(waiting.ScrapeName())),
			"deriv(" + r.waitingSum() + "[" + string(r.QueueWindow) + "])",
			r.byServer().aggregate("sum", r.q.sel(running.ScrapeName())),
		},
		action: "The first query shows where requests wait, the second how fast the queue grows (requests per " +
			"second), the third what runs. `curl -s http://<instance>/metrics | grep -E '^vllm:num_requests_waiting'` " +
			"on a server; `kubectl get hpa,deploy -n <namespace>` for the replicas. Add replicas, or shed load at the " +
			"gateway. `vllm:num_requests_waiting_by_reason` tells waiting for capacity from waiting for KV (a P/D " +
			"decode instance waiting for remote KV); a full KV cache (VLLMKVCacheSaturated) also keeps requests waiting.",
		conditions: []condition{{
			expr: r.waitingSum() + " > " + number(r.QueueWaiting.Value) + "\nand\nderiv(" + r.waitingSum() + "[" +
				string(r.QueueWindow) + "]) > 0",
			forDuration: r.QueueWaiting.For, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "queue above the threshold and growing", at: minute(at), firing: fires(perModel),
				series: []inputSeries{{engine0.series(waiting.ScrapeName()), ramp(r.QueueWaiting.Value+1, 1, at+5)}}},
			{name: "queue above the threshold, steady", at: minute(at),
				series: []inputSeries{{engine0.series(waiting.ScrapeName()), steady(r.QueueWaiting.Value+5, at+5)}}},
		},
	}
}

func (r rules) stuckAlert(engine0 labelSet) alert {
	at := minutes(r.StuckFor) + 5
	series := func(runningNow float64) []inputSeries {
		return []inputSeries{
			{engine0.series(waiting.ScrapeName()), steady(3, at+5)},
			{engine0.series(running.ScrapeName()), steady(runningNow, at+5)},
		}
	}
	return alert{
		name:    "VLLMRequestsStuck",
		summary: "An engine has requests waiting and runs none.",
		description: fmt.Sprintf("Engine {{ $labels.%s }} of model %s (%s) has had requests waiting and none running for %s.",
			instrument.KeyEngine, model, r.where(), r.StuckFor),
		means: fmt.Sprintf("`%s` is above 0 and `%s` is 0 on one engine for %s: the engine admits nothing. It may be "+
			"hung (a dead worker, a collective operation waiting forever), asleep (`vllm:engine_sleep_state`), or "+
			"waiting for KV that never arrives (a P/D decode instance whose prefill peer is gone).",
			waiting.ScrapeName(), running.ScrapeName(), r.StuckFor),
		confirm: []string{
			r.perEngine().aggregate("max", r.q.sel(waiting.ScrapeName())),
			r.perEngine().aggregate("max", r.q.sel(running.ScrapeName())),
			r.perEngine().aggregate("max", r.q.sel(sleepState.ScrapeName())),
		},
		action: "On the engine the alert names: `kubectl logs -n <namespace> <pod> --since=30m | tail -100` (a " +
			"traceback, a NCCL or collective timeout), `curl -s http://<instance>/metrics | grep -E " +
			"'^vllm:(num_requests_(running|waiting)|engine_sleep_state)'`, `kubectl exec -n <namespace> <pod> -- " +
			"nvidia-smi` (a GPU at 0% with memory held: a hang). On a P/D decode instance, " +
			"`vllm:num_requests_waiting_by_reason` and the KV transfer failures (`vllm:nixl_num_failed_transfers_total`). " +
			"Restarting the engine clears a hang; save its log first.",
		conditions: []condition{{
			expr: "(" + r.perEngine().aggregate("max", r.q.sel(waiting.ScrapeName())) + " > 0)\nand\n(" +
				r.perEngine().aggregate("max", r.q.sel(running.ScrapeName())) + " == 0)",
			forDuration: r.StuckFor, labels: severity("critical")}},
		scenarios: []scenario{
			{name: "waiting, none running", series: series(0), at: minute(at), firing: fires(engine0)},
			{name: "waiting and running", series: series(1), at: minute(at)},
		},
	}
}

// byServer groups by a deployment's labels, model_name and the instance
// labels: one series per model and server, for the runbook's queries.
func (r rules) byServer() grouping { return r.agg.also(r.InstanceLabels...) }

// targetLabels are the labels that name a scrape target.
func (r rules) targetLabels() []string { return slices.Concat(r.JobLabels, r.InstanceLabels) }

// perTarget groups by a deployment's labels and the instance labels: one
// series per server.
func (r rules) perTarget() grouping { return r.deploy.also(r.InstanceLabels...) }

// perEngine groups by a deployment's labels, model_name, the instance
// labels and engine: one series per engine.
func (r rules) perEngine() grouping {
	return r.agg.also(slices.Concat(r.InstanceLabels, []string{instrument.KeyEngine})...)
}

// onTargets keeps the series of expr (grouped by perTarget) whose target
// served engine metrics within lookback: a target of infermetrics or vLLM,
// not any other the Prometheus scrapes.
func (r rules) onTargets(expr string, lookback Duration) string {
	return expr + "\nand on (" + strings.Join(r.targetLabels(), ", ") + ")\n" +
		by(r.targetLabels()...).aggregate("group", "last_over_time("+r.q.sel(running.ScrapeName())+"["+string(lookback)+"])")
}

// onDeployments keeps the series of expr (grouped by JobLabels at least)
// of deployments that serve engine metrics: vLLM's and infermetrics'
// HTTP families, not another server's of the same name.
func (r rules) onDeployments(expr string) string {
	return expr + "\nand on (" + strings.Join(r.JobLabels, ", ") + ")\n" +
		by(r.JobLabels...).aggregate("group", r.q.sel(running.ScrapeName()))
}

func (r rules) targetDownAlert(target, engine0 labelSet) alert {
	at := 6 + minutes(r.AbsentFor) + 5
	return alert{
		name:    "VLLMTargetDown",
		summary: "A server of a deployment is down.",
		description: fmt.Sprintf("Prometheus could not scrape {{ $labels.%s }} of deployment %s for %s; it served engine metrics within %s.",
			r.InstanceLabels[0], r.where(), r.AbsentFor, r.AbsentLookback),
		means: fmt.Sprintf("`up` is 0 for a target that served `%s` within the last %s, for %s: the server is down, "+
			"restarting, or its metrics endpoint does not answer in time.", running.ScrapeName(), r.AbsentLookback, r.AbsentFor),
		confirm: []string{
			r.perTarget().aggregate("max", selector("up", r.Selector)) + " == 0",
			r.perTarget().aggregate("max", selector("scrape_duration_seconds", r.Selector)),
		},
		action: "Check the process or pod: `kubectl get pods -n <namespace> -o wide` (CrashLoopBackOff, Pending), " +
			"`kubectl describe pod -n <namespace> <pod>` (OOMKilled, probes, GPU scheduling), `kubectl logs -n <namespace> " +
			"<pod> --previous`; and its endpoint from where Prometheus runs: `curl -sv -o /dev/null http://<instance>/metrics`. " +
			"Prometheus's targets page shows the scrape's error. A server removed on purpose stops the alert once its " +
			"last engine series is older than the lookback.",
		conditions: []condition{{
			expr:        r.onTargets(r.perTarget().aggregate("max", selector("up", r.Selector))+" == 0", r.AbsentLookback),
			forDuration: r.AbsentFor, labels: severity("critical")}},
		scenarios: []scenario{
			{name: "target down", at: minute(at), firing: fires(target), series: []inputSeries{
				{target.series("up"), "1x5 0x" + fmt.Sprint(at)},
				{engine0.series(running.ScrapeName()), "0x5 stale"},
			}},
			{name: "target up", at: minute(at), series: []inputSeries{
				{target.series("up"), steady(1, at+5)},
				{engine0.series(running.ScrapeName()), steady(0, at+5)},
			}},
		},
	}
}

func (r rules) metricsAbsentAlert(target, engine0 labelSet) alert {
	at := 10 + 5 + minutes(r.AbsentFor) + 5
	jobs := r.deploy
	job := r.jobOf(target)
	return alert{
		name:    "VLLMMetricsAbsent",
		summary: "No server of a deployment serves engine metrics.",
		description: fmt.Sprintf("Deployment %s served engine metrics within %s and serves none now: every target is gone.",
			r.where(), r.AbsentLookback),
		means: fmt.Sprintf("`%s` has had no series of the deployment for %s though it had some within %s: no target "+
			"is scraped any more (all down and removed from service discovery, or the scrape configuration lost them).",
			running.ScrapeName(), r.AbsentFor, r.AbsentLookback),
		confirm: []string{
			r.deploy.aggregate("count", selector("up", r.Selector)),
			r.deploy.aggregate("group", "last_over_time("+r.q.sel(running.ScrapeName())+"["+string(r.AbsentLookback)+"])"),
		},
		action: "The first query shows whether Prometheus still has targets for the deployment, the second when it " +
			"last served engine metrics. `kubectl get deploy,statefulset,pods -n <namespace>` (scaled to zero? every " +
			"pod failing?), `kubectl get servicemonitor,podmonitor -n <namespace>` and Prometheus's service discovery " +
			"page (`/service-discovery`) for a scrape configuration that lost them. A deployment removed on purpose " +
			"stops the alert after the lookback.",
		conditions: []condition{{
			expr: jobs.aggregate("group", "last_over_time("+r.q.sel(running.ScrapeName())+"["+string(r.AbsentLookback)+"])") +
				"\nunless\n" + jobs.aggregate("group", r.q.sel(running.ScrapeName())),
			forDuration: r.AbsentFor, labels: severity("critical")}},
		scenarios: []scenario{
			{name: "series gone", at: minute(at), firing: fires(job),
				series: []inputSeries{{engine0.series(running.ScrapeName()), steady(0, 10)}}},
			{name: "series present", at: minute(at),
				series: []inputSeries{{engine0.series(running.ScrapeName()), steady(0, at+5)}}},
		},
	}
}

func (r rules) handoffAlert(engine0, perModel labelSet, w int) alert {
	at := w + minutes(r.Handoff.For) + 5
	// Observations all in the bucket above the threshold, or all in the
	// one at or below it.
	var below, above1, above2 float64
	for i, b := range handoff.Buckets {
		if b < r.Handoff.Value {
			below = b
		}
		if b >= r.Handoff.Value && above1 == 0 {
			above1, above2 = b, handoff.Buckets[min(i+1, len(handoff.Buckets)-1)]
		}
	}
	buckets := func(slow bool) []inputSeries {
		var out []inputSeries
		for _, b := range []struct {
			le   string
			full bool
		}{{leText(below), !slow}, {leText(above1), !slow}, {leText(above2), true}, {"+Inf", true}} {
			step := 0.0
			if b.full {
				step = 60
			}
			out = append(out, inputSeries{engine0.with(labelPair{"le", b.le}).series(handoff.ScrapeName() + "_bucket"), ramp(0, step, at+5)})
		}
		return out
	}
	quantile := labelPair{"quantile", number(r.HandoffQuantile)}
	return alert{
		name:    "InfermetricsPDHandoffSlow",
		summary: "A P/D router hands requests over slowly.",
		description: fmt.Sprintf("The %s quantile of the handoff from prefill to decode of model %s (%s) is above %ss.",
			number(r.HandoffQuantile), model, r.where(), number(r.Handoff.Value)),
		means: fmt.Sprintf("`%s` (the router's time from the end of a request's prefill leg to the start of its decode "+
			"leg) has its %s quantile above %ss for %s. The time to first token of every routed request holds it.",
			handoff.ScrapeName(), number(r.HandoffQuantile), number(r.Handoff.Value), r.Handoff.For),
		confirm: []string{
			"histogram_quantile(" + number(r.HandoffQuantile) + ", " +
				r.byServer().buckets().aggregate("sum", r.q.rate(handoff.ScrapeName()+"_bucket")) + ")",
			"histogram_quantile(" + number(r.HandoffQuantile) + ", " +
				r.byServer().buckets().aggregate("sum", r.q.rate(prefillLeg.ScrapeName()+"_bucket")) + ")",
		},
		action: "The first query names the slow routers, the second compares the prefill leg. The router itself is " +
			"slow between the legs: its CPU (`kubectl top pod -n <namespace> <pod>`), its connection pool to the decode " +
			"instances (new connections, TLS: `kubectl logs -n <namespace> <pod> | grep -i dial`), or a decode instance " +
			"that accepts requests slowly. Compare with the decode leg's first chunk on the gateway dashboard.",
		conditions: []condition{{
			expr:        selector(r.quantileName(handoff), eq(quantile.name, quantile.value)) + " > " + number(r.Handoff.Value),
			forDuration: r.Handoff.For, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "handoffs slow", series: buckets(true), at: minute(at), firing: fires(perModel.with(quantile))},
			{name: "handoffs fast", series: buckets(false), at: minute(at)},
		},
	}
}

// The HTTP families' labels and values the availability alerts read.
var (
	httpStatus   = label(instrument.KeyHTTPStatus)
	httpHandler  = label(instrument.KeyHTTPHandler)
	httpMethod   = label(instrument.KeyHTTPMethod)
	serverErrors = "5xx" // the status class of instrument.RecordHTTPRequest (status / 100, then "xx")
)

// processStart is client_golang's (and prometheus_client's) gauge of the
// process's start time, in Unix seconds, which exporters.Setup and
// prometheus.NewProvider serve by default beside the engine families.
const processStart = "process_start_time_seconds"

// httpSeries is a test series of http_requests_total of a target: the
// chat route's POST requests of a status class.
func httpSeries(target labelSet, status, values string) inputSeries {
	return inputSeries{target.with(labelPair{httpHandler, "/v1/chat/completions"}, labelPair{httpMethod, "POST"},
		labelPair{httpStatus, status}).series(httpRequests.ScrapeName()), values}
}

// admissionSeries is a test series of vllm:admission_rejections_total of a
// target's model, the request limit's.
func admissionSeries(target labelSet, values string) inputSeries {
	return inputSeries{target.with(labelPair{instrument.KeyModelName, testModel},
		labelPair{label(instrument.KeyWaitingReason), stats.AdmissionQueuedRequests.String()}).series(admission.ScrapeName()), values}
}

// serverErrorRate is the rate of a deployment's HTTP requests answered 5xx
// less its admission refusals (vLLM's 503s that shed load, which its HTTP
// families count as 5xx too), never below 0: none where the deployment has
// no admission counter (vLLM before PR #55812).
func (r rules) serverErrorRate() string {
	status := r.q.with(eq(httpStatus, serverErrors))
	return "clamp_min(\n  " + status.sumRate(httpRequests, r.agg) + "\n  - (" + r.q.sumRate(admission, r.deploy) +
		" or 0 * " + status.sumRate(httpRequests, r.agg) + "),\n  0\n)"
}

func (r rules) httpErrorsAlert(target, engine0 labelSet, w int) alert {
	at := w + minutes(r.HTTPErrorRatio.For) + 5
	requests := func(errShare, refusedShare float64) []inputSeries {
		return []inputSeries{
			httpSeries(target, "2xx", ramp(0, 60*(1-errShare), at+5)),
			httpSeries(target, serverErrors, ramp(0, 60*errShare, at+5)),
			{engine0.series(running.ScrapeName()), steady(0, at+5)},
			admissionSeries(target, ramp(0, 60*refusedShare, at+5)),
		}
	}
	status := r.q.with(eq(httpStatus, serverErrors))
	return alert{
		name:    "VLLMHTTPServerErrors",
		summary: "A deployment answers HTTP requests with server errors.",
		description: fmt.Sprintf("More than %s of the HTTP requests deployment %s served over the last %s got a 5xx status other than an admission refusal.",
			percent(r.HTTPErrorRatio.Value), r.where(), r.RateWindow),
		means: fmt.Sprintf("`%s{%s=%q}`, less the admission refusals of `%s` (503s of a server that sheds load: "+
			"VLLMLoadShedding's), is more than %s of `%s` (every handler, summed over the deployment's servers) "+
			"for %s. It counts what a client saw, requests refused before an engine took them included (an engine that "+
			"refuses every request finishes none, so VLLMRequestErrors has no data then); behind a gateway "+
			"(infermetrics-proxy, a P/D router), its 502 and 504 answers for an upstream that failed.",
			httpRequests.ScrapeName(), httpStatus, serverErrors, admission.ScrapeName(), percent(r.HTTPErrorRatio.Value),
			httpRequests.ScrapeName(), r.HTTPErrorRatio.For),
		confirm: []string{
			r.byServer().also(httpHandler).aggregate("sum", status.rate(httpRequests.ScrapeName())) + "\n/\n" +
				r.byServer().also(httpHandler).aggregate("sum", r.q.rate(httpRequests.ScrapeName())),
		},
		action: "The query names the failing servers and handlers. Ask one's API directly: `curl -s -o /dev/null -w '%{http_code}\\n' " +
			"http://<server>/v1/models`; then its log for the failing requests (`kubectl logs -n <namespace> <pod> " +
			"--since=30m | grep -E ' 5[0-9][0-9] |error'`). Behind a gateway, the gateway dashboard's *Backends* row " +
			"for which upstream fails and how (`error_type`), and `up` of the upstreams.",
		conditions: []condition{{
			expr: r.onDeployments(r.serverErrorRate() + "\n/\n" + r.q.sumRate(httpRequests, r.agg) +
				"\n> " + number(r.HTTPErrorRatio.Value)),
			forDuration: r.HTTPErrorRatio.For, labels: severity("critical")}},
		scenarios: []scenario{
			{name: "server errors above the threshold", series: requests(min(0.99, 2*r.HTTPErrorRatio.Value), 0), at: minute(at),
				firing: fires(r.jobOf(target))},
			{name: "server errors below the threshold", series: requests(r.HTTPErrorRatio.Value/2, 0), at: minute(at)},
			{name: "the server errors are admission refusals", at: minute(at),
				series: requests(min(0.99, 2*r.HTTPErrorRatio.Value), min(0.99, 2*r.HTTPErrorRatio.Value))},
			{name: "server errors above the threshold beside admission refusals", at: minute(at), firing: fires(r.jobOf(target)),
				series: requests(min(0.99, 3*r.HTTPErrorRatio.Value), r.HTTPErrorRatio.Value/2)},
			{name: "server errors above the threshold, no admission counter (vLLM before PR #55812)", at: minute(at),
				firing: fires(r.jobOf(target)), series: requests(min(0.99, 2*r.HTTPErrorRatio.Value), 0)[:3]},
		},
	}
}

// sheddingAlert is a warning: a server that refuses what it would not
// serve in time works as configured; a share that stays high says the
// deployment lacks capacity, not that it fails.
func (r rules) sheddingAlert(target, engine0, perModel labelSet, w int) alert {
	at := w + minutes(r.LoadShedding.For) + 5
	attempts := func(refusedShare float64) []inputSeries {
		return []inputSeries{
			{engine0.with(labelPair{finishedReason, stats.FinishStop.String()}).series(requestSuccess.ScrapeName()),
				ramp(0, 60*(1-refusedShare), at+5)},
			admissionSeries(target, ramp(0, 60*refusedShare, at+5)),
		}
	}
	refused := r.q.sumRate(admission, r.agg)
	return alert{
		name:    "VLLMLoadShedding",
		summary: "A model's servers refuse requests at admission: they shed load.",
		description: fmt.Sprintf("More than %s of the admission attempts of model %s (%s) were refused over the last %s: "+
			"its queue limits were reached.", percent(r.LoadShedding.Value), model, r.where(), r.RateWindow),
		means: fmt.Sprintf("`%s` (by `reason`: `%s` for --max-num-queued-reqs, `%s` for --max-num-queued-tokens) is more "+
			"than %s of it and `%s` together for %s: the servers answer 503 to what they would not serve in time, as "+
			"their admission control is configured to, and a client or load balancer retries elsewhere. Shedding is "+
			"not failing: these 503s are left out of VLLMHTTPServerErrors, and vLLM counts no refused attempt as a "+
			"request (nor does infermetrics-proxy). Sustained, it says the deployment lacks capacity for its traffic.",
			admission.ScrapeName(), stats.AdmissionQueuedRequests, stats.AdmissionQueuedTokens, percent(r.LoadShedding.Value),
			requestSuccess.ScrapeName(), r.LoadShedding.For),
		confirm: []string{
			r.byServer().also(label(instrument.KeyWaitingReason)).aggregate("sum", r.q.rate(admission.ScrapeName())),
			r.q.sumRate(admission, r.byServer()) + "\n/\n(" + r.q.sumRate(admission, r.byServer()) + " + " +
				r.q.sumRate(requestSuccess, r.byServer()) + ")",
		},
		action: "The first query says which limit refuses on which servers. Compare the queue with the limit " +
			"(`vllm:num_requests_waiting` and `vllm:num_requests_running` against --max-num-queued-reqs) and the " +
			"traffic with what the servers finish: add replicas or engines, let the load balancer spread requests " +
			"more evenly (a refusal asks it to retry elsewhere), or raise the limit if the latency objectives allow " +
			"the longer queue. A limit of prefill tokens refusing long prompts is working as intended.",
		conditions: []condition{{
			expr: refused + "\n/\n(\n  " + refused + "\n  + " + r.q.sumRate(requestSuccess, r.agg) + "\n)\n> " +
				number(r.LoadShedding.Value),
			forDuration: r.LoadShedding.For, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "refusals above the threshold", series: attempts(min(0.99, 2*r.LoadShedding.Value)), at: minute(at),
				firing: fires(perModel)},
			{name: "refusals below the threshold", series: attempts(r.LoadShedding.Value / 2), at: minute(at)},
		},
	}
}

func (r rules) trafficStoppedAlert(target, engine0 labelSet) alert {
	win, look, forMin := minutes(r.TrafficStoppedWindow), minutes(r.TrafficStoppedLookback), minutes(r.TrafficStoppedFor)
	const flowed = 10 // minutes of traffic before it stops
	at := flowed + win + forMin + min(2, max(0, look-win-forMin-1))
	traffic := func(name string, values string, firing []firing) scenario {
		return scenario{name: name, at: minute(at), firing: firing, series: []inputSeries{
			httpSeries(target, "2xx", values), {engine0.series(running.ScrapeName()), steady(0, at+5)}}}
	}
	increase := func(w Duration) string {
		return r.q.sumIncrease(httpRequests, string(w), r.agg)
	}
	return alert{
		name:    "VLLMTrafficStopped",
		summary: "A deployment stopped receiving requests.",
		description: fmt.Sprintf("Deployment %s served HTTP requests within the last %s and none over the last %s.",
			r.where(), r.TrafficStoppedLookback, r.TrafficStoppedWindow),
		means: fmt.Sprintf("`%s` of the deployment (every handler and status, summed over its servers) grew within the "+
			"last %s and not over the last %s, for %s, while its servers are scraped: clients no longer reach it (a "+
			"gateway, load balancer, Service or DNS in front of it that lost it, an ingress rule, a client fleet "+
			"down), or nobody sends any. A deployment whose targets are down is VLLMTargetDown's, not this one's.",
			httpRequests.ScrapeName(), r.TrafficStoppedLookback, r.TrafficStoppedWindow, r.TrafficStoppedFor),
		confirm: []string{
			r.q.sumIncrease(httpRequests, string(r.TrafficStoppedLookback), r.byServer().also(httpHandler)),
			r.byServer().aggregate("sum", r.q.rate(httpRequests.ScrapeName())),
		},
		action: "The first query shows which servers and handlers had requests within the lookback, the second that " +
			"none come now. Send one request to a server's API directly (`curl -s http://<server>/v1/models`) and one " +
			"through the front door clients use; if the direct one answers, the path in front is at fault (the " +
			"gateway's or load balancer's logs, the Service's endpoints: `kubectl get endpoints -n <namespace>`, " +
			"`kubectl get ingress,httproute -n <namespace>`). A deployment idle on purpose (a test, a drained region) " +
			"stops the alert once its last request is older than the lookback; silence it meanwhile.",
		conditions: []condition{{
			expr: r.onDeployments(increase(r.TrafficStoppedWindow) + " == 0\nand\n" +
				increase(r.TrafficStoppedLookback) + " > 0"),
			forDuration: r.TrafficStoppedFor, labels: severity("warning")}},
		scenarios: []scenario{
			traffic("traffic stopped", fmt.Sprintf("%s %sx%d", ramp(0, 60, flowed), number(60*flowed), at+5-flowed),
				fires(r.jobOf(target))),
			traffic("traffic flows", ramp(0, 60, at+5), nil),
			traffic("no traffic ever", steady(0, at+5), nil),
		},
	}
}

func (r rules) restartAlert(target, engine0 labelSet) alert {
	const restartedAt = 10
	at := restartedAt + min(5, minutes(r.RestartWindow)-1)
	series := func(start string) []inputSeries {
		return []inputSeries{{target.series(processStart), start}, {engine0.series(running.ScrapeName()), steady(0, at+5)}}
	}
	other := target.with()
	for i := range other {
		if slices.Contains(r.JobLabels, other[i].name) {
			other[i].value = "node-exporter"
		}
	}
	restarted := fmt.Sprintf("%sx%d %sx%d", number(1e9), restartedAt, number(1e9+60*restartedAt), at+5-restartedAt)
	return alert{
		name:    "VLLMServerRestarted",
		summary: "A server of a deployment restarted.",
		description: fmt.Sprintf("A server of deployment %s (an engine, a router or infermetrics-proxy) restarted within the last %s.",
			r.where(), r.RestartWindow),
		means: fmt.Sprintf("`%s` of a target that served `%s` changed within the last %s: the process restarted where "+
			"it ran (same instance: a crashed or killed process started again, a container restarted in its pod), "+
			"and lost its requests in flight and its counters. Every infermetrics process serves the gauge on its "+
			"Prometheus endpoint by default (client_golang's process collector, which exporters.Setup and "+
			"prometheus.NewProvider register unless WithoutProcessMetrics); over OTLP it is not sent and the alert stays quiet. A rollout that "+
			"replaces pods starts new instances and does not fire it. It resolves %s after the last restart.",
			processStart, running.ScrapeName(), r.RestartWindow, r.RestartWindow),
		confirm: []string{
			r.onTargets("changes("+r.q.sel(processStart)+"["+string(r.RestartWindow)+"]) > 0", r.RestartWindow),
			"time() - " + r.q.sel(processStart),
		},
		action: "The first query names the servers and how often each restarted, the second how long each has run. " +
			"Then why: `kubectl get pod -n <namespace> <pod>` (RESTARTS), `kubectl describe pod -n <namespace> <pod>` " +
			"(OOMKilled, a failed liveness probe), `kubectl logs -n <namespace> <pod> --previous`, or the service " +
			"manager's log (`journalctl -u <unit>`); an engine's GPU errors in `dmesg` or `nvidia-smi`. Restarts again " +
			"and again: a crash loop, VLLMTargetDown follows.",
		conditions: []condition{{
			expr: r.deploy.aggregate("count", r.onTargets("changes("+r.q.sel(processStart)+"["+string(r.RestartWindow)+"]) > 0",
				r.RestartWindow)),
			forDuration: "0m", labels: severity("warning")}},
		scenarios: []scenario{
			{name: "a server restarted", series: series(restarted), at: minute(at), firing: fires(r.jobOf(target))},
			{name: "no restart", series: series(steady(1e9, at+5)), at: minute(at)},
			{name: "a target without engine metrics restarted", at: minute(at), series: []inputSeries{
				{other.series(processStart), restarted}, {engine0.series(running.ScrapeName()), steady(0, at+5)}}},
		},
	}
}

// valueDropped is the kind of infermetrics_invalid_events_total that
// counts a request recorded without a value the server reported out of
// bounds (cached tokens above the prompt, a count beyond
// stats.MaxRequestTokens): the upstream server's reporting, not a refusal
// of the recording program's input. TestValueDroppedIsAKind checks it
// against the catalog.
const valueDropped = "value_dropped"

// invalidEvents are the scenarios' series of invalid events of a kind:
// growing, or steady after some.
func invalidEventsSeries(engine0 labelSet, kind string, growing bool, n int) inputSeries {
	return inputSeries{engine0.with(labelPair{instrument.KeyKind, kind}).series(invalidEvents.ScrapeName()), growth(growing, n)}
}

// growth is the values of a scenario's counter over n minutes: growing by
// one a minute, or steady after some.
func growth(growing bool, n int) string {
	if growing {
		return ramp(0, 1, n)
	}
	return steady(3, n)
}

// increases is the condition of the alerts on a counter of things that
// should not happen: family f's series that matchers select grew over the
// rate window, per group g.
func (r rules) increases(g grouping, f views.Family, matchers ...string) string {
	return r.q.with(matchers...).sumIncrease(f, string(r.RateWindow), g) + " > 0"
}

func (r rules) invalidEventsAlert(engine0, perModel labelSet, w int) alert {
	at := w + minutes(r.InvalidEventsFor) + 5
	kind := labelPair{instrument.KeyKind, stats.KindOutput.String()}
	return alert{
		name:    "InfermetricsInvalidEvents",
		summary: "The instrumentation refuses what it is given.",
		description: fmt.Sprintf("infermetrics refused input of kind {{ $labels.%s }} for model %s (%s) in every %s for %s.",
			instrument.KeyKind, model, r.where(), r.RateWindow, r.InvalidEventsFor),
		means: fmt.Sprintf("`%s` (the Recorder's count of input it refused, by `kind`) keeps growing for a kind other "+
			"than `%s`: the program reports impossible values (a negative count, times out of order, an event of an "+
			"unknown request) and the metrics miss what it refused. `%s` (a server's odd usage) is "+
			"InfermetricsUpstreamValuesDropped's.", invalidEvents.ScrapeName(), valueDropped, valueDropped),
		confirm: []string{
			r.q.with(instrument.KeyKind+"!="+strconv.Quote(valueDropped)).sumIncrease(invalidEvents, "1h", r.byServer().also(instrument.KeyKind)),
		},
		action: "A bug of the program that records, not of the server: the first refusal of each kind is reported " +
			"to its error handler (`otel.Handle` by default, the program's log), which says what was refused and why: " +
			"`kubectl logs -n <namespace> <pod> --since=1h | grep 'instrument: engine'`. " +
			"[docs/metrics.md](metrics.md) lists the kinds; report the message with the program's version.",
		conditions: []condition{{
			expr:        r.increases(r.agg.also(instrument.KeyKind), invalidEvents, instrument.KeyKind+"!="+strconv.Quote(valueDropped)),
			forDuration: r.InvalidEventsFor, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "refusals keep coming", at: minute(at), firing: fires(perModel.with(kind)),
				series: []inputSeries{invalidEventsSeries(engine0, kind.value, true, at+5)}},
			{name: "refusals stopped", at: minute(at),
				series: []inputSeries{invalidEventsSeries(engine0, kind.value, false, at+5)}},
			{name: "values dropped only", at: minute(at),
				series: []inputSeries{invalidEventsSeries(engine0, valueDropped, true, at+5)}},
		},
	}
}

// The upstream alert is info: the metrics stay right but for the one
// value dropped per request, and the fix is the server's (or its
// provider's), which the operator of the recording program may not own; a
// page would be one nobody can act on.
func (r rules) valueDroppedAlert(engine0, perModel labelSet, w int) alert {
	at := w + minutes(r.ValueDroppedFor) + 5
	return alert{
		name:    "InfermetricsUpstreamValuesDropped",
		summary: "The upstream server reports values infermetrics cannot record.",
		description: fmt.Sprintf("Requests of model %s (%s) are recorded without a value their server reported out "+
			"of bounds (kind %s), in every %s for %s.", model, r.where(), valueDropped, r.RateWindow, r.ValueDroppedFor),
		means: fmt.Sprintf("`%s{%s=%q}` keeps growing: responses of the upstream server carry a value that cannot be "+
			"true, and each such request is recorded without it (its other values kept): cached prompt tokens above the "+
			"prompt (a provider whose `prompt_tokens` leaves the cached ones out: openaihttp's package doc names "+
			"them), or a token count beyond `stats.MaxRequestTokens`. This is the upstream server's reporting, not a "+
			"bug of the program that records.", invalidEvents.ScrapeName(), instrument.KeyKind, valueDropped),
		confirm: []string{
			r.q.with(eq(instrument.KeyKind, valueDropped)).sumIncrease(invalidEvents, "1h", r.byServer()),
		},
		action: "The query names the models and servers; the recording program's error handler reports the drops " +
			"with the values (`kubectl logs -n <namespace> <pod> --since=1h | grep 'instrument: engine'`). Ask the " +
			"server or provider behind the model for one response and read its usage: `curl -s <upstream>/v1/chat/completions " +
			"-H 'Content-Type: application/json' -d '{\"model\": \"<model>\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}' | " +
			"jq .usage`. Nothing in the recording program needs fixing; the prompt-token and cache figures of those " +
			"requests lack the dropped value (cached tokens count as computed). If the provider's reporting is known " +
			"and accepted, silence the alert for that model.",
		conditions: []condition{{
			expr:        r.increases(r.agg, invalidEvents, eq(instrument.KeyKind, valueDropped)),
			forDuration: r.ValueDroppedFor, labels: severity("info")}},
		scenarios: []scenario{
			{name: "values keep being dropped", at: minute(at), firing: fires(perModel),
				series: []inputSeries{invalidEventsSeries(engine0, valueDropped, true, at+5)}},
			{name: "drops stopped", at: minute(at),
				series: []inputSeries{invalidEventsSeries(engine0, valueDropped, false, at+5)}},
			{name: "other refusals only", at: minute(at),
				series: []inputSeries{invalidEventsSeries(engine0, stats.KindOutput.String(), true, at+5)}},
		},
	}
}

func (r rules) overflowAlert(target, perModel labelSet, w int) alert {
	at := w + minutes(r.OverflowFor) + 5
	overflow := func(l labelSet) labelSet {
		out := slices.Clone(l)
		for i := range out {
			if out[i].name == instrument.KeyModelName {
				out[i].value = r.OverflowModel
			}
		}
		return out
	}
	// Requests of a model: the overflow's series stays after its last.
	series := func(model string, start, step float64) inputSeries {
		return inputSeries{target.with(labelPair{instrument.KeyModelName, model}, labelPair{instrument.KeyEngine, "0"},
			labelPair{finishedReason, stats.FinishStop.String()}).series(requestSuccess.ScrapeName()), ramp(start, step, at+5)}
	}
	return alert{
		name:    "InfermetricsModelOverflow",
		summary: "infermetrics-proxy records requests under its overflow model.",
		description: fmt.Sprintf("Deployment %s records requests for models beyond its -max-models under model_name=%q: their "+
			"models are not told apart.", r.where(), r.OverflowModel),
		means: fmt.Sprintf("`%s{%s=%q}` grows: infermetrics-proxy saw more model names than `-max-models` (its "+
			"cardinality cap) and records the requests of every further model, and of model names that are not "+
			"UTF-8, under `%s`.", requestSuccess.ScrapeName(), instrument.KeyModelName, r.OverflowModel, r.OverflowModel),
		confirm: []string{
			r.q.with(eq(instrument.KeyModelName, r.OverflowModel)).sumRate(requestSuccess, r.byServer()),
			r.deploy.aggregate("count", r.agg.aggregate("group", r.q.sel(requestSuccess.ScrapeName()))),
		},
		action: "The first query names the proxies, the second counts the model names each deployment records. " +
			"The proxy's flags: `kubectl get pod -n <namespace> <pod> -o jsonpath='{.spec.containers[*].args}'`. " +
			"If the models are real, raise `-max-models`; if clients send made-up or per-request model names, " +
			"set `-default-model` and fix the clients. The gateway dashboard's *Per model* row shows the overflow's " +
			"requests beside the others'.",
		conditions: []condition{{
			expr: r.agg.aggregate("sum",
				r.q.with(eq(instrument.KeyModelName, r.OverflowModel)).rate(requestSuccess.ScrapeName())) + " > 0",
			forDuration: r.OverflowFor, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "requests recorded as the overflow model", at: minute(at), firing: fires(overflow(perModel)),
				series: []inputSeries{series(r.OverflowModel, 0, 1), series(testModel, 0, 10)}},
			{name: "overflow series idle", at: minute(at),
				series: []inputSeries{series(r.OverflowModel, 5, 0), series(testModel, 0, 10)}},
		},
	}
}

// overflowLabel is the label of the series the OpenTelemetry SDK merges a
// stream's attribute sets beyond its cardinality limit into: the SDK's
// attribute otel.metric.overflow, as a Prometheus scrape names it.
var overflowLabel = label("otel.metric.overflow")

func (r rules) cardinalityAlert(target, engine0 labelSet) alert {
	at := 5 + minutes(r.CardinalityOverflowFor) + 5
	const familyLabel = "family"
	families := r.deploy.also(familyLabel)
	job := r.jobOf(target)
	// Scraped series only (a recording rule's output keeps the label but
	// not the instance), each named by its family: a histogram's parts are
	// one.
	matchers := append(slices.Clone(r.q.matchers), eq(overflowLabel, "true"), r.InstanceLabels[0]+`!=""`)
	named := `label_replace(` + selector("", matchers...) + `, "` + familyLabel + `", "$1", "__name__", "(.+?)(_bucket|_count|_sum)?")`
	overflowed := target.with(labelPair{overflowLabel, "true"}).series(promptTokens.ScrapeName())
	return alert{
		name:    "InfermetricsCardinalityOverflow",
		summary: "A family has more series than its cardinality limit.",
		description: fmt.Sprintf("Deployment %s serves one family or more with a series labelled %s=\"true\": the "+
			"measurements of their attribute sets beyond the limit are merged into it (the runbook's query names "+
			"the families).", r.where(), overflowLabel),
		means: fmt.Sprintf("The OpenTelemetry SDK keeps at most a cardinality limit of attribute sets per stream "+
			"(`exporters.WithCardinalityLimit`, `exporters.DefaultCardinalityLimit` by default); the measurements "+
			"of every further set go to one series that carries only `%s=\"true\"`, so totals over the family "+
			"stay right but the series beyond the limit (a model, an engine, a backend) are no longer told apart, "+
			"until the process restarts.", overflowLabel),
		confirm: []string{
			r.deploy.also(r.InstanceLabels...).also("__name__").aggregate("count", selector("", matchers...)),
		},
		action: "The query names the servers and series. On one: `curl -s http://<instance>/metrics | grep " +
			"'otel_metric_overflow=\"true\"'`, and count the series of the family by label to find which grew " +
			"(`curl -s http://<instance>/metrics | grep '^<family>' | wc -l`): a gateway that sees many model names " +
			"(infermetrics-proxy's `-max-models` caps them), or backends named per pod or per request. If the series are " +
			"real, raise the limit (`exporters.WithCardinalityLimit`) and restart.",
		conditions: []condition{{
			// One page per deployment however many families overflowed: a
			// limit too small for a deployment overflows several at once.
			expr:        r.deploy.aggregate("count", families.aggregate("count", named)) + " > 0",
			forDuration: r.CardinalityOverflowFor, labels: severity("warning")}},
		scenarios: []scenario{
			{name: "a family overflowed", at: minute(at),
				firing: fires(job),
				series: []inputSeries{{engine0.series(promptTokens.ScrapeName()), ramp(0, 10, at+5)},
					{overflowed, ramp(0, 1, at+5)}}},
			{name: "several families overflowed", at: minute(at), firing: fires(job),
				series: []inputSeries{{engine0.series(promptTokens.ScrapeName()), ramp(0, 10, at+5)},
					{overflowed, ramp(0, 1, at+5)},
					{target.with(labelPair{overflowLabel, "true"}).series(generation.ScrapeName()), ramp(0, 1, at+5)}}},
			{name: "within the limit", at: minute(at),
				series: []inputSeries{{engine0.series(promptTokens.ScrapeName()), ramp(0, 10, at+5)}}},
		},
	}
}

// annotations are the annotations of an alert's rules.
func (r rules) annotations(a alert) []labelPair {
	return []labelPair{{"summary", a.summary}, {"description", a.description},
		{"runbook_url", r.RunbookURL + "#" + strings.ToLower(a.name)}}
}

// alertGroup returns the alerting rules of the alerts, in one group.
func (r rules) alertGroup(alerts []alert) ruleGroup {
	g := ruleGroup{name: "infermetrics-alerts"}
	for _, a := range alerts {
		for _, c := range a.conditions {
			g.rules = append(g.rules, rule{alert: a.name, expr: c.expr, forDuration: c.forDuration, labels: c.labels,
				annotations: r.annotations(a)})
		}
	}
	return g
}

// selectorLabels returns the labels of a selector made of equality
// matchers, which the unit tests' series carry.
func selectorLabels(sel string) (labelSet, error) {
	var out labelSet
	for m := range strings.SplitSeq(sel, ",") {
		if strings.TrimSpace(m) == "" {
			continue
		}
		name, value, ok := strings.Cut(m, "=")
		name = strings.TrimSpace(name)
		v, err := strconv.Unquote(strings.TrimSpace(value))
		if !ok || err != nil || !labelName.MatchString(name) || strings.HasPrefix(value, "~") {
			return nil, fmt.Errorf("the Selector %q: the unit tests take equality matchers only (name=\"value\", ...)", sel)
		}
		out = append(out, labelPair{name, v})
	}
	return out, nil
}
