package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/mixin"
)

// replayModel is the model of the replayed vLLM responses
// (openaihttp/testdata), the proxies' -default-model.
const replayModel = "Qwen/Qwen2.5-1.5B-Instruct"

// A way in: one deployment of one of the paths docs/operators.md's table
// names, as TestDashboardsPerPath runs it.
type wayIn struct {
	// row is the path as the first column of docs/operators.md's table
	// names it.
	row string
	// labels are the deployment's: its job, and the target labels a
	// PodMonitor gives the chart's sidecar.
	labels map[string]string
	// instances are its servers' instance labels.
	instances []string
	// frontEnd: it sees requests, not engine steps (infermetrics-proxy, a
	// P/D router): the panels marked engine only are not its.
	frontEnd bool
	// router: a P/D router, whose legs the gateway dashboard shows.
	router bool
	// features: it records every optional feature (example/pd); an engine
	// without them has none of the panels marked "Engine only, with".
	features bool
}

// The marks of the generated panels' descriptions (mixin's
// engineOnlyMark and engineFeatureAt).
const (
	engineOnlyMark  = "Engine only"
	engineFeatureAt = "Engine only, with "
)

// listedOn reports whether the way in is on dashboard file: the engine
// dashboards list every server, the gateway dashboard the front ends, the
// spend dashboard none (it lists those that record the usage families, a
// proxy with -attribute or -prices, which no way in here is:
// TestSpendDashboard runs them).
func (w wayIn) listedOn(file string) bool {
	if usageOnly(file) {
		return false
	}
	return !strings.HasSuffix(file, "-gateway.json") || w.frontEnd
}

// applies reports whether a panel of file shows the way in's data:
// an engine's every panel but those of features it lacks, a front end's
// every panel but the engine-only ones and, on the gateway dashboard, the
// P/D legs (router_pd_* alone) unless it is a router.
func (w wayIn) applies(file string, p scopedPanel) bool {
	switch {
	case w.frontEnd && strings.Contains(p.Description, engineOnlyMark):
		return false
	case !w.features && strings.Contains(p.Description, engineFeatureAt):
		return false
	case !w.router && strings.HasSuffix(file, "-gateway.json") && pdLegsOnly(p):
		return false
	}
	return true
}

var familyName = regexp.MustCompile(`[a-z_:]+[a-z_]\{`)

// recorderState are the families every Engine of a Recorder exports with
// a value from start-up, a front end's too: its sleep state (awake) and
// its scheduling policy.
var recorderState = []string{"vllm:engine_sleep_state", "vllm:scheduler_policy_info"}

// readsRecorderState reports a panel of recorderState's families.
func readsRecorderState(p scopedPanel) bool {
	for _, q := range p.Targets {
		if slices.ContainsFunc(recorderState, func(f string) bool { return strings.Contains(q.Expr, f+"{") }) {
			return true
		}
	}
	return false
}

// pdLegsOnly reports a panel that reads only a P/D router's leg families.
func pdLegsOnly(p scopedPanel) bool {
	for _, t := range p.Targets {
		for _, n := range familyName.FindAllString(t.Expr, -1) {
			if !strings.HasPrefix(n, "router_pd_") {
				return false
			}
		}
	}
	return true
}

