package mixin

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
)

// Config holds the parameters of the rules, alerts and dashboards. Default
// gives the shipped values; docs/monitoring.md lists each with its default.
type Config struct {
	// Selector is label matchers added to every series selector of the
	// rules, for example job="vllm" or namespace="llm"; empty selects every
	// series. The unit tests' series carry them: equality matchers only.
	Selector string
	// JobLabels name a deployment: every recording rule and alert
	// aggregates by them and model_name (PromQL's by, so that no other
	// label, priority or a lora_name, splits a page or breaks a ratio); a
	// label a setup lacks (cluster, namespace on plain Prometheus) is empty.
	JobLabels []string
	// ExtraGroupLabels are labels the rules and alerts keep beside
	// JobLabels and model_name, for a label that tells deployments apart
	// within one job (a P/D role label of your own, say); empty by default.
	ExtraGroupLabels []string
	// InstanceLabels name one server of a deployment: the recording rules
	// sum them and engine away (one series per model and deployment); the
	// per-server alerts (target down, stuck engine) keep them.
	InstanceLabels []string
	// RateWindow is the window of the recording rules' rates and
	// quantiles, and of the alerts that read them.
	RateWindow Duration
	// Quantiles are the quantiles the latency recording rules record.
	Quantiles []float64
	// Interval is the evaluation interval of every rule group; empty keeps
	// the global one.
	Interval Duration
	// RunbookURL is the address of the runbook; each alert's runbook_url
	// annotation is it and the alert's anchor.
	RunbookURL string
	// OverflowModel is the model_name infermetrics-proxy records requests
	// for models beyond its -max-models under.
	OverflowModel string

	// HTTPErrorRatio: the share of a deployment's HTTP requests
	// (http_requests_total, every handler) answered with a 5xx status above
	// which VLLMHTTPServerErrors fires.
	HTTPErrorRatio Threshold
	// TrafficStoppedWindow is how long a deployment that served HTTP
	// requests within TrafficStoppedLookback must have served none before
	// VLLMTrafficStopped's condition holds.
	TrafficStoppedWindow Duration
	// TrafficStoppedLookback is how far back VLLMTrafficStopped looks for
	// the requests that show traffic flowed; longer than
	// TrafficStoppedWindow.
	TrafficStoppedLookback Duration
	// TrafficStoppedFor is VLLMTrafficStopped's for:.
	TrafficStoppedFor Duration
	// RestartWindow is how long VLLMServerRestarted fires after a server
	// (an engine, a router, infermetrics-proxy) restarted in place: its
	// process_start_time_seconds changed within it.
	RestartWindow Duration
	// ErrorRatio: the share of finished requests that ended in error
	// (finished_reason="error") above which VLLMRequestErrors fires.
	ErrorRatio Threshold
	// LoadShedding: the share of a model's admission attempts refused
	// (vllm:admission_rejections_total over it and the finished requests)
	// above which VLLMLoadShedding fires.
	LoadShedding Threshold
	// TTFT is the time-to-first-token objective: Objective of requests
	// get their first token within Seconds.
	TTFT SLO
	// ITL is the inter-token latency objective: Objective of the gaps
	// between two tokens of a request are within Seconds.
	ITL SLO
	// BurnRates are the windows and burn rates of the SLO alerts
	// (multi-window, multi-burn-rate alerting, Google's SRE workbook,
	// "Alerting on SLOs"). The default is kubernetes-mixin's four tiers
	// (1h/5m x14.4, 6h/30m x6, 1d/2h x3, 3d/6h x1), not the workbook's
	// three (1h/5m x14.4, 6h/30m x6, 3d/6h x1): the 1d/2h tier tickets a
	// burn of 3 (10% of a 30-day budget in a day) two days before the 3d
	// one would, and keeping it keeps the recorded names of its windows.
	BurnRates []BurnRate
	// KVCacheUsage: the KV cache usage (0 to 1) of the fullest engine of a
	// model above which VLLMKVCacheSaturated fires.
	KVCacheUsage Threshold
	// PreemptionRatio: preemptions per finished request above which
	// VLLMPreemptionsHigh fires.
	PreemptionRatio Threshold
	// QueueWaiting: the waiting requests of a model above which
	// VLLMQueueGrowing fires while the queue grows over QueueWindow.
	QueueWaiting Threshold
	// QueueWindow is the window over which the queue must grow.
	QueueWindow Duration
	// StuckFor is how long an engine holds waiting requests and runs none
	// before VLLMRequestsStuck fires.
	StuckFor Duration
	// AbsentFor is how long a target is down, or a deployment's engine
	// metrics absent, before VLLMTargetDown and VLLMMetricsAbsent fire.
	AbsentFor Duration
	// AbsentLookback is how far back those alerts look for targets that
	// served engine metrics.
	AbsentLookback Duration
	// Handoff: the HandoffQuantile of a P/D router's handoff time (prefill
	// leg's end to decode leg's start), in seconds, above which
	// InfermetricsPDHandoffSlow fires.
	Handoff Threshold
	// HandoffQuantile is the quantile of the handoff alert, one of
	// Quantiles.
	HandoffQuantile float64
	// InvalidEventsFor is how long the Recorder's refusals
	// (infermetrics_invalid_events_total of every kind but value_dropped)
	// keep coming before InfermetricsInvalidEvents fires.
	InvalidEventsFor Duration
	// ValueDroppedFor is how long requests keep being recorded without a
	// value the server reported out of bounds
	// (infermetrics_invalid_events_total{kind="value_dropped"}) before
	// InfermetricsUpstreamValuesDropped fires.
	ValueDroppedFor Duration
	// OverflowFor is how long requests are recorded under OverflowModel
	// before InfermetricsModelOverflow fires.
	OverflowFor Duration
	// CardinalityOverflowFor is how long a family has had the series the
	// OpenTelemetry SDK merges the attribute sets beyond its cardinality
	// limit into (otel_metric_overflow="true") before
	// InfermetricsCardinalityOverflow fires.
	CardinalityOverflowFor Duration

	// Dimensions are the attribution dimensions the usage families carry,
	// as labels (infermetrics-proxy's -attribute names, dots as
	// underscores): the recording rules record the cost rate of each by
	// model, and SpendBudget budgets their values. Empty: neither; the spend
	// dashboard lists the dimensions from the series and needs none.
	Dimensions []string
	// SpendBudget is the spend per hour of one value of a dimension (a
	// tenant, a user, an API key) within a deployment above which
	// InfermetricsSpendOverBudget fires; no budget, no alert.
	SpendBudget SpendBudget
	// OtherTargetLabels are the labels a scrape adds beside JobLabels and
	// InstanceLabels (the Prometheus Operator's container, endpoint and
	// service): the spend dashboard's dimension variable does not list them
	// as attribution dimensions.
	OtherTargetLabels []string
	// UnpricedFor is how long requests with usage whose model has no price
	// (infermetrics_usage_unpriced_requests_total) keep being counted
	// before InfermetricsUnpricedRequests fires.
	UnpricedFor Duration
	// AttributionOverflowFor is how long requests keep being recorded with
	// a dimension's value folded into _overflow, the cap on its values hit
	// (infermetrics_attribution_overflow_total), before
	// InfermetricsAttributionOverflow fires.
	AttributionOverflowFor Duration
}

