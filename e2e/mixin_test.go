package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/mixin"
)

// mixinCorrupt is the share of requests the example's decode instance
// corrupts in TestMixin: far above the error-ratio alert's threshold.
const mixinCorrupt = "0.3"

// mixinRouterRequests are the streamed chat completions TestMixin sends
// through the router, mixinRouterConcurrency at a time, beside the
// example's generated load.
const (
	mixinRouterRequests    = 16
	mixinRouterConcurrency = 4
)

// mixinRouterTokens is the least output of a request through the router,
// which runs to its max_tokens (ignore_eos) unless corrupted. The decode
// instance streams what its engine made since the handler last woke, so a
// short answer on a loaded machine can come in one content chunk and
// record no inter-chunk time (CI's run of stop 38: the gateway dashboard's
// chunk-time panel had no data); a long one spans tens of engine steps.
const mixinRouterTokens = 48

// TestMixin loads the rules of mixin/ into Prometheus 2.42 and 3.16, both
// scraping the example's prefill and decode instances and its P/D router
// while the example runs its load with a share of corrupted requests and
// HTTP clients stream completions through the router: both load every
// rule without error, every recording rule and every query of every
// dashboard returns data on both, and VLLMRequestErrors fires once for
// the deployment. The rules are the shipped ones with every for: at 1s.
func TestMixin(t *testing.T) {
	tl := needTools(t)
	prom3 := needPrometheus3(t)
	began := time.Now()
	cfg := mixin.Default().WithFor("1s")
	files, err := mixin.Files(cfg)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := mixin.Files(mixin.Default())
	if err != nil {
		t.Fatal(err)
	}
	checkOnlyForDiffers(t, files, shipped)

	work := t.TempDir()
	ruleConfig := writeRuleFiles(t, work, files)

	ports := distinctPorts(t, 5)
	prefillAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	decodeAddr := fmt.Sprintf("127.0.0.1:%d", ports[3])
	routerAddr := fmt.Sprintf("127.0.0.1:%d", ports[4])
	proms := map[string]*env{
		"prometheus 2": {tools: tl, work: filepath.Join(work, "prometheus2"), promConfig: ruleConfig},
		"prometheus 3": {tools: tl, work: filepath.Join(work, "prometheus3"), promConfig: ruleConfig, promBin: prom3},
	}
	i := 0
	for _, e := range proms {
		if err := os.Mkdir(e.work, 0o755); err != nil {
			t.Fatal(err)
		}
		e.startPrometheus(t, ports[i], prefillAddr, decodeAddr, routerAddr)
		i++
	}
	e := proms["prometheus 2"]
	pd := buildExample(t, work)
	exampleStart := time.Now()
	e.startExample(t, pd, prefillAddr, decodeAddr, "", "-router-listen", routerAddr, "-corrupt", mixinCorrupt)
	e.addRouter(t, routerAddr)
	for _, other := range proms {
		other.example, other.urls = e.example, e.urls
	}
	e.sendAPICalls(t) // the HTTP families of the instances
	api := "http://" + routerAddr + "/v1/chat/completions"
	streamThroughRouter(t, api, 0, 1)
	for _, p := range proms {
		p.waitRouterScraped(t)
	}
	streamThroughRouter(t, api, 1, mixinRouterRequests)
	for _, p := range proms {
		p.waitChunkGapsScraped(t)
	}
	e.waitQuiet(t, startupIdle+loadDuration+2*time.Minute)
	quiet := time.Now()
	t.Logf("[%5.1fs] load over", time.Since(began).Seconds())

	for name, p := range proms {
		t.Run(name, func(t *testing.T) {
			at := p.evaluatedAfter(t, quiet)
			window := int(math.Ceil(at.Sub(exampleStart).Seconds())) + 5
			p.checkRules(t, files, at)
			for _, f := range files {
				if strings.HasSuffix(f.Path, ".json") && !usageOnly(f.Path) {
					p.checkDashboardJSON(t, f.Path, f.Data, at, window)
				}
			}
			p.checkErrorAlert(t)
		})
	}
	t.Logf("[%5.1fs] done", time.Since(began).Seconds())
}