// replayUpstream serves vLLM's streamed chat completions as recorded in
// openaihttp/testdata (with usage and cached prompt tokens), an event at a
// time: one that fails mid-stream for a prompt that says "error"; vLLM's
// admission refusal for one that says "shed"; for one
// that says "hold", the first events and then nothing more until held is
// closed; for one that says "slow", as a loaded server would, its first
// token after slowFirst and the next ones slowGap apart, beyond the
// objectives of mixin.Default (TTFT 2.5 s, ITL 0.1 s).
func replayUpstream(t *testing.T, held <-chan struct{}) *httptest.Server {
	t.Helper()
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join("..", "openaihttp", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.SplitAfter(string(b), "\n\n")
	}
	ok, failing := read("vllm_chat_stream_usage_cached.sse"), read("vllm_chat_stream_usage_error_midstream.sse")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "shed") { // vLLM's admission refusal (--max-num-queued-reqs)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, vllmAdmissionRefusal)
			return
		}
		events := ok
		if strings.Contains(string(body), "error") {
			events = failing
		}
		w.Header().Set("Content-Type", "text/event-stream")
		flusher := w.(http.Flusher)
		slow := strings.Contains(string(body), "slow")
		for i, ev := range events {
			if i == 2 && strings.Contains(string(body), "hold") {
				select {
				case <-held:
				case <-r.Context().Done():
				}
				return
			}
			if slow && i > 0 {
				pause := slowGap
				if i == 1 {
					pause = slowFirst
				}
				select {
				case <-time.After(pause):
				case <-r.Context().Done():
					return
				}
			}
			_, _ = io.WriteString(w, ev)
			flusher.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// vllmAdmissionRefusal is the body vLLM answers, with 503, for a request
// --max-num-queued-reqs refuses (vllm/exceptions.py's QueueOverflowError
// through create_error_response: docs/metrics.md names the sources).
const vllmAdmissionRefusal = `{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`

// shed sends a chat completion that replayUpstream refuses at admission and
// checks that its client got the 503.
func shed(base string) error {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"shed this one"}],"max_tokens":16}`, replayModel)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable {
		return fmt.Errorf("a request refused at admission: %s, want 503", resp.Status)
	}
	return nil
}

// The latencies of a slow stream of replayUpstream.
const (
	slowFirst = 2600 * time.Millisecond
	slowGap   = 150 * time.Millisecond
)

// chat sends a streamed chat completion with usage to a proxy and reads
// its answer to the end.
func chat(base, content string) error {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`,
		replayModel, content)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
		return fmt.Errorf("%s: %v %q", resp.Status, err, b)
	}
	return nil
}

