package mixin

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, where the files' paths start.
const root = ".."

// files returns the files of c, failing the test on error.
func files(t *testing.T, c Config) []File {
	t.Helper()
	fs, err := Files(c)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// fileOf returns the content of the file at p among fs.
func fileOf(t *testing.T, fs []File, p string) []byte {
	t.Helper()
	i := slices.IndexFunc(fs, func(f File) bool { return f.Path == p })
	if i < 0 {
		t.Fatalf("no generated file %s", p)
	}
	return fs[i].Data
}

// The committed files are what the generator writes.
func TestCommittedFilesUpToDate(t *testing.T) {
	for _, f := range files(t, Default()) {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./... in mixin/)", f.Path, err)
			continue
		}
		if !bytes.Equal(got, f.Data) {
			t.Errorf("%s differs from what the generator writes: run go generate ./... in mixin/", f.Path)
		}
	}
}

// promtools are the promtool binaries to run: Debian's (2.x) on PATH and
// Prometheus 3's, which scripts/e2e-deps.sh builds into e2e/bin. A missing
// one skips its part, and fails it under E2E_REQUIRED=1.
func promtools(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	if p, err := exec.LookPath("promtool"); err == nil {
		out["promtool 2"] = p
	} else {
		missing(t, "promtool (Debian's package prometheus)")
	}
	p := os.Getenv("E2E_PROMTOOL3")
	if p == "" {
		p = filepath.Join(root, "e2e", "bin", "promtool3")
	}
	if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		out["promtool 3"] = abs
	} else {
		missing(t, p)
	}
	return out
}

// anyPromtool returns one promtool (3 when there is one): a check of the
// unit tests' own behaviour, not of Prometheus's, needs one version only.
func anyPromtool(t *testing.T) map[string]string {
	t.Helper()
	all := promtools(t)
	for _, name := range []string{"promtool 3", "promtool 2"} {
		if bin, ok := all[name]; ok {
			return map[string]string{name: bin}
		}
	}
	return nil
}

func missing(t *testing.T, what string) {
	t.Helper()
	msg := what + " missing: run scripts/e2e-deps.sh"
	if os.Getenv("E2E_REQUIRED") == "1" {
		t.Error(msg + " (E2E_REQUIRED=1: a missing binary is a failure)")
		return
	}
	t.Log(msg + "; its checks are skipped")
}