// writeRuleFiles writes the generated rule files into dir and returns the
// Prometheus configuration line that loads them.
func writeRuleFiles(t *testing.T, dir string, files []mixin.File) string {
	t.Helper()
	var ruleFiles []string
	for _, p := range []string{mixin.RecordingRulesFile, mixin.AlertsFile} {
		f := filepath.Join(dir, path.Base(p))
		if err := os.WriteFile(f, fileData(t, files, p), 0o644); err != nil {
			t.Fatal(err)
		}
		ruleFiles = append(ruleFiles, fmt.Sprintf("%q", f))
	}
	return "rule_files: [" + strings.Join(ruleFiles, ", ") + "]\n"
}

// fileData returns the data of the generated file at p.
func fileData(t *testing.T, files []mixin.File, p string) []byte {
	t.Helper()
	i := slices.IndexFunc(files, func(f mixin.File) bool { return f.Path == p })
	if i < 0 {
		t.Fatalf("mixin generates no %s", p)
	}
	return files[i].Data
}

// checkOnlyForDiffers fails unless the rules the test loads are the
// shipped ones but for their for: lines and the descriptions that say
// them.
func checkOnlyForDiffers(t *testing.T, files, shipped []mixin.File) {
	t.Helper()
	may := func(line string) bool {
		l := strings.TrimSpace(line)
		return strings.HasPrefix(l, "for: ") || strings.HasPrefix(l, "description: ")
	}
	for _, p := range []string{mixin.RecordingRulesFile, mixin.AlertsFile} {
		a := strings.Split(string(fileData(t, files, p)), "\n")
		b := strings.Split(string(fileData(t, shipped, p)), "\n")
		if len(a) != len(b) {
			t.Fatalf("%s: %d lines with for: 1s, %d shipped", p, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] && !(may(a[i]) && may(b[i])) {
				t.Fatalf("%s:%d: %q with for: 1s, %q shipped", p, i+1, a[i], b[i])
			}
		}
	}
}

// streamThroughRouter sends the streamed chat completions with usage
// numbered from to to through the router, mixinRouterConcurrency at a
// time, and reads each to its end.
func streamThroughRouter(t *testing.T, api string, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	slots := make(chan struct{}, mixinRouterConcurrency)
	errs := make([]error, to)
	for i := from; i < to; i++ {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"question %d %s"}],"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
				i, strings.Repeat("context ", 10*i), mixinRouterTokens+2*i)
			resp, err := http.Post(api, "application/json", strings.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs[i] = err
			case resp.StatusCode != http.StatusOK:
				errs[i] = fmt.Errorf("%s: %s", resp.Status, b)
			case !bytes.Contains(b, []byte("data: [DONE]")):
				errs[i] = fmt.Errorf("no [DONE] in %q", b)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d through the router: %v", i, err)
		}
	}
}

// waitRouterScraped waits until e's Prometheus holds the router's counts
// of a finished request (both legs and the handoff). A series is created
// at its first observation, so a rate sees only what a later scrape adds:
// were every request through the router to fall between two scrapes, the
// dashboards' rates of the router families would be 0 on that server.
func (e *env) waitRouterScraped(t *testing.T) {
	t.Helper()
	const expr = `count(sum by (backend_role) (gen_ai_client_operation_duration_seconds_count) > 0) + on() sum(router_pd_handoff_duration_seconds_count > bool 0)`
	e.waitValue(t, "the router's first request scraped", expr, func(v float64) bool { return v >= 3 })
}

// waitChunkGapsScraped waits until e's Prometheus has seen the router's
// inter-chunk time count rise during the run: the count of a streamed
// answer in more than one content chunk, which the gateway dashboard's
// chunk-time panel needs.
func (e *env) waitChunkGapsScraped(t *testing.T) {
	t.Helper()
	const expr = `sum(increase(gen_ai_client_operation_time_per_output_chunk_seconds_count[1h]))`
	e.waitValue(t, "the router's inter-chunk times scraped", expr, func(v float64) bool { return v > 0 })
}