// SpendBudget is a budget of spend in the price table's currency per hour
// (US dollars for LiteLLM's list): PerDimension's amount for each value of
// the dimensions it names, Default for each value of the other Dimensions;
// 0 is no budget. The spend is the cost rate over Window, above the budget
// for For.
type SpendBudget struct {
	Default      float64
	PerDimension map[string]float64
	Window       Duration
	For          Duration
}

// of returns the budget of dimension d, 0 for none.
func (b SpendBudget) of(d string) float64 {
	if v, ok := b.PerDimension[d]; ok {
		return v
	}
	return b.Default
}

// Threshold is an alert's threshold and how long it must hold (for:).
type Threshold struct {
	Value float64
	For   Duration
}

// SLO is a latency objective: Objective (0 to 1) of the observations are
// at most Seconds, which must be a bucket boundary of the histogram.
type SLO struct {
	Seconds   float64
	Objective float64
}

// BurnRate is one row of the multi-window, multi-burn-rate alerts: an SLO
// alert fires when the error budget burns Factor times faster than it may
// over both Long and Short for For, with Severity.
type BurnRate struct {
	Long, Short Duration
	Factor      float64
	For         Duration
	Severity    string
}

// Duration is a Prometheus duration: "30s", "5m", "1h", "3d".
type Duration string

