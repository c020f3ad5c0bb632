package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/mixin"
)

// TestFaults's budget: about 4 minutes on the idle 2-core development
// machine (both Prometheus versions at once, every deployment
// concurrently); its waits are polls, bounded by faultsDeadline from its
// start, far beyond it: a loaded machine makes it slower, not red.
const faultsDeadline = 12 * time.Minute

// faultsScrapeInterval is TestFaults's scrape and evaluation interval: the
// suite's 1 s scrape times out on a machine this loaded (sixteen processes
// on two cores), and a timed-out scrape is a target down; every window of
// faultsConfig holds at least six scrapes of it.
const faultsScrapeInterval = 5 * time.Second

// Jobs of TestFaults's scrape configuration: the engines of a deployment
// (its prefill and decode instances), its P/D router, and
// infermetrics-proxy, each a job of its own as the mixin's contract wants
// routers and gateways; a deployment is a namespace (a static label of its
// targets, as in Kubernetes).
const (
	engineJob = "vllm"
	routerJob = "pd-router"
	proxyJob  = "infermetrics-proxy"
)

// dashboardDir holds the generated dashboards (mixin/config.json is
// generated JSON too, but no dashboard).
const dashboardDir = "docs/grafana/"

// quietFlags turn off the example's features a fault does not need: less
// work for the machine, and nothing but the fault to page on.
var quietFlags = []string{"-priority=false", "-kv-offload=false", "-lora=false", "-spec-decode", "0", "-sleep-after", "0",
	"-corrupt", "0", "-multimodal", "0", "-simple-offload=false", "-weight-updates", "0"}

// roomyKV is every deployment's decode KV cache but the one whose fault is
// a small one: at a 5 s scrape a for: of 1s pages on one scrape above 95%,
// which a few long prompts at once reach in the default 10240 tokens.
var roomyKV = []string{"-decode-kv-tokens", "65536"}

// faultCase is one deployment of TestFaults: a namespace, its example's
// flags and traffic, and the alerts its fault fires, each exactly once.
type faultCase struct {
	namespace string
	// flags are the example's (after quietFlags unless full).
	flags []string
	full  bool // every feature on (the dashboards' deployments)
	// router: streamed chat completions through its router (no router
	// otherwise).
	router bool
	// api are requests sent to its decode instance in turn, again and
	// again (any answer will do); with apiUntilScraped, only until both
	// Prometheus servers have seen them counted (an increase of
	// http_requests_total).
	api             []apiCall
	apiUntilScraped bool
	// proxy: an infermetrics-proxy of its own in front of this
	// deployment's decode instance, with these flags, and clients
	// through it; with proxyTenants, the clients' requests name that
	// many tenants in turn (X-Tenant).
	proxy        []string
	proxyTenants int
	// removeTargets: its engine targets leave service discovery once
	// scraped (the deployment's metrics vanish without a target down).
	removeTargets bool
	// restart: its example is stopped (SIGTERM) and started again on the
	// same ports once both Prometheus servers have scraped finished
	// requests of it.
	restart bool
	// decodeDown: its decode instance's listener closes (SIGUSR2 to an
	// example run with -decode-down-on-signal) once both Prometheus
	// servers have scraped both its instances.
	decodeDown bool
	// alerts fire for this namespace, each one series, and no other.
	alerts []string
	// maybe may fire too, one series at most: an alert the fault causes
	// or not, by the sizes of the requests that meet (proven by another
	// fault).
	maybe []string
	// why says how the fault causes each alert.
	why string
}