// writeRules writes the two rule files of rules and the unit tests of
// tests into a new directory and returns it.
func writeRules(t *testing.T, rules, tests []File) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{RecordingRulesFile, AlertsFile} {
		if err := os.WriteFile(filepath.Join(dir, path.Base(p)), fileOf(t, rules, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, path.Base(UnitTestsFile)), fileOf(t, tests, UnitTestsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// promtool runs a promtool command in dir and returns its output and
// whether it succeeded.
func promtool(t *testing.T, bin, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return string(out), err == nil
}

// Both Prometheus versions load the rule files and pass the unit tests:
// each alert fires on the series of its firing scenarios and not on the
// others.
func TestPromtool(t *testing.T) {
	t.Parallel()
	fs := files(t, Default())
	dir := writeRules(t, fs, fs)
	passPromtool(t, dir)
}

// passPromtool fails t unless both Prometheus versions load the rule
// files of dir and pass its unit tests.
func passPromtool(t *testing.T, dir string) {
	t.Helper()
	for name, bin := range promtools(t) {
		if out, ok := promtool(t, bin, dir, "check", "rules", "recording.yaml", "alerts.yaml"); !ok {
			t.Errorf("%s check rules:\n%s", name, out)
		}
		if out, ok := promtool(t, bin, dir, "test", "rules", "tests.yaml"); !ok {
			t.Errorf("%s test rules:\n%s", name, out)
		}
	}
}

// The unit tests can fail: against rules whose thresholds no firing
// scenario reaches, every alert's firing scenario fails; against rules
// whose thresholds every scenario exceeds, the quiet scenarios of the
// threshold alerts fail.
func TestUnitTestsCatchWrongRules(t *testing.T) {
	t.Parallel()
	def := withBudgets(Default())
	deaf := def
	deaf.ErrorRatio.Value = 0.999
	deaf.TTFT.Objective, deaf.ITL.Objective = 0.01, 0.01 // budgets no share of misses burns 1.0 times or more
	deaf.KVCacheUsage.Value = 0.999
	deaf.PreemptionRatio.Value = 1000
	deaf.QueueWaiting.Value = 1e6
	deaf.StuckFor, deaf.AbsentFor, deaf.InvalidEventsFor, deaf.OverflowFor = "1d", "1d", "1d", "1d"
	deaf.CardinalityOverflowFor, deaf.ValueDroppedFor = "1d", "1d"
	deaf.UnpricedFor, deaf.AttributionOverflowFor = "1d", "1d"
	deaf.SpendBudget = SpendBudget{Default: 1e9, PerDimension: map[string]float64{"user": 1e9}, Window: def.SpendBudget.Window, For: def.SpendBudget.For}
	deaf.HTTPErrorRatio.Value = 0.999
	deaf.LoadShedding.Value = 0.999
	deaf.TrafficStoppedFor, deaf.TrafficStoppedLookback = "1d", "3d"
	deaf.RestartWindow = "1m" // the restart is older
	deaf.Handoff.Value = 2000
	eager := def
	eager.ErrorRatio.Value = 0.0001
	eager.TTFT.Objective, eager.ITL.Objective = 0.99999, 0.99999
	eager.KVCacheUsage.Value = 0.0001
	eager.PreemptionRatio.Value = 0.0001
	eager.Handoff.Value = 0.0001
	eager.HTTPErrorRatio.Value = 0.0001
	eager.LoadShedding.Value = 0.0001
	eager.SpendBudget = SpendBudget{Default: 1e-9, PerDimension: map[string]float64{"user": 1e-9}, Window: def.SpendBudget.Window, For: def.SpendBudget.For}
	threshold := []string{"VLLMRequestErrors", "VLLMTimeToFirstTokenBudgetBurn", "VLLMInterTokenLatencyBudgetBurn",
		"VLLMKVCacheSaturated", "VLLMPreemptionsHigh", "InfermetricsPDHandoffSlow", "VLLMHTTPServerErrors", "VLLMLoadShedding",
		"InfermetricsSpendOverBudget"}
	var every []string
	for _, a := range newRules(def).alerts(nil) {
		every = append(every, a.name)
	}
	// Rules that keep priority (eager's too) page once per priority, and
	// divide preemptions (no priority) by finished requests (priority) to
	// nothing.
	eager.ExtraGroupLabels = []string{"priority"}
	var readPriority []string
	for _, a := range []string{"VLLMRequestErrors", "VLLMTimeToFirstTokenBudgetBurn", "VLLMPreemptionsHigh", "InfermetricsModelOverflow",
		"VLLMLoadShedding"} {
		readPriority = append(readPriority, "name: "+a+": "+priorityScenario)
	}
	// Rules that sum the job away add the two deployments together.
	merges := def
	merges.JobLabels = []string{"cluster", "namespace"}
	var mixed []string
	for _, a := range every {
		mixed = append(mixed, "name: "+a+": "+twoDeployments)
	}
	var fired []string
	for _, a := range every {
		fired = append(fired, "alertname: "+a+",")
	}
	exceeded := readPriority
	for _, a := range threshold {
		exceeded = append(exceeded, "alertname: "+a+",")
	}
	// Each case runs only the scenarios it must fail, to spare the CPU.
	fires := func(a alert, sc scenario) bool { return len(sc.firing) > 0 && !derived(sc) }
	quietOrPriority := func(a alert, sc scenario) bool {
		return (len(sc.firing) == 0 && slices.Contains(threshold, a.name)) || strings.HasPrefix(sc.name, priorityScenario)
	}
	twoOnly := func(a alert, sc scenario) bool { return strings.HasPrefix(sc.name, twoDeployments) }
	for _, c := range []struct {
		name    string
		config  Config
		keep    func(alert, scenario) bool
		failing []string // in promtool's output
	}{{"thresholds never reached", deaf, fires, fired},
		{"thresholds always exceeded, the priority label kept", eager, quietOrPriority, exceeded},
		{"the job summed away", merges, twoOnly, mixed}} {
		dir := writeRules(t, files(t, c.config), testsOf(t, def, c.keep))
		for name, bin := range anyPromtool(t) {
			out, ok := promtool(t, bin, dir, "test", "rules", "tests.yaml")
			if ok {
				t.Errorf("%s: %s test rules passed against rules with %s", c.name, name, c.name)
				continue
			}
			for _, f := range c.failing {
				if !strings.Contains(out, f) {
					t.Errorf("%s: %s: no failing test with %q", c.name, name, f)
				}
			}
		}
	}
}

// The PrometheusRule manifest holds the groups of both rule files.
func TestPrometheusRuleHoldsTheRuleFiles(t *testing.T) {
	fs := files(t, Default())
	groups := func(b []byte, indent string) []string {
		_, after, ok := strings.Cut(string(b), indent+"groups:\n")
		if !ok {
			t.Fatalf("no groups in\n%s", b)
		}
		var out []string
		for l := range strings.SplitSeq(strings.TrimSuffix(after, "\n"), "\n") {
			out = append(out, strings.TrimPrefix(l, indent))
		}
		return out
	}
	want := slices.Concat(groups(fileOf(t, fs, RecordingRulesFile), ""), groups(fileOf(t, fs, AlertsFile), ""))
	if got := groups(fileOf(t, fs, PrometheusRuleFile), "  "); !slices.Equal(got, want) {
		t.Errorf("the PrometheusRule's groups are not the rule files' groups")
	}
}

// The overflow model's default is infermetrics-proxy's OverflowModel,
// which is in its package main.
func TestOverflowModelIsTheProxys(t *testing.T) {
	sources, err := filepath.Glob(filepath.Join(root, "cmd", "infermetrics-proxy", "*.go"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("infermetrics-proxy's sources: %v", err)
	}
	var proxy []string
	for _, src := range sources {
		f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if ok && len(vs.Names) == 1 && vs.Names[0].Name == "OverflowModel" && len(vs.Values) == 1 {
				if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
					v, _ := strconv.Unquote(lit.Value)
					proxy = append(proxy, v)
				}
			}
			return true
		})
	}
	if len(proxy) != 1 || proxy[0] != Default().OverflowModel {
		t.Errorf("infermetrics-proxy's OverflowModel %q, Default().OverflowModel %q", proxy, Default().OverflowModel)
	}
}

// Parameters out of range are errors, not panics or rules that never fire.
func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"zero", func(c *Config) { *c = Config{} }, "RateWindow"},
		{"ttft not a bound", func(c *Config) { c.TTFT.Seconds = 2 }, "TTFT.Seconds 2 is not a bucket boundary"},
		{"objective", func(c *Config) { c.ITL.Objective = 1 }, "ITL.Objective"},
		{"duration", func(c *Config) { c.RateWindow = "5 minutes" }, "RateWindow"},
		{"zero window", func(c *Config) { c.RateWindow = "0m" }, "RateWindow"},
		{"quantile", func(c *Config) { c.Quantiles = []float64{0.5, 1.5} }, "Quantiles: 1.5"},
		{"handoff quantile", func(c *Config) { c.HandoffQuantile = 0.95 }, "HandoffQuantile 0.95"},
		{"windows", func(c *Config) {
			c.BurnRates = []BurnRate{{Long: "5m", Short: "1h", Factor: 1, For: "1m", Severity: "x"}}
		}, "not shorter"},
		{"braces", func(c *Config) { c.Selector = `{job="a"}` }, "Selector"},
		{"label", func(c *Config) { c.JobLabels = []string{"job-name"} }, "not a label name"},
		{"no instance labels", func(c *Config) { c.InstanceLabels = nil }, "InstanceLabels: empty"},
		{"reserved label", func(c *Config) { c.ExtraGroupLabels = []string{"model_name"} }, "keep or sum it themselves"},
		{"label twice", func(c *Config) { c.ExtraGroupLabels = []string{"job"} }, "twice"},
		{"instance label kept", func(c *Config) { c.ExtraGroupLabels = []string{"pod"} }, "in InstanceLabels"},
		{"traffic windows", func(c *Config) { c.TrafficStoppedWindow, c.TrafficStoppedLookback = "1h", "1h" }, "could never fire"},
		{"http ratio", func(c *Config) { c.HTTPErrorRatio.Value = 0 }, "HTTPErrorRatio.Value"},
		{"dimension name", func(c *Config) { c.Dimensions = []string{"x-tenant"} }, "not a label name"},
		{"dimension of the family", func(c *Config) { c.Dimensions = []string{"kind"} }, "a label of the usage families"},
		{"dimension a target label", func(c *Config) { c.Dimensions = []string{"job"} }, "in JobLabels"},
		{"dimension twice", func(c *Config) { c.Dimensions = []string{"tenant", "tenant"} }, `"tenant" twice`},
		{"budget without dimensions", func(c *Config) { c.SpendBudget.Default = 5 }, "without Dimensions"},
		{"budget of no dimension", func(c *Config) {
			c.Dimensions = []string{"tenant"}
			c.SpendBudget.PerDimension = map[string]float64{"user": 5}
		}, "not one of Dimensions"},
		{"negative budget", func(c *Config) {
			c.Dimensions = []string{"tenant"}
			c.SpendBudget.Default = -1
		}, "SpendBudget.Default -1"},
		{"budget window", func(c *Config) { c.SpendBudget.Window = "0s" }, "SpendBudget.Window"},
		{"other target label", func(c *Config) { c.OtherTargetLabels = []string{"a-b"} }, "OtherTargetLabels"},
	} {
		cfg := Default()
		c.change(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		if _, err := Files(cfg); err == nil {
			t.Errorf("%s: Files made files of an invalid Config", c.name)
		}
	}
	sel := Default()
	sel.Selector = `job=~"vllm.*"`
	if _, err := Files(sel); err == nil || !strings.Contains(err.Error(), "equality matchers") {
		t.Errorf("a regular expression selector: %v, want the unit tests' error", err)
	}
}