// Default returns the shipped parameters.
func Default() Config {
	return Config{
		JobLabels:      []string{"cluster", "namespace", "job"},
		InstanceLabels: []string{"instance", "pod"},
		RateWindow:     "5m",
		Quantiles:      []float64{0.5, 0.9, 0.99},
		RunbookURL:     "https://github.com/infermetrics/infermetrics/blob/main/docs/monitoring.md",
		OverflowModel:  "_overflow",

		HTTPErrorRatio:         Threshold{Value: 0.05, For: "10m"},
		TrafficStoppedWindow:   "10m",
		TrafficStoppedLookback: "1h",
		TrafficStoppedFor:      "5m",
		RestartWindow:          "15m",

		ErrorRatio:   Threshold{Value: 0.05, For: "10m"},
		LoadShedding: Threshold{Value: 0.05, For: "10m"},
		TTFT:         SLO{Seconds: 2.5, Objective: 0.99},
		ITL:          SLO{Seconds: 0.1, Objective: 0.99},
		// kubernetes-mixin's tiers: 2% of a 30-day budget in an hour, 5%
		// in six hours, 10% in a day and in three days.
		BurnRates: []BurnRate{
			{Long: "1h", Short: "5m", Factor: 14.4, For: "2m", Severity: "critical"},
			{Long: "6h", Short: "30m", Factor: 6, For: "15m", Severity: "critical"},
			{Long: "1d", Short: "2h", Factor: 3, For: "1h", Severity: "warning"},
			{Long: "3d", Short: "6h", Factor: 1, For: "3h", Severity: "warning"},
		},
		KVCacheUsage:     Threshold{Value: 0.95, For: "15m"},
		PreemptionRatio:  Threshold{Value: 0.1, For: "15m"},
		QueueWaiting:     Threshold{Value: 10, For: "15m"},
		QueueWindow:      "15m",
		StuckFor:         "5m",
		AbsentFor:        "5m",
		AbsentLookback:   "1h",
		Handoff:          Threshold{Value: 0.5, For: "10m"},
		HandoffQuantile:  0.99,
		InvalidEventsFor: "15m",
		ValueDroppedFor:  "30m",
		OverflowFor:      "5m",

		CardinalityOverflowFor: "5m",

		SpendBudget: SpendBudget{Window: "1h", For: "15m"},
		// The Prometheus Operator's target labels of a ServiceMonitor's and
		// a PodMonitor's targets beside namespace, pod, job and instance
		// (prometheus-operator/prometheus-operator @ 6adcebc5,
		// pkg/prometheus/promcfg.go: generateServiceMonitorConfig,
		// generatePodMonitorConfig).
		OtherTargetLabels:      []string{"container", "endpoint", "service"},
		UnpricedFor:            "15m",
		AttributionOverflowFor: "5m",
	}
}