// ruleGroups is what /api/v1/rules says of the loaded rules.
type ruleGroups struct {
	Status string `json:"status"`
	Data   struct {
		Groups []struct {
			Name           string    `json:"name"`
			LastEvaluation time.Time `json:"lastEvaluation"`
			Rules          []struct {
				Name      string `json:"name"`
				Type      string `json:"type"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"data"`
}

// rules returns the rule groups Prometheus runs.
func (e *env) rules(t *testing.T) ruleGroups {
	t.Helper()
	b, err := httpGet(e.prom.base + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	var r ruleGroups
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "success" {
		t.Fatalf("/api/v1/rules: %v: %s", err, b)
	}
	return r
}

// evaluatedAfter waits until Prometheus scraped every target and evaluated
// every rule group after t0, and returns the time to query at.
func (e *env) evaluatedAfter(t *testing.T, t0 time.Time) time.Time {
	t.Helper()
	e.rulesEvaluatedAfter(t, "", e.scrapedAfter(t, t0))
	return time.Now()
}

// rulesEvaluatedAfter waits until Prometheus evaluated every rule group
// after t0, a moment by which what the rules read was in the store: a
// recorded series then holds it, however late the evaluation comes. what
// names the store in the failure.
func (e *env) rulesEvaluatedAfter(t *testing.T, what string, t0 time.Time) {
	t.Helper()
	label := "every rule group evaluated after " + t0.Format(time.RFC3339Nano)
	if what != "" {
		label = what + ": " + label
	}
	poll(t, time.Minute, label, func() (bool, string) {
		for _, g := range e.rules(t).Data.Groups {
			if !g.LastEvaluation.After(t0) {
				return false, fmt.Sprintf("group %s last evaluated at %s", g.Name, g.LastEvaluation.Format(time.RFC3339Nano))
			}
		}
		return true, ""
	})
}

// checkRules checks that Prometheus runs every rule of the generated files
// without error and that every recording rule has a number, but those of
// the usage families, which the example does not record (TestSpendDashboard
// checks them).
func (e *env) checkRules(t *testing.T, files []mixin.File, at time.Time) {
	t.Helper()
	want := map[string]int{}
	for _, p := range []string{mixin.RecordingRulesFile, mixin.AlertsFile} {
		for l := range strings.SplitSeq(string(fileData(t, files, p)), "\n") {
			if k, _, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && (k == "- record" || k == "- alert") {
				want[strings.TrimPrefix(k, "- ")]++
			}
		}
	}
	got := map[string]int{}
	records := map[string]bool{}
	for _, g := range e.rules(t).Data.Groups {
		for _, r := range g.Rules {
			got[map[string]string{"recording": "record", "alerting": "alert"}[r.Type]]++
			if r.Health != "ok" || r.LastError != "" {
				t.Errorf("group %s, rule %s: health %q, last error %q", g.Name, r.Name, r.Health, r.LastError)
			}
			if r.Type == "recording" && g.Name != mixin.UsageRuleGroup { // TestSpendDashboard's
				records[r.Name] = true
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Prometheus runs %v rules, the files hold %v", got, want)
	}
	for _, name := range slices.Sorted(maps.Keys(records)) {
		v, err := e.prom.query(name, at)
		switch {
		case err != nil:
			t.Error(err)
		case !slices.ContainsFunc(v, func(s series) bool { return !math.IsNaN(s.value) }):
			t.Errorf("recording rule %s: no data (%d series, all NaN)", name, len(v))
		}
	}
	t.Logf("%d recording rules (%d names) and %d alerting rules run without error; every recording rule has data",
		got["record"], len(records), got["alert"])
}

// checkErrorAlert waits for VLLMRequestErrors to fire for the deployment
// (job "direct": the rules aggregate by Config.JobLabels, so its
// instances are one deployment), and fails unless it is one series: the
// rules split no page by a label of the instances (role, priority).
// TestFaults shows that a deployment without the fault stays quiet.
func (e *env) checkErrorAlert(t *testing.T) {
	t.Helper()
	const name = "VLLMRequestErrors"
	var firing []map[string]string
	poll(t, 30*time.Second, name+" firing for the deployment", func() (bool, string) {
		all, err := e.firingAlerts()
		if err != nil {
			return false, err.Error()
		}
		firing = slices.DeleteFunc(all, func(l map[string]string) bool { return l["alertname"] != name })
		return len(firing) > 0, fmt.Sprintf("firing: %v", firing)
	})
	if len(firing) != 1 || firing[0]["job"] != "direct" || firing[0]["severity"] != "critical" {
		t.Errorf("%s: firing %v, want one series of job direct, severity critical", name, firing)
	}
	t.Logf("firing: %v", firing)
}

// firingAlerts returns the labels of the alerts Prometheus has firing.
func (e *env) firingAlerts() ([]map[string]string, error) {
	b, err := httpGet(e.prom.base + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, a := range r.Data.Alerts {
		if a.State == "firing" {
			out = append(out, a.Labels)
		}
	}
	return out, nil
}