// family matches a series selector of a family in a rule's expression (a
// recording rule's name, after a colon, is not one).
var seriesSelector = regexp.MustCompile(`(^|[( ])(vllm:[a-z0-9_]+|infermetrics_[a-z0-9_]+|router_[a-z0-9_]+|http_[a-z0-9_]+|process_[a-z0-9_]+|up)\b(\{[^}]*\})?`)

// A selector of equality matchers reaches every series selector of the
// rules and the unit tests' series, which then pass.
func TestSelector(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Selector = `namespace="llm"`
	fs := files(t, c)
	for _, p := range []string{RecordingRulesFile, AlertsFile} {
		for l := range strings.SplitSeq(string(fileOf(t, fs, p)), "\n") {
			for _, m := range seriesSelector.FindAllStringSubmatch(l, -1) {
				if !strings.Contains(m[3], c.Selector) {
					t.Errorf("%s: %s without the selector", p, m[0])
				}
			}
		}
	}
	// The scenarios of each alert, not those derived from them: TestPromtool
	// runs them.
	dir := writeRules(t, fs, testsOf(t, c, func(_ alert, sc scenario) bool { return !derived(sc) }))
	for name, bin := range anyPromtool(t) {
		if out, ok := promtool(t, bin, dir, "test", "rules", "tests.yaml"); !ok {
			t.Errorf("%s test rules:\n%s", name, out)
		}
	}
}