// WithFor returns c with every alert's for: set to d: alerts that fire as
// soon as their condition holds, for tests and demonstrations.
func (c Config) WithFor(d Duration) Config {
	c.BurnRates = slices.Clone(c.BurnRates)
	for i := range c.BurnRates {
		c.BurnRates[i].For = d
	}
	for _, t := range []*Threshold{&c.ErrorRatio, &c.KVCacheUsage, &c.PreemptionRatio, &c.QueueWaiting, &c.Handoff, &c.HTTPErrorRatio,
		&c.LoadShedding} {
		t.For = d
	}
	for _, f := range []*Duration{&c.StuckFor, &c.AbsentFor, &c.InvalidEventsFor, &c.OverflowFor, &c.CardinalityOverflowFor,
		&c.TrafficStoppedFor, &c.ValueDroppedFor, &c.UnpricedFor, &c.AttributionOverflowFor, &c.SpendBudget.For} {
		*f = d
	}
	return c
}

// durationSyntax is a Prometheus duration of one unit, which is how the
// rules write them.
var durationSyntax = regexp.MustCompile(`^([0-9]+)(ms|s|m|h|d|w|y)$`)

// parse returns d as a time.Duration.
func (d Duration) parse() (time.Duration, error) {
	m := durationSyntax.FindStringSubmatch(string(d))
	if m == nil {
		return 0, fmt.Errorf("duration %q: want a number and one unit (ms, s, m, h, d, w, y), such as 5m", d)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > 1<<31 {
		return 0, fmt.Errorf("duration %q: too long", d)
	}
	unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour,
		"d": 24 * time.Hour, "w": 7 * 24 * time.Hour, "y": 365 * 24 * time.Hour}[m[2]]
	return time.Duration(n) * unit, nil
}

// duration formats a time.Duration as a Prometheus duration of one unit.
func duration(t time.Duration) Duration {
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}} {
		if t%u.d == 0 && t != 0 {
			return Duration(strconv.FormatInt(int64(t/u.d), 10) + u.unit)
		}
	}
	return Duration(strconv.FormatInt(t.Milliseconds(), 10) + "ms")
}

// reservedLabels are labels the rules keep or sum by themselves: a
// grouping label of the Config may not be one.
var reservedLabels = []string{instrument.KeyModelName, instrument.KeyEngine, instrument.KeyFinishedReason, "le", "quantile", instrument.KeyKind}