// faultsConfig is the shipped Config with every for: at 1s and the windows
// short enough for a run of minutes: the rate window, the queue's window,
// the traffic-stopped window and one burn-rate tier of minutes (every tier fires at once on a total
// miss: one is the page to prove); the target-down alerts' for: is 20s, so
// that a restart (a second or two without a scrape) does not page as a
// target down, and the stuck engine's 15s (three scrapes), so that one
// scrape of a moment with a request waiting for its KV transfer and none
// running does not page as stuck, as the shipped 5m do not.
// checkOnlyWindowsDiffer holds it to that.
func faultsConfig() mixin.Config {
	c := mixin.Default().WithFor("1s")
	c.AbsentFor = "20s"
	c.StuckFor = "15s"
	c.RateWindow = "30s"
	c.QueueWindow = "30s"
	c.TrafficStoppedWindow = "30s"
	c.BurnRates = []mixin.BurnRate{{Long: "2m", Short: "30s", Factor: 14.4, For: "1s", Severity: "critical"}}
	return c
}

// windowFields are the Config fields faultsConfig may change beside the
// for: durations WithFor sets: windows, AbsentFor and StuckFor (see
// faultsConfig).
var windowFields = []string{"RateWindow", "QueueWindow", "TrafficStoppedWindow", "BurnRates", "AbsentFor", "StuckFor"}

// checkOnlyWindowsDiffer fails unless c is mixin.Default().WithFor("1s")
// but for windowFields.
func checkOnlyWindowsDiffer(t *testing.T, c mixin.Config) {
	t.Helper()
	want := reflect.ValueOf(mixin.Default().WithFor("1s"))
	got := reflect.ValueOf(c)
	for i := range got.NumField() {
		name := got.Type().Field(i).Name
		if !slices.Contains(windowFields, name) && !reflect.DeepEqual(got.Field(i).Interface(), want.Field(i).Interface()) {
			t.Fatalf("the test's Config changes %s (%v, shipped with for: 1s %v); it may change only %v",
				name, got.Field(i).Interface(), want.Field(i).Interface(), windowFields)
		}
	}
}

// alertNames returns the names of the alerts of a generated alerts file.
func alertNames(t *testing.T, data []byte) []string {
	t.Helper()
	var names []string
	for l := range strings.SplitSeq(string(data), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(l), "- alert: ")
		if !ok {
			continue
		}
		if q, err := strconv.Unquote(name); err == nil {
			name = q
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no alert", mixin.AlertsFile)
	}
	return names
}

// faultDeployment is a started faultCase.
type faultDeployment struct {
	faultCase
	prefillAddr, decodeAddr, routerAddr string
	proxyListen, proxyMetrics           string
	args                                []string // the example's command line
	example                             *proc
	stopAPI                             context.CancelFunc // ends the api traffic
}

// sdFile writes a file_sd target file, atomically (Prometheus watches the
// directory), of targets labelled namespace.
func sdFile(t *testing.T, dir, name, namespace string, targets ...string) {
	t.Helper()
	sdFileLabels(t, dir, name, map[string]string{"namespace": namespace}, targets...)
}