// derived reports whether a scenario is one of those derived from an
// alert's own (scenarios.go).
func derived(sc scenario) bool {
	return strings.HasPrefix(sc.name, priorityScenario) || strings.HasPrefix(sc.name, twoDeployments)
}

// testsOf returns the unit tests of c's alerts with the scenarios keep
// selects, as the unit tests file.
func testsOf(t *testing.T, c Config, keep func(alert, scenario) bool) []File {
	t.Helper()
	sel, err := selectorLabels(c.Selector)
	if err != nil {
		t.Fatal(err)
	}
	r := newRules(c)
	alerts := r.alerts(sel)
	for i := range alerts {
		alerts[i].scenarios = slices.DeleteFunc(alerts[i].scenarios, func(sc scenario) bool { return !keep(alerts[i], sc) })
	}
	alerts = slices.DeleteFunc(alerts, func(a alert) bool { return len(a.scenarios) == 0 })
	data, err := unitTests(alerts, []string{path.Base(RecordingRulesFile), path.Base(AlertsFile)}, r.annotations)
	if err != nil {
		t.Fatal(err)
	}
	return []File{{UnitTestsFile, data}}
}

// Every alert has its derived unit tests: one with the priority label on
// the series of the finished-request families, one with two deployments of
// which one fires, one without cluster and namespace labels; all expect it
// to fire.
func TestEveryAlertHasDerivedScenarios(t *testing.T) {
	r := newRules(withBudgets(Default()))
	varied := r.variedLabel(nil)
	for _, a := range r.alerts(nil) {
		var prio, two, plain bool
		for _, sc := range a.scenarios {
			if len(sc.firing) == 0 {
				continue
			}
			plain = plain || strings.HasPrefix(sc.name, plainScenario) && !slices.ContainsFunc(sc.series, func(s inputSeries) bool {
				return strings.Contains(s.series, "cluster=") || strings.Contains(s.series, "namespace=")
			})
			deployments := map[string]bool{}
			for _, s := range sc.series {
				prio = prio || (strings.HasPrefix(sc.name, priorityScenario) && strings.Contains(s.series, `priority="`))
				for _, d := range []string{testJob, otherDeployment} {
					if strings.Contains(s.series, eq(varied, d)) {
						deployments[d] = true
					}
				}
			}
			two = two || (strings.HasPrefix(sc.name, twoDeployments) && len(deployments) == 2)
		}
		if !prio {
			t.Errorf("%s: no firing scenario with the priority label", a.name)
		}
		if !two {
			t.Errorf("%s: no firing scenario with two deployments", a.name)
		}
		if !plain {
			t.Errorf("%s: no firing scenario without cluster and namespace labels", a.name)
		}
	}
}