// labelName is a Prometheus label name.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Validate reports every parameter out of its range.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	type namedDuration struct {
		name string
		d    Duration
		zero bool // may be 0 ("0s")
	}
	durations := []namedDuration{
		{"RateWindow", c.RateWindow, false}, {"QueueWindow", c.QueueWindow, false},
		{"AbsentLookback", c.AbsentLookback, false},
		{"ErrorRatio.For", c.ErrorRatio.For, true}, {"KVCacheUsage.For", c.KVCacheUsage.For, true},
		{"PreemptionRatio.For", c.PreemptionRatio.For, true}, {"QueueWaiting.For", c.QueueWaiting.For, true},
		{"Handoff.For", c.Handoff.For, true}, {"StuckFor", c.StuckFor, true}, {"AbsentFor", c.AbsentFor, true},
		{"InvalidEventsFor", c.InvalidEventsFor, true}, {"OverflowFor", c.OverflowFor, true},
		{"CardinalityOverflowFor", c.CardinalityOverflowFor, true},
		{"HTTPErrorRatio.For", c.HTTPErrorRatio.For, true}, {"TrafficStoppedWindow", c.TrafficStoppedWindow, false},
		{"TrafficStoppedLookback", c.TrafficStoppedLookback, false}, {"TrafficStoppedFor", c.TrafficStoppedFor, true},
		{"RestartWindow", c.RestartWindow, false}, {"ValueDroppedFor", c.ValueDroppedFor, true},
		{"LoadShedding.For", c.LoadShedding.For, true},
		{"UnpricedFor", c.UnpricedFor, true}, {"AttributionOverflowFor", c.AttributionOverflowFor, true},
		{"SpendBudget.Window", c.SpendBudget.Window, false}, {"SpendBudget.For", c.SpendBudget.For, true},
	}
	if c.Interval != "" {
		durations = append(durations, namedDuration{"Interval", c.Interval, false})
	}
	for i, b := range c.BurnRates {
		durations = append(durations, namedDuration{fmt.Sprintf("BurnRates[%d].Long", i), b.Long, false},
			namedDuration{fmt.Sprintf("BurnRates[%d].Short", i), b.Short, false},
			namedDuration{fmt.Sprintf("BurnRates[%d].For", i), b.For, true})
	}
	for _, d := range durations {
		v, err := d.d.parse()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", d.name, err))
		case v == 0 && !d.zero:
			errs = append(errs, fmt.Errorf("%s: %q, want a duration above zero", d.name, d.d))
		}
	}
	check(len(c.JobLabels) > 0, "JobLabels: empty, want the labels that name a deployment (job)")
	for _, l := range slices.Concat(c.JobLabels, c.ExtraGroupLabels, c.InstanceLabels) {
		check(labelName.MatchString(l), "label %q in JobLabels, ExtraGroupLabels or InstanceLabels: not a label name", l)
	}
	for _, l := range slices.Concat(c.JobLabels, c.ExtraGroupLabels) {
		check(!slices.Contains(c.InstanceLabels, l), "label %q is in JobLabels or ExtraGroupLabels and in InstanceLabels", l)
		check(!slices.Contains(reservedLabels, l), "label %q in JobLabels or ExtraGroupLabels: the rules keep or sum it themselves", l)
	}
	for i, l := range slices.Concat(c.JobLabels, c.ExtraGroupLabels) {
		check(!slices.Contains(slices.Concat(c.JobLabels, c.ExtraGroupLabels)[:i], l), "label %q twice in JobLabels and ExtraGroupLabels", l)
	}
	check(len(c.InstanceLabels) > 0, "InstanceLabels: empty, want the labels that name a server (instance)")
	errs = append(errs, c.validateUsage()...)
	tw, _ := c.TrafficStoppedWindow.parse()
	tl, _ := c.TrafficStoppedLookback.parse()
	tf, _ := c.TrafficStoppedFor.parse()
	check(tw+tf < tl, "TrafficStoppedWindow %s and TrafficStoppedFor %s: not shorter than TrafficStoppedLookback %s together, the alert could never fire",
		c.TrafficStoppedWindow, c.TrafficStoppedFor, c.TrafficStoppedLookback)
	check(c.HTTPErrorRatio.Value > 0 && c.HTTPErrorRatio.Value < 1, "HTTPErrorRatio.Value %g, want a share between 0 and 1", c.HTTPErrorRatio.Value)
	check(len(c.Quantiles) > 0, "Quantiles: empty")
	for _, q := range c.Quantiles {
		check(q > 0 && q < 1, "Quantiles: %g, want a quantile between 0 and 1", q)
	}
	check(slices.Contains(c.Quantiles, c.HandoffQuantile), "HandoffQuantile %g is not one of Quantiles %v", c.HandoffQuantile, c.Quantiles)
	check(c.OverflowModel != "", "OverflowModel: empty")
	check(c.RunbookURL != "", "RunbookURL: empty")
	check(!strings.ContainsAny(c.Selector, "{}"), "Selector %q: want matchers without braces, such as job=\"vllm\"", c.Selector)
	check(c.ErrorRatio.Value > 0 && c.ErrorRatio.Value < 1, "ErrorRatio.Value %g, want a share between 0 and 1", c.ErrorRatio.Value)
	check(c.LoadShedding.Value > 0 && c.LoadShedding.Value < 1, "LoadShedding.Value %g, want a share between 0 and 1", c.LoadShedding.Value)
	check(c.KVCacheUsage.Value > 0 && c.KVCacheUsage.Value < 1, "KVCacheUsage.Value %g, want a usage between 0 and 1", c.KVCacheUsage.Value)
	check(c.PreemptionRatio.Value > 0, "PreemptionRatio.Value %g, want a ratio above 0", c.PreemptionRatio.Value)
	check(c.QueueWaiting.Value >= 0, "QueueWaiting.Value %g, want a number of requests", c.QueueWaiting.Value)
	for _, s := range []struct {
		name       string
		slo        SLO
		instrument string
	}{{"TTFT", c.TTFT, instrument.NameTimeToFirstToken}, {"ITL", c.ITL, instrument.NameInterTokenLatency}} {
		check(s.slo.Objective > 0 && s.slo.Objective < 1, "%s.Objective %g, want a share between 0 and 1", s.name, s.slo.Objective)
		f := family(s.instrument)
		check(slices.Contains(f.Buckets, s.slo.Seconds), "%s.Seconds %g is not a bucket boundary of %s %v", s.name, s.slo.Seconds, f.ScrapeName(), f.Buckets)
	}
	handoff := family(instrument.NamePDHandoffDuration)
	check(c.Handoff.Value > 0 && c.Handoff.Value < handoff.Buckets[len(handoff.Buckets)-1],
		"Handoff.Value %g, want seconds within the buckets of %s", c.Handoff.Value, handoff.ScrapeName())
	check(len(c.BurnRates) > 0, "BurnRates: empty")
	for i, b := range c.BurnRates {
		check(b.Factor > 0, "BurnRates[%d].Factor %g, want a rate above 0", i, b.Factor)
		check(b.Severity != "", "BurnRates[%d].Severity: empty", i)
		long, _ := b.Long.parse()
		short, _ := b.Short.parse()
		check(short < long, "BurnRates[%d]: Short %s is not shorter than Long %s", i, b.Short, b.Long)
	}
	return errors.Join(errs...)
}