// sdFileLabels writes a file_sd target file, atomically, of targets with
// these target labels.
func sdFileLabels(t *testing.T, dir, name string, labels map[string]string, targets ...string) {
	t.Helper()
	groups := []map[string]any{}
	if len(targets) > 0 {
		groups = append(groups, map[string]any{"targets": targets, "labels": labels})
	}
	b, err := json.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// faultsScrapeConfig are the jobs, each from the file_sd files of its
// prefix in dir.
func faultsScrapeConfig(dir string) string {
	var b strings.Builder
	for _, job := range []string{engineJob, routerJob, proxyJob} {
		fmt.Fprintf(&b, "  - job_name: %s\n    file_sd_configs:\n      - files: [%q]\n        refresh_interval: 1s\n",
			job, filepath.Join(dir, job+"-*.json"))
	}
	return b.String()
}

// TestFaults runs two healthy deployments of the example and one per
// fault, each in a namespace of its own with its engines, its P/D router
// and (for the model overflow) an infermetrics-proxy in jobs of their own,
// all scraped by one Prometheus 2.42 and one 3.16 that load the generated
// rules (faultsConfig): every alert of the alerts file has a fault that
// fires it, exactly one series of it for that deployment and none for any
// other; the healthy deployments fire nothing. Each fault's process runs
// concurrently with the others, so that the run takes about the time of
// the slowest alert.
func TestFaults(t *testing.T) {
	tl := needTools(t)
	prom3 := needPrometheus3(t)
	began := time.Now()
	mark := func(what string) { t.Logf("[%5.1fs] %s", time.Since(began).Seconds(), what) }
	cfg := faultsConfig()
	checkOnlyWindowsDiffer(t, cfg)
	files, err := mixin.Files(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cases := faultCases()
	covered := map[string]bool{}
	for _, c := range cases {
		for _, a := range c.alerts {
			covered[a] = true
		}
	}
	names := alertNames(t, fileData(t, files, mixin.AlertsFile))
	for _, name := range names {
		if !covered[name] {
			t.Errorf("alert %s: no fault of TestFaults fires it (add one to faultCases)", name)
		}
	}
	for _, name := range slices.Concat(slices.Collect(maps.Keys(covered)), maybeNames(cases)) {
		if !slices.Contains(names, name) {
			t.Errorf("faultCases names alert %s, which %s does not hold", name, mixin.AlertsFile)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	work := t.TempDir()
	sd := filepath.Join(work, "sd")
	if err := os.Mkdir(sd, 0o755); err != nil {
		t.Fatal(err)
	}
	ruleConfig := writeRuleFiles(t, work, files)
	ports := distinctPorts(t, 2+5*len(cases))
	promPorts, ports := ports[:2], ports[2:]
	addr := func() string {
		p := ports[0]
		ports = ports[1:]
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	proms := map[string]*env{
		"prometheus 2": {tools: tl, work: filepath.Join(work, "prometheus2")},
		"prometheus 3": {tools: tl, work: filepath.Join(work, "prometheus3"), promBin: prom3},
	}
	for i, name := range slices.Sorted(maps.Keys(proms)) {
		e := proms[name]
		e.promConfig, e.scrapeConfig, e.scrapeInterval = ruleConfig, faultsScrapeConfig(sd), faultsScrapeInterval
		if err := os.Mkdir(e.work, 0o755); err != nil {
			t.Fatal(err)
		}
		e.startPrometheus(t, promPorts[i])
	}
	pd := buildExample(t, work)
	proxyBin := buildProxy(t, work)
	mark("prometheus started, example and proxy built")

	ctx, cancel := context.WithCancel(context.Background())
	var traffic sync.WaitGroup
	t.Cleanup(func() { cancel(); traffic.Wait() })
	trafficErrs := &errList{}
	var deps []*faultDeployment
	for i, c := range cases {
		d := &faultDeployment{faultCase: c, prefillAddr: addr(), decodeAddr: addr(), routerAddr: addr(), proxyListen: addr(), proxyMetrics: addr()}
		args := []string{pd, "-prefill-listen", d.prefillAddr, "-decode-listen", d.decodeAddr, "-log-interval", "1h",
			"-seed", fmt.Sprint(i + 1)}
		args = append(args, roomyKV...)
		if !c.full {
			args = append(args, quietFlags...)
		}
		if c.router {
			args = append(args, "-router-listen", d.routerAddr)
		} else {
			args = append(args, "-router-listen", "")
		}
		d.args = append(args, c.flags...)
		d.example = startProc(t, work, "example-"+c.namespace, childEnv(), d.args...)
		deps = append(deps, d)
	}
	for _, d := range deps {
		waitServing(t, d.example, "http://"+d.decodeAddr+"/metrics")
		sdFile(t, sd, engineJob+"-"+d.namespace+".json", d.namespace, d.prefillAddr, d.decodeAddr)
		if d.router {
			waitServing(t, d.example, "http://"+d.routerAddr+"/metrics")
			sdFile(t, sd, routerJob+"-"+d.namespace+".json", d.namespace, d.routerAddr)
			traffic.Go(func() { routerTraffic(ctx, "http://"+d.routerAddr+"/v1/chat/completions", trafficErrs) })
		}
		if d.api != nil {
			var apiCtx context.Context
			apiCtx, d.stopAPI = context.WithCancel(ctx)
			traffic.Go(func() { apiTraffic(apiCtx, "http://"+d.decodeAddr, d.api, trafficErrs) })
		}
		if d.proxy != nil {
			p := startProc(t, work, "proxy-"+d.namespace, childEnv(), append([]string{proxyBin, "-listen", d.proxyListen,
				"-metrics-listen", d.proxyMetrics, "-upstream", "http://" + d.decodeAddr, "-instance-id", "proxy-" + d.namespace}, d.proxy...)...)
			waitServing(t, p, "http://"+d.proxyMetrics+"/metrics")
			sdFile(t, sd, proxyJob+"-"+d.namespace+".json", d.namespace, d.proxyMetrics)
			var tenants func(int) http.Header
			if d.proxyTenants > 0 {
				tenants = func(i int) http.Header { return http.Header{"X-Tenant": {fmt.Sprintf("tenant-%d", i%d.proxyTenants)}} }
			}
			traffic.Go(func() { chatTraffic(ctx, "http://"+d.proxyListen+"/v1/chat/completions", trafficErrs, tenants) })
		}
	}
	mark(fmt.Sprintf("%d deployments serving", len(deps)))

	// A deployment whose metrics vanish: its engine targets leave service
	// discovery once both Prometheus servers have scraped finished
	// requests of it; a deployment that restarts, then; one whose API
	// clients stop once both counted their requests; one whose decode
	// instance goes down once both scraped it. Each waits for what the
	// alert needs to have been seen first, however slow the scrapes.
	for _, d := range deps {
		if d.apiUntilScraped {
			for _, name := range slices.Sorted(maps.Keys(proms)) {
				proms[name].waitRequestsCounted(t, d.namespace)
			}
			d.stopAPI()
			mark(d.namespace + ": API clients stopped")
		}
		if d.decodeDown {
			for _, name := range slices.Sorted(maps.Keys(proms)) {
				proms[name].waitInstancesScraped(t, d.namespace)
			}
			if err := d.example.signal(syscall.SIGUSR2); err != nil {
				t.Fatalf("%s: SIGUSR2 to the example: %v", d.namespace, err)
			}
			mark(d.namespace + ": decode instance down")
		}
		if !d.removeTargets && !d.restart {
			continue
		}
		for _, e := range proms {
			e.waitFinished(t, d.namespace)
		}
		if d.removeTargets {
			sdFile(t, sd, engineJob+"-"+d.namespace+".json", d.namespace)
			mark(d.namespace + ": engine targets removed from service discovery")
		}
		if d.restart {
			d.example.stop(10 * time.Second)
			d.example = startProc(t, work, "example-"+d.namespace+"-restarted", childEnv(), d.args...)
			waitServing(t, d.example, "http://"+d.decodeAddr+"/metrics")
			mark(d.namespace + ": restarted")
		}
	}

	want := map[string]map[string]bool{} // alert -> namespace -> whether it must fire
	for _, c := range cases {
		for _, list := range []struct {
			alerts []string
			must   bool
		}{{c.alerts, true}, {c.maybe, false}} {
			for _, a := range list.alerts {
				if want[a] == nil {
					want[a] = map[string]bool{}
				}
				want[a][c.namespace] = list.must
			}
		}
	}
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(maps.Keys(proms)) {
		e := proms[name]
		wg.Go(func() { e.waitAlerts(t, name, want, began) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	mark("every alert fired")
	// The dashboards, scoped to each healthy deployment in turn.
	var scopes []map[string]string
	for _, c := range cases {
		if c.full {
			scopes = append(scopes, map[string]string{"namespace": c.namespace})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(proms)) {
		t.Run(name, func(t *testing.T) {
			e := proms[name]
			e.checkFired(t, want, began)
			at := time.Now()
			window := int(at.Sub(began).Seconds()) + 5
			for _, f := range files {
				if strings.HasPrefix(f.Path, dashboardDir) && strings.HasSuffix(f.Path, ".json") && !usageOnly(f.Path) {
					e.checkScopedDashboard(t, f.Path, f.Data, scopes, at, window)
				}
			}
		})
	}
	for _, err := range trafficErrs.take() {
		t.Errorf("traffic: %v", err)
	}
	for _, c := range cases {
		t.Logf("%s: %v (maybe %v): %s", c.namespace, c.alerts, c.maybe, c.why)
	}
	mark("done")
}

// maybeNames are the alerts the cases may fire.
func maybeNames(cases []faultCase) []string {
	var out []string
	for _, c := range cases {
		out = append(out, c.maybe...)
	}
	return out
}

// waitServing waits until the process serves u.
func waitServing(t *testing.T, p *proc, u string) {
	t.Helper()
	poll(t, 30*time.Second, p.name+" serving "+u, func() (bool, string) {
		p.alive(t)
		_, err := httpGet(u)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// waitFinished waits until Prometheus holds finished requests of both
// instances of the namespace's engine job.
func (e *env) waitFinished(t *testing.T, namespace string) {
	t.Helper()
	expr := fmt.Sprintf(`count(sum by (instance) (vllm:request_success_total{job=%q, namespace=%q}) > 0)`, engineJob, namespace)
	e.waitValue(t, namespace+": finished requests scraped", expr, func(v float64) bool { return v == 2 })
}

// waitRequestsCounted waits until Prometheus has seen the HTTP requests of
// the namespace's engines counted: an increase of http_requests_total.
func (e *env) waitRequestsCounted(t *testing.T, namespace string) {
	t.Helper()
	expr := fmt.Sprintf(`sum(increase(http_requests_total{job=%q, namespace=%q}[1h]))`, engineJob, namespace)
	e.waitValue(t, namespace+": HTTP requests counted in two scrapes", expr, func(v float64) bool { return v > 0 })
}

// waitInstancesScraped waits until Prometheus holds engine metrics of both
// instances of the namespace's engine job.
func (e *env) waitInstancesScraped(t *testing.T, namespace string) {
	t.Helper()
	expr := fmt.Sprintf(`count(group by (instance) (vllm:num_requests_running{job=%q, namespace=%q}))`, engineJob, namespace)
	e.waitValue(t, namespace+": both instances scraped", expr, func(v float64) bool { return v == 2 })
}

// errList collects the errors of the traffic goroutines.
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errList) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 10 {
		l.errs = append(l.errs, err)
	}
}

func (l *errList) take() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

// trafficPace is the pause between two requests of a traffic loop.
const trafficPace = 500 * time.Millisecond

// trafficLoop calls send with 0, 1, ... until ctx is done, pace apart; an
// error send returns is one of errs unless ctx ended the request.
func trafficLoop(ctx context.Context, pace time.Duration, errs *errList, send func(ctx context.Context, i int) error) {
	for i := 0; ; i++ {
		err := send(ctx, i)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			errs.add(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pace):
		}
	}
}

// do sends a request and reads its answer whole.
func do(ctx context.Context, method, u, body string) (*http.Response, []byte, error) {
	return doWith(ctx, method, u, body, nil)
}

// doWith is do with headers h.
func doWith(ctx context.Context, method, u, body string, h http.Header) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	return resp, b, nil
}

// routerTraffic streams chat completions to api, one at a time, until ctx
// is done; each must end with 200 and [DONE].
func routerTraffic(ctx context.Context, api string, errs *errList) { chatTraffic(ctx, api, errs, nil) }

// chatTraffic is routerTraffic, each request with the headers header
// gives its number (none when nil).
func chatTraffic(ctx context.Context, api string, errs *errList, header func(i int) http.Header) {
	trafficLoop(ctx, trafficPace, errs, func(ctx context.Context, i int) error {
		body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"question %d %s"}],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`,
			i, strings.Repeat("context ", 10+i%20), 4+i%8)
		var h http.Header
		if header != nil {
			h = header(i)
		}
		resp, b, err := doWith(ctx, http.MethodPost, api, body, h)
		switch {
		case err != nil:
			return err
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("%s: %s: %s", api, resp.Status, b)
		case !strings.Contains(string(b), "data: [DONE]"):
			return fmt.Errorf("%s: no [DONE] in %q", api, b)
		}
		return nil
	})
}

// apiCall is a request of apiTraffic.
type apiCall struct{ method, path, body string }

// modelsCall is GET /v1/models.
var modelsCall = apiCall{http.MethodGet, "/v1/models", ""}

// httpMix are requests that give http_requests_total seven series (route,
// method and status class: /v1/models GET 2xx, none GET 4xx, none POST
// 4xx, and 2xx and 4xx of both completions routes) and
// http_request_duration_seconds five (route and method).
var httpMix = []apiCall{
	modelsCall,
	{http.MethodGet, "/no/such/path", ""},
	{http.MethodPost, "/v1/models", ""},
	{http.MethodPost, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}`},
	{http.MethodPost, "/v1/chat/completions", `not json`},
	{http.MethodPost, "/v1/completions", `{"prompt":"Hi","max_tokens":2}`},
	{http.MethodPost, "/v1/completions", `not json`},
}

// apiTraffic sends the calls to base in turn until ctx is done; any status
// is fine (a fault answers some 503, httpMix asks for 4xx).
func apiTraffic(ctx context.Context, base string, calls []apiCall, errs *errList) {
	trafficLoop(ctx, trafficPace/2, errs, func(ctx context.Context, i int) error {
		c := calls[i%len(calls)]
		_, _, err := do(ctx, c.method, base+c.path, c.body)
		return err
	})
}

// firedSeries maps each alert that fired since began to the number of
// its firing series in each namespace.
func (e *env) firedSeries(began time.Time) (map[string]map[string]int, error) {
	at := time.Now()
	window := int(at.Sub(began).Seconds()) + 5
	expr := fmt.Sprintf(`last_over_time(ALERTS{alertstate="firing"}[%ds])`, window)
	v, err := e.prom.query(expr, at)
	if err != nil {
		return nil, err
	}
	got := map[string]map[string]int{}
	for _, s := range v {
		a := s.labels["alertname"]
		if got[a] == nil {
			got[a] = map[string]int{}
		}
		got[a][s.labels["namespace"]]++
	}
	return got, nil
}

// firedText writes what fired, sorted.
func firedText(got map[string]map[string]int) string {
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(got)) {
		for _, ns := range slices.Sorted(maps.Keys(got[a])) {
			parts = append(parts, fmt.Sprintf("%s{namespace=%q}x%d", a, ns, got[a][ns]))
		}
	}
	return strings.Join(parts, ", ")
}

// unexpected lists what fired beyond want (must or may), or more than
// once.
func unexpected(got map[string]map[string]int, want map[string]map[string]bool) []string {
	var out []string
	for _, a := range slices.Sorted(maps.Keys(got)) {
		for _, ns := range slices.Sorted(maps.Keys(got[a])) {
			if _, ok := want[a][ns]; !ok || got[a][ns] > 1 {
				out = append(out, fmt.Sprintf("%s{namespace=%q}: %d series", a, ns, got[a][ns]))
			}
		}
	}
	return out
}

// waitAlerts waits until every wanted alert has fired on e, and fails as
// soon as one fires where it should not.
func (e *env) waitAlerts(t *testing.T, name string, want map[string]map[string]bool, began time.Time) {
	var last string
	deadline := began.Add(faultsDeadline)
	for {
		got, err := e.firedSeries(began)
		if err == nil {
			if bad := unexpected(got, want); len(bad) > 0 {
				t.Errorf("%s: fired where no fault is, or more than once: %s (all: %s)", name, strings.Join(bad, "; "), firedText(got))
				return
			}
			missing := 0
			for a, nss := range want {
				for ns, must := range nss {
					if must && got[a][ns] == 0 {
						missing++
					}
				}
			}
			if missing == 0 {
				t.Logf("%s: [%5.1fs] every alert fired: %s", name, time.Since(began).Seconds(), firedText(got))
				return
			}
			last = fmt.Sprintf("%d alerts not fired yet; fired: %s", missing, firedText(got))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not every alert fired within %s: %s", name, faultsDeadline, last)
			return
		}
		time.Sleep(time.Second)
	}
}

// checkFired checks, over the whole run, that each wanted alert had exactly
// one firing series in its namespace and none anywhere else.
func (e *env) checkFired(t *testing.T, want map[string]map[string]bool, began time.Time) {
	got, err := e.firedSeries(began)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range unexpected(got, want) {
		t.Error(bad)
	}
	for a, nss := range want {
		for ns, must := range nss {
			if must && got[a][ns] != 1 {
				t.Errorf("%s{namespace=%q}: %d firing series, want 1", a, ns, got[a][ns])
			}
		}
	}
	t.Logf("fired over the run: %s", firedText(got))
}

// faultCases are the deployments of TestFaults.
func faultCases() []faultCase {
	return []faultCase{
		{namespace: "team-a", full: true, router: true, proxy: []string{}, flags: []string{"-rate", "1", "-corrupt", "1e-12", "-sleep-after", "300ms"},
			why: "healthy, every feature on (-corrupt 1e-12: corruption detection on, no request's draw that low; " +
				"-sleep-after 300ms: its prefill engine sleeps between requests), clients through its router and an infermetrics-proxy"},
		{namespace: "team-b", full: true, router: true, proxy: []string{}, flags: []string{"-rate", "2", "-corrupt", "1e-12", "-sleep-after", "300ms"},
			why: "team-a's, at twice its load"},
		{namespace: "errors", flags: []string{"-rate", "1", "-corrupt", "0.3"}, alerts: []string{"VLLMRequestErrors"},
			why: "-corrupt 0.3: 30% of the decode instance's requests end in error (15% of the deployment's finishes)"},
		{namespace: "ttft", flags: []string{"-rate", "0.5", "-slow-prefill", "3s"}, alerts: []string{"VLLMTimeToFirstTokenBudgetBurn"},
			why: "-slow-prefill 3s: every first token of the prefill instance comes after 3 s, beyond the 2.5 s objective"},
		{namespace: "itl", flags: []string{"-rate", "0.3", "-slow-decode", "150ms"}, alerts: []string{"VLLMInterTokenLatencyBudgetBurn"},
			why: "-slow-decode 150ms: every gap between two tokens is above the 100 ms objective"},
		{namespace: "kv", flags: []string{"-rate", "8", "-decode-engines", "1", "-decode-kv-tokens", "16384"},
			alerts: []string{"VLLMKVCacheSaturated", "VLLMQueueGrowing", "VLLMTimeToFirstTokenBudgetBurn"},
			maybe:  []string{"VLLMPreemptionsHigh"},
			why: "a KV cache of two contexts under 8 requests/s: full (above 95% in about 2 scrapes of 3, measured), " +
				"requests wait for KV and their first token; it preempts about 0.08 per finished request of the " +
				"deployment (the prefill instance finishes each too), near VLLMPreemptionsHigh's 0.1"},
		{namespace: "preempt", flags: []string{"-rate", "2", "-decode-engines", "1", "-preempt-every", "10"},
			alerts: []string{"VLLMPreemptionsHigh"},
			why:    "-preempt-every 10: the decode engine preempts a request every 10 steps (several a second, for 2 finished)"},
		{namespace: "queue", flags: []string{"-rate", "2", "-decode-engines", "1", "-max-num-seqs", "1"},
			alerts: []string{"VLLMQueueGrowing", "VLLMTimeToFirstTokenBudgetBurn"},
			why:    "-max-num-seqs 1: one request at a time, arrivals faster: the queue grows, so does its wait"},
		{namespace: "stuck", flags: []string{"-rate", "1", "-stuck-engine", "1"}, alerts: []string{"VLLMRequestsStuck"},
			why: "-stuck-engine 1: decode engine 1 holds one request waiting and runs none"},
		{namespace: "handoff", router: true, flags: []string{"-rate", "0.5", "-handoff-delay", "1s"},
			alerts: []string{"InfermetricsPDHandoffSlow"},
			why:    "-handoff-delay 1s: the router waits 1 s between the legs, above the 0.5 s threshold"},
		{namespace: "invalid", flags: []string{"-rate", "1", "-invalid-events", "0.5"}, alerts: []string{"InfermetricsInvalidEvents"},
			why: "-invalid-events 0.5: the decode engine reports a token after half its finishes, refused as kind output"},
		{namespace: "overflow", flags: []string{"-rate", "0.5"}, proxy: []string{"-max-models", "1"},
			alerts: []string{"InfermetricsModelOverflow"},
			why:    "infermetrics-proxy -max-models 1 (its default model only) and clients naming the served model"},
		{namespace: "spend", flags: []string{"-rate", "0.5"}, proxyTenants: 3,
			proxy:  []string{"-attribute", "tenant=header:X-Tenant", "-attribute-max-values", "1", "-prices", unpricedTable()},
			alerts: []string{"InfermetricsAttributionOverflow", "InfermetricsUnpricedRequests"},
			why: "infermetrics-proxy -attribute tenant=header:X-Tenant -attribute-max-values 1 and clients naming 3 tenants: " +
				"the second and third are past the cap; -prices with a table without the served model: every request is unpriced"},
		{namespace: "cardinality", flags: []string{"-rate", "1", "-decode-engines", "1", "-cardinality-limit", "6"}, api: httpMix,
			alerts: []string{"InfermetricsCardinalityOverflow"},
			why: "-cardinality-limit 6 (5 series and the overflow's per family): http_requests_total's 7 series of httpMix overflow; " +
				"no other family has more than 5"},
		{namespace: "down", flags: []string{"-rate", "1", "-decode-down-on-signal"}, decodeDown: true, alerts: []string{"VLLMTargetDown"},
			why: "-decode-down-on-signal: once both Prometheus servers scraped it, the decode instance's listener closes; the prefill instance serves on"},
		{namespace: "restart", flags: []string{"-rate", "1"}, restart: true, alerts: []string{"VLLMServerRestarted"},
			why: "stopped (SIGTERM) and started again once scraped: process_start_time_seconds changes on both instances of one job"},
		{namespace: "stopped", flags: []string{"-rate", "1"}, api: []apiCall{modelsCall}, apiUntilScraped: true,
			alerts: []string{"VLLMTrafficStopped"},
			why:    "its API clients stop once both Prometheus servers counted their requests (the HTTP families stop growing); the instances serve on"},
		{namespace: "http5xx", flags: []string{"-rate", "1", "-http-5xx", "0.5"}, api: []apiCall{modelsCall},
			alerts: []string{"VLLMHTTPServerErrors"},
			why:    "-http-5xx 0.5: every second API request of the decode instance is answered 503"},
		{namespace: "shed", flags: []string{"-rate", "1", "-shed", "0.5"}, alerts: []string{"VLLMLoadShedding"},
			why: "-shed 0.5: the prefill instance refuses every second generated request at admission, as vLLM's " +
				"--max-num-queued-reqs does (a third of the model's admission attempts, counting both instances' finishes)"},
		{namespace: "dropped", router: true, flags: []string{"-rate", "0.5", "-cached-excess", "64"},
			alerts: []string{"InfermetricsUpstreamValuesDropped"},
			why:    "-cached-excess 64: the instances' usage reports more cached tokens than the prompt; the router drops the value"},
		{namespace: "absent", flags: []string{"-rate", "1"}, removeTargets: true, alerts: []string{"VLLMMetricsAbsent"},
			why: "its engine targets leave service discovery after their first scrapes: no target down, no metrics"},
	}
}

// unpricedTable is the path of a price table without the example's model.
func unpricedTable() string {
	p, err := filepath.Abs(filepath.Join("testdata", "unpriced_prices.json"))
	if err != nil {
		panic(err)
	}
	return p
}