// Every alert's description names the deployment by the labels it has:
// cluster/namespace/job in Kubernetes, the job alone outside it (no "//"
// of empty labels), as Prometheus renders it for the labels of a firing
// unit test.
func TestDescriptionsWithAndWithoutClusterNamespace(t *testing.T) {
	r := newRules(Default())
	for _, a := range r.alerts(nil) {
		var with, without int
		for _, sc := range a.scenarios {
			for _, f := range sc.firing {
				d, err := render(a.description, f.labels)
				if err != nil {
					t.Fatalf("%s: %v", a.name, err)
				}
				switch {
				case strings.HasPrefix(sc.name, plainScenario):
					without++
					if !strings.Contains(d, testJob) || strings.Contains(d, "/"+testJob) || strings.Contains(d, "//") {
						t.Errorf("%s without cluster and namespace: %q, want the job %s alone", a.name, d, testJob)
					}
				default:
					with++
					if !strings.Contains(d, "cluster-0/namespace-0/"+testJob) {
						t.Errorf("%s: %q, want cluster-0/namespace-0/%s", a.name, d, testJob)
					}
				}
			}
		}
		if with == 0 || without == 0 {
			t.Errorf("%s: %d firing scenarios with cluster and namespace, %d without", a.name, with, without)
		}
	}
}

// No rule aggregates with without: another label (priority, a LoRA, one a
// user adds) would split its result.
func TestRulesAggregateBy(t *testing.T) {
	fs := files(t, Default())
	for _, p := range []string{RecordingRulesFile, AlertsFile} {
		if strings.Contains(string(fileOf(t, fs, p)), " without (") {
			t.Errorf("%s aggregates with without (...)", p)
		}
	}
}

// The value_dropped kind the alerts tell apart is one of the Recorder's.
func TestValueDroppedIsAKind(t *testing.T) {
	if !strings.Contains(invalidEvents.Instrument.Description, valueDropped) {
		t.Errorf("%s's kinds (%s) lack %q", invalidEvents.ScrapeName(), invalidEvents.Instrument.Description, valueDropped)
	}
}