// usageLabels are the labels of the usage families that are no attribution
// dimension: a dimension may not be one.
var usageLabels = []string{instrument.KeyModelName, instrument.KeyEngine, instrument.KeyKind,
	label(instrument.KeyFinishedReason), label(instrument.KeyErrorType), instrument.KeyDimension, "le", "quantile"}

// validateUsage reports the usage parameters out of their range: the
// dimensions, the budgets and the other target labels.
func (c Config) validateUsage() []error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	targets := slices.Concat(c.JobLabels, c.ExtraGroupLabels, c.InstanceLabels)
	for i, d := range c.Dimensions {
		check(labelName.MatchString(d) && !strings.HasPrefix(d, "__"), "Dimensions: %q is not a label name", d)
		check(!slices.Contains(usageLabels, d), "Dimensions: %q is a label of the usage families, no dimension", d)
		check(!slices.Contains(targets, d), "Dimensions: %q is in JobLabels, ExtraGroupLabels or InstanceLabels", d)
		check(!slices.Contains(c.Dimensions[:i], d), "Dimensions: %q twice", d)
	}
	for _, l := range c.OtherTargetLabels {
		check(labelName.MatchString(l), "OtherTargetLabels: %q is not a label name", l)
		check(!slices.Contains(c.Dimensions, l), "OtherTargetLabels: %q is in Dimensions too", l)
	}
	budget := func(name string, v float64) {
		check(v >= 0 && !math.IsInf(v, 0), "%s %g, want an amount per hour, 0 for no budget", name, v)
	}
	budget("SpendBudget.Default", c.SpendBudget.Default)
	check(c.SpendBudget.Default == 0 || len(c.Dimensions) > 0, "SpendBudget.Default %g without Dimensions: no dimension to budget", c.SpendBudget.Default)
	for _, d := range slices.Sorted(maps.Keys(c.SpendBudget.PerDimension)) {
		budget(fmt.Sprintf("SpendBudget.PerDimension[%q]", d), c.SpendBudget.PerDimension[d])
		check(slices.Contains(c.Dimensions, d), "SpendBudget.PerDimension: %q is not one of Dimensions %v", d, c.Dimensions)
	}
	return errs
}