// guideEngineSource is docs/engines.md's first program as the guide shows
// it, with the line serve(mux, rec) at the end of main.
func guideEngineSource(t *testing.T) string {
	t.Helper()
	guide, err := os.ReadFile(filepath.Join("..", "docs", "engines.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(guide), "\n## Start here: a whole program\n")
	_, block, ok2 := strings.Cut(rest, "```go\n")
	block, _, ok3 := strings.Cut(block, "```")
	body, ok4 := strings.CutSuffix(block, "}\n")
	if !ok || !ok2 || !ok3 || !ok4 || !strings.Contains(body, "\nfunc main() {\n") {
		t.Fatal("docs/engines.md has no whole program under ## Start here: a whole program")
	}
	return body + "\tserve(mux, rec)\n}\n"
}

// buildPathBinaries builds, in one go build, example/pd, infermetrics-proxy
// and docs/engines.md's first program with e2e/testdata/guideengine: the
// latter two as a package of the library's module that exists only in an
// overlay (as internal/guides compiles the guides' programs), so that it
// imports the library as a user's program does.
func buildPathBinaries(t *testing.T, dir string) (pd, proxy, engine string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "guide-main.go")
	if err := os.WriteFile(src, []byte(guideEngineSource(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	serve, err := filepath.Abs(filepath.Join("testdata", "guideengine", "serve.go"))
	if err != nil {
		t.Fatal(err)
	}
	const pkg = "internal/_e2eguideengine"
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(root, pkg, "main.go"):  src,
		filepath.Join(root, pkg, "serve.go"): serve,
	}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	cmd := exec.Command("go", "build", "-overlay", overlayFile, "-o", bin, "./example/pd", "./cmd/infermetrics-proxy", "./"+pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of example/pd, infermetrics-proxy and docs/engines.md's first program: %v\n%s", err, out)
	}
	return filepath.Join(bin, "pd"), filepath.Join(bin, "infermetrics-proxy"), filepath.Join(bin, filepath.Base(pkg))
}

// pathScrapeConfig are the scrape jobs of the ways in: one per job, and
// the sidecar's target labelled as the chart's PodMonitor labels it
// (deploy/helm/infermetrics/templates/podmonitor.yaml: the job from the
// pod label infermetrics.io/job, the release's fullname; and the labels
// the Prometheus Operator adds to a PodMonitor's targets: namespace,
// container, pod, endpoint, its generatePodMonitorConfig in
// pkg/prometheus/promcfg.go of prometheus-operator @ 0022663).
func pathScrapeConfig(jobs map[string][]string, relabel map[string]map[string]string) string {
	var b strings.Builder
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		quoted := make([]string, len(jobs[job]))
		for i, tg := range jobs[job] {
			quoted[i] = fmt.Sprintf("%q", tg)
		}
		fmt.Fprintf(&b, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", job, strings.Join(quoted, ", "))
		if labels := relabel[job]; len(labels) > 0 {
			b.WriteString("    relabel_configs:\n")
			for _, k := range slices.Sorted(maps.Keys(labels)) {
				fmt.Fprintf(&b, "      - target_label: %s\n        replacement: %q\n", k, labels[k])
			}
		}
	}
	return b.String()
}

// TestDashboardsPerPath runs, at once, one deployment of each way in of
// docs/operators.md's table, scraped by one Prometheus 2.42: docs/engines.md's
// first program (built from the guide's block, serving its mux), an
// infermetrics-proxy in front of a replay of vLLM's streams, a second one
// labelled as the chart's PodMonitor labels its sidecar, and example/pd's
// instances and P/D router, each driven with requests. For each dashboard
// of mixin.Files and each way in: the variables, evaluated in order as
// Grafana does, list the deployment (its namespace, job and instances)
// exactly when the table says it is on the dashboard; and with them set
// to it, every panel that applies to it (the table's rule: an engine's
// panels but those of features it lacks, a front end's but the ones marked
// engine only and, on the gateway dashboard, the P/D legs unless it is a
// router) returns data, which differs from another deployment's, and every
// other panel shows nothing or 0 (but a Recorder's own state, which every
// front end has: recorderState). Its log lists, per dashboard and way in,
// the panels that do not apply and what each shows.
func TestDashboardsPerPath(t *testing.T) {
	tl := needTools(t)
	began := time.Now()
	mark := func(what string) { t.Logf("[%5.1fs] %s", time.Since(began).Seconds(), what) }
	files, err := mixin.Files(mixin.Default())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{tools: tl, work: t.TempDir()}
	ports := distinctPorts(t, 10)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	engineAddr, proxyListen, proxyMetrics, sidecarListen, sidecarMetrics := addr(1), addr(2), addr(3), addr(4), addr(5)
	prefillAddr, decodeAddr, routerAddr := addr(6), addr(7), addr(8)
	const sidecarJob, sidecarNamespace = "llm-infermetrics", "inference"
	ways := []wayIn{
		{row: "docs/engines.md's first program", labels: map[string]string{"job": "guide-engine"}, instances: []string{engineAddr}},
		{row: "infermetrics-proxy", labels: map[string]string{"job": "infermetrics-proxy"}, instances: []string{proxyMetrics}, frontEnd: true},
		{row: "infermetrics-proxy as the chart's sidecar", labels: map[string]string{"job": sidecarJob, "namespace": sidecarNamespace},
			instances: []string{sidecarMetrics}, frontEnd: true},
		{row: "example/pd's P/D router", labels: map[string]string{"job": "pd-router"}, instances: []string{routerAddr}, frontEnd: true, router: true},
		{row: "example/pd's instances", labels: map[string]string{"job": "pd"}, instances: []string{prefillAddr, decodeAddr}, features: true},
	}
	checkOperatorsTable(t, ways, files)
	e.scrapeConfig = pathScrapeConfig(map[string][]string{
		"guide-engine": {engineAddr}, "infermetrics-proxy": {proxyMetrics}, "sidecar": {sidecarMetrics},
		"pd-router": {routerAddr}, "pd": {prefillAddr, decodeAddr},
	}, map[string]map[string]string{"sidecar": {"job": sidecarJob, "namespace": sidecarNamespace,
		"pod": sidecarJob + "-6d5f8b7c9d-x2x9q", "container": "proxy", "endpoint": "metrics"}})
	e.startPrometheus(t, ports[0])
	pdBin, proxyBin, engineBin := buildPathBinaries(t, e.work)
	mark("prometheus started, the example, the proxy and the guide's program built")

	held := make(chan struct{})
	var holding sync.WaitGroup
	upstream := replayUpstream(t, held)
	t.Cleanup(func() { close(held); holding.Wait() }) // before the replay server closes: cleanups run last first
	engine := startProc(t, e.work, "guide-engine", append(childEnv(), "GUIDE_ENGINE_LISTEN="+engineAddr), engineBin)
	var procs []*proc
	for _, p := range []struct{ name, listen, metrics, service string }{
		{"proxy", proxyListen, proxyMetrics, "infermetrics-proxy"}, {"sidecar", sidecarListen, sidecarMetrics, sidecarJob},
	} {
		procs = append(procs, startProc(t, e.work, p.name, childEnv(), proxyBin, "-listen", p.listen, "-metrics-listen", p.metrics,
			"-upstream", upstream.URL, "-include-usage", "-default-model", replayModel, "-service-name", p.service,
			"-instance-id", p.name+"-0", "-log-format", "json"))
	}
	e.startExample(t, pdBin, prefillAddr, decodeAddr, "", "-router-listen", routerAddr)
	e.addRouter(t, routerAddr)
	waitServing(t, engine, "http://"+engineAddr+"/metrics")
	waitServing(t, procs[0], "http://"+proxyMetrics+"/metrics")
	waitServing(t, procs[1], "http://"+sidecarMetrics+"/metrics")
	t.Cleanup(func() { stopTogether(5*time.Second, append(procs, engine, e.example)...) })
	targets := 6
	e.waitValue(t, "every target scraped", `count(up == 1)`, func(v float64) bool { return v == float64(targets) })
	mark("every way in serving and scraped")

	// Two rounds of requests, a scrape of every target between them: a
	// series created by a round's first request has a value to rise from.
	load := func(engineRequests, proxyRequests, sidecarRequests, routerFrom, routerTo int) {
		var wg sync.WaitGroup
		errs := &errList{}
		add := func(err error) {
			if err != nil {
				errs.add(err)
			}
		}
		wg.Go(func() {
			resp, err := http.PostForm("http://"+engineAddr+"/load", url.Values{"requests": {fmt.Sprint(engineRequests)}})
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					err = fmt.Errorf("POST /load: %s", resp.Status)
				}
			}
			add(err)
		})
		for _, p := range []struct {
			base string
			n    int
			slow bool
		}{{"http://" + proxyListen, proxyRequests, proxyRequests > 1}, {"http://" + sidecarListen, sidecarRequests, false}} {
			wg.Go(func() {
				for i := range p.n {
					content := fmt.Sprintf("question %d", i)
					switch {
					case i == 0 && p.slow:
						content = "a slow answer, please"
					case i == 1:
						content = "an error, please"
					}
					add(chat(p.base, content))
				}
			})
		}
		streamThroughRouter(t, "http://"+routerAddr+"/v1/chat/completions", routerFrom, routerTo)
		wg.Wait()
		for _, err := range errs.take() {
			t.Fatalf("traffic: %v", err)
		}
	}
	load(1, 1, 1, 0, 1)
	// The series a front end makes at its first request, in Prometheus.
	gatewaySeries := []string{"gen_ai_client_operation_duration_seconds_count", "gen_ai_client_operation_time_to_first_chunk_seconds_count",
		"gen_ai_client_operation_time_per_output_chunk_seconds_count", "gen_ai_client_token_usage_count"}
	proxySeries := append([]string{"http_request_duration_seconds_count", "http_request_duration_highr_seconds_count"}, gatewaySeries...)
	e.waitSeriesScraped(t, proxyMetrics, proxySeries...)
	e.waitSeriesScraped(t, sidecarMetrics, proxySeries...)
	e.waitSeriesScraped(t, routerAddr, append([]string{"router_pd_handoff_duration_seconds_count"}, gatewaySeries...)...)
	// A stream the proxy keeps in flight until the end: its requests
	// running are 1 when the dashboards are read.
	holding.Go(func() { _ = chat("http://"+proxyListen, "hold the line") })
	load(30, 7, 4, 1, mixinRouterRequests)
	// One refusal at admission, at the proxy alone: its panel shows it there
	// and 0 for every other deployment.
	if err := shed("http://" + proxyListen); err != nil {
		t.Fatal(err)
	}
	e.waitValue(t, "the held stream running at the proxy", `sum(vllm:num_requests_running{job="infermetrics-proxy"})`,
		func(v float64) bool { return v == 1 })
	e.waitQuiet(t, startupIdle+loadDuration+2*time.Minute)
	at := e.scrapedAllAfter(t, time.Now(), targets)
	window := int(math.Ceil(at.Sub(began).Seconds())) + 5
	mark("requests recorded, every target scraped after them")

	for _, f := range files {
		if !strings.HasPrefix(f.Path, dashboardDir) || !strings.HasSuffix(f.Path, ".json") {
			continue
		}
		t.Run(filepath.Base(f.Path), func(t *testing.T) { e.checkPaths(t, f.Path, f.Data, ways, at, window) })
	}
	mark("done")
}

// waitSeriesScraped waits until the server at addr serves samples of
// every name, then until Prometheus scraped it with as many samples as it
// served then: a later rise of those series is in a rate.
func (e *env) waitSeriesScraped(t *testing.T, addr string, names ...string) {
	t.Helper()
	var n int
	poll(t, 30*time.Second, addr+" serving "+strings.Join(names, ", "), func() (bool, string) {
		s, err := fetchScrape("http://" + addr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		n = len(s.series)
		for _, name := range names {
			if _, k := s.sum(name); k == 0 {
				return false, "no " + name
			}
		}
		return true, ""
	})
	e.waitValue(t, addr+"'s series in prometheus", fmt.Sprintf(`scrape_samples_scraped{instance=%q}`, addr),
		func(v float64) bool { return v >= float64(n) })
}

// scrapedAllAfter waits until Prometheus scraped each of its n targets
// after t0, and returns the time to query at.
func (e *env) scrapedAllAfter(t *testing.T, t0 time.Time, n int) time.Time {
	t.Helper()
	var at time.Time
	poll(t, 30*time.Second, "prometheus scraping every target", func() (bool, string) {
		at = time.Now()
		v, err := e.prom.query(fmt.Sprintf(`count(timestamp(up == 1) >= %s)`, promTime(t0)), at)
		if err != nil {
			return false, err.Error()
		}
		return len(v) == 1 && v[0].value == float64(n), fmt.Sprintf("%v of %d targets scraped after %s", v, n, t0.Format(time.RFC3339Nano))
	})
	return at
}

// checkPaths checks one dashboard for every way in: listed or not as the
// table says, and, for each it lists, every panel that applies returning
// data that another deployment's differs from, the others nothing or 0;
// it logs the panels that do not apply.
func (e *env) checkPaths(t *testing.T, name string, raw []byte, ways []wayIn, at time.Time, windowSeconds int) {
	var b scopedBoard
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	results := make([]panelResults, len(ways))
	valsOf := make([]map[string]string, len(ways))
	for i, w := range ways {
		vals, listed := e.deploymentValues(t, name, b, w, at, windowSeconds)
		valsOf[i] = vals
		if listed != w.listedOn(name) {
			t.Errorf("%s: %s listed %v, the table says %v", name, w.row, listed, w.listedOn(name))
		}
		if !listed {
			continue
		}
		results[i] = panelResults{}
		for _, p := range b.Panels {
			for _, q := range p.Targets {
				v, err := e.retriedQuery(substitute(q.Expr, vals), at)
				if err != nil {
					t.Errorf("%s %s: panel %s: %v", name, w.row, p.Title, err)
					continue
				}
				if slices.ContainsFunc(v, func(s series) bool { return !math.IsNaN(s.value) }) {
					results[i][p.Title+"\x00"+q.Expr] = resultText(v)
				}
				if slices.ContainsFunc(v, func(s series) bool { return !math.IsNaN(s.value) && s.value != 0 }) {
					results[i][p.Title+"\x00nonzero"] = "yes"
				}
			}
		}
	}
	for i, w := range ways {
		if results[i] == nil {
			continue
		}
		var applies int
		var others []string
		for _, p := range b.Panels {
			if p.Type == "row" {
				continue
			}
			if !w.applies(name, p) {
				shown := results[i].shown(p)
				others = append(others, p.Title+" ("+shown+")")
				if shown == "a value" && !readsRecorderState(p) {
					t.Errorf("%s %s: panel %q, which does not apply, shows a value: the table says it is empty or 0", name, w.row, p.Title)
				}
				continue
			}
			applies++
			var mine, differs bool
			for _, q := range p.Targets {
				r, ok := results[i][p.Title+"\x00"+q.Expr]
				mine = mine || ok
				for j := range ways {
					if j != i && results[j] != nil && results[j][p.Title+"\x00"+q.Expr] != r {
						differs = true
					}
				}
			}
			switch {
			case !mine:
				t.Errorf("%s %s: panel %q: no data", name, w.row, p.Title)
				for _, q := range p.Targets {
					v, err := e.retriedQuery(substitute(q.Expr, valsOf[i]), at)
					t.Logf("%s = %v (%v)", substitute(q.Expr, valsOf[i]), v, err)
				}
			case !differs:
				t.Errorf("%s %s: panel %q: the same result for every deployment: not scoped to it", name, w.row, p.Title)
			}
		}
		t.Logf("%s, %s: %d panels apply, each with data; %d do not: %s", name, w.row, applies, len(others), strings.Join(others, "; "))
	}
}

// retriedQuery is dashboardQuery, tried up to three times: on a loaded
// machine a query of the hundreds the test runs can outlast the API
// client's 10 s (it did once, at a load average of 40); an error of the
// expression itself comes back each time.
func (e *env) retriedQuery(expr string, at time.Time) ([]series, error) {
	var err error
	for range 3 {
		var v []series
		if v, err = e.dashboardQuery(expr, at); err == nil {
			return v, nil
		}
	}
	return nil, err
}

// panelResults are the results of a dashboard's queries for one
// deployment, by panel title and expression: those with data.
type panelResults map[string]string

// shown says what a panel shows: nothing, only 0, or a value.
func (r panelResults) shown(p scopedPanel) string {
	if r[p.Title+"\x00nonzero"] != "" {
		return "a value"
	}
	for _, q := range p.Targets {
		if r[p.Title+"\x00"+q.Expr] != "" {
			return "0"
		}
	}
	return "nothing"
}

// deploymentValues evaluates the dashboard's variables in order as Grafana
// does, each scoping variable (the JobLabels and the instance) set to the
// deployment's value when it has the label, after checking that the
// variable lists it, and to All otherwise; the other query variables at
// All, the custom ones at their default. It returns the values and whether
// every scoping variable listed the deployment.
func (e *env) deploymentValues(t *testing.T, name string, b scopedBoard, w wayIn, at time.Time, windowSeconds int) (map[string]string, bool) {
	t.Helper()
	def := mixin.Default()
	window := fmt.Sprintf("%ds", windowSeconds)
	vals := map[string]string{"__rate_interval": window, "__range": window, "__interval": window}
	listed := true
	for _, v := range b.Templating.List {
		switch v.Type {
		case "datasource":
			continue
		case "query":
		default:
			vals[v.Name] = fmt.Sprint(v.Current.Value)
			continue
		}
		mine := w.labels[v.Name]
		var want []string
		switch {
		case v.Name == def.InstanceLabels[0]:
			want = w.instances
		case mine != "" && slices.Contains(def.JobLabels, v.Name):
			want = []string{mine}
		}
		vals[v.Name] = v.AllValue
		if len(want) == 0 {
			continue
		}
		q, ok := labelValuesQuery(substitute(v.Definition, vals))
		if !ok {
			t.Fatalf("%s: variable %s: unsupported query %q", name, v.Name, v.Definition)
		}
		result, err := e.retriedQuery(q, at)
		if err != nil {
			t.Fatalf("%s: variable %s: %v", name, v.Name, err)
		}
		var values []string
		for _, s := range result {
			values = append(values, s.labels[v.Name])
		}
		for _, x := range want {
			listed = listed && slices.Contains(values, x)
		}
		vals[v.Name] = regexAlternation(want)
	}
	return vals, listed
}

// operatorsTable is docs/operators.md's table of ways in and dashboards.
const operatorsTable = "../docs/operators.md"

// checkOperatorsTable checks that docs/operators.md's table has a row per
// way in, a column per dashboard, and in each cell "listed" or "not
// listed" as the test expects it.
func checkOperatorsTable(t *testing.T, ways []wayIn, files []mixin.File) {
	t.Helper()
	doc, err := os.ReadFile(operatorsTable)
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	rows := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(string(doc)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| way in |") && header == nil {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header == nil {
			header = cells
			continue
		}
		rows[strings.Trim(cells[0], "`")] = cells
	}
	if header == nil {
		t.Fatalf("%s: no table beginning | way in |", operatorsTable)
	}
	for _, f := range files {
		if !strings.HasPrefix(f.Path, dashboardDir) || !strings.HasSuffix(f.Path, ".json") {
			continue
		}
		col := slices.IndexFunc(header, func(h string) bool { return strings.Contains(h, filepath.Base(f.Path)) })
		if col < 0 {
			t.Errorf("%s: no column names %s", operatorsTable, filepath.Base(f.Path))
			continue
		}
		for _, w := range ways {
			cells, ok := rows[w.row]
			if !ok || col >= len(cells) {
				t.Errorf("%s: no row %q", operatorsTable, w.row)
				continue
			}
			listed := strings.HasPrefix(cells[col], "listed")
			if listed != w.listedOn(f.Path) {
				t.Errorf("%s: row %q, column %s: %q, want it to begin with %q", operatorsTable, w.row, header[col], cells[col],
					map[bool]string{true: "listed", false: "not listed"}[w.listedOn(f.Path)])
			}
		}
	}
}