// The scaling of the priority scenarios halves every number of promtool's
// notation and leaves the rest.
func TestScaleValues(t *testing.T) {
	for in, want := range map[string]string{"0+60x25": "0+30x25", "10-4x3 stale": "5-2x3 stale", "1e+09x5 _x3 8": "5e+08x5 _x3 4"} {
		if got := scaleValues(in, 0.5); got != want {
			t.Errorf("scaleValues(%q, 0.5) = %q, want %q", in, got, want)
		}
	}
}

// Summaries are static, so that Alertmanager groups an alert's instances
// by them; descriptions name the deployment and differ per instance.
func TestStaticSummaries(t *testing.T) {
	for _, a := range newRules(withBudgets(Default())).alerts(nil) {
		if strings.Contains(a.summary, "{{") {
			t.Errorf("%s: the summary %q is a template", a.name, a.summary)
		}
		if !strings.Contains(a.description, "{{ $labels.") {
			t.Errorf("%s: the description %q names no label", a.name, a.description)
		}
	}
}

// Every runbook entry has the PromQL that confirms the alert, which
// Prometheus parses, and first commands to run (a code span).
func TestRunbookEntries(t *testing.T) {
	t.Parallel()
	r := newRules(withBudgets(Default()))
	var w yamlWriter
	w.line(0, "groups:")
	w.line(1, "- name: confirm")
	w.line(2, "rules:")
	for _, a := range r.alerts(nil) {
		if !strings.Contains(a.action, "`") {
			t.Errorf("%s: the runbook's action names no command", a.name)
		}
		var queries int
		for i, q := range a.confirm {
			if strings.HasPrefix(q, "#") {
				continue
			}
			queries++
			w.line(3, "- record: %s", quote(fmt.Sprintf("confirm:%s:%d", a.name, i)))
			w.block(4, "expr", q)
		}
		if queries == 0 {
			t.Errorf("%s: the runbook has no query to confirm it", a.name)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "confirm.yaml"), []byte(w.b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, bin := range anyPromtool(t) {
		if out, ok := promtool(t, bin, dir, "check", "rules", "confirm.yaml"); !ok {
			t.Errorf("%s check rules of the runbook's queries:\n%s", name, out)
		}
	}
}

// Every parameter has its doc comment, which the runbook's parameter
// table shows.
func TestEveryParameterDocumented(t *testing.T) {
	docs, err := fieldDocs()
	if err != nil {
		t.Fatal(err)
	}
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		if name := ct.Field(i).Name; docs[name] == "" {
			t.Errorf("Config.%s has no doc comment", name)
		}
	}
}

// withBudgets returns c with two attribution dimensions and a spend budget
// for each (a default and one of its own), so that
// InfermetricsSpendOverBudget is among the alerts.
func withBudgets(c Config) Config {
	c.Dimensions = []string{"tenant", "user"}
	c.SpendBudget.Default = 10
	c.SpendBudget.PerDimension = map[string]float64{"user": 2}
	return c
}

// With budgets, both Prometheus versions load the rules and pass the unit
// tests of InfermetricsSpendOverBudget, its derived scenarios included;
// without one, there is no such alert.
func TestSpendBudget(t *testing.T) {
	t.Parallel()
	if slices.ContainsFunc(newRules(Default()).alerts(nil), func(a alert) bool { return a.name == spendAlert }) {
		t.Errorf("%s without a budget", spendAlert)
	}
	c := withBudgets(Default())
	rs := files(t, c)
	alerts := string(fileOf(t, rs, AlertsFile))
	for _, d := range c.Dimensions {
		if !strings.Contains(alerts, "dimension: "+strconv.Quote(d)) {
			t.Errorf("no condition of %s for dimension %s in\n%s", spendAlert, d, alerts)
		}
	}
	dir := writeRules(t, rs, testsOf(t, c, func(a alert, _ scenario) bool { return a.name == spendAlert }))
	passPromtool(t, dir)
}
