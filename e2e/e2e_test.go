package e2e

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The load the example runs: enough requests for every family to see data,
// short enough for the whole suite to stay well under five minutes.
const (
	loadRate     = 20 // requests per second
	loadDuration = 8 * time.Second
	// startupIdle is how long the example serves /metrics before its first
	// request: Prometheus scrapes the freshly started instances meanwhile.
	startupIdle    = 3 * time.Second
	decodeEngines  = 2
	otlpInterval   = time.Second
	scrapeInterval = time.Second
	// quietScrapes is how many consecutive direct scrapes must show both
	// instances idle with unchanged counters before load counts as over.
	quietScrapes = 4
)

// env is one started deployment: Prometheus, the collector and the example.
type env struct {
	tools   tools
	work    string
	prom    promAPI
	example *proc
	// urls of the example's /metrics, by role.
	urls map[string]string
	// nativeOTLP makes the example's OTLP path exponential (see
	// startExample); observations is then the file of the latencies the
	// example recorded.
	nativeOTLP   bool
	observations string
	// promArgs are extra Prometheus flags (feature flags).
	promArgs []string
	// promBin, when set, is the Prometheus binary instead of
	// tools.prometheus (Prometheus 3: prom3_test.go); promConfig is YAML
	// added at the top level of its configuration and scrapeConfig lines
	// added to its scrape job.
	promBin, promConfig, scrapeConfig string
	// scrapeInterval, when set, is Prometheus's scrape and evaluation
	// interval instead of the suite's (scrapeInterval).
	scrapeInterval time.Duration
	// exampleEnv is added to the example's environment.
	exampleEnv []string
	// pathNotApplicable are more notApplicable entries (vllm_dashboards_test.go)
	// for a deployment whose only path is one that cannot carry them.
	pathNotApplicable []struct{ family, reason string }
	// apiPath is the path label under which sendAPICalls and
	// checkHTTPFamilies find the HTTP families: "direct" (the scrape) unless
	// set.
	apiPath string
}

// exponentialOTLP makes the example's OTLP reader export every histogram
// with the base-2 exponential aggregation (the SDK's 160 buckets, scale 20).
const exponentialOTLP = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION=base2_exponential_bucket_histogram"

// TestEndToEnd starts Prometheus, the collector and the example once and
// checks, in order: the direct scrape (THE RULE, token sources, KV
// transfer, quantiles, promtool, our dashboard), the instances as
// Prometheus scraped them before the first request (every histogram at
// zero), the le text vLLM's dashboards select, the families issue 11 added,
// vLLM's own dashboards, then, after the example flushed OTLP on SIGINT,
// that the collector path agrees with the direct one on every counter and
// histogram series.
func TestEndToEnd(t *testing.T) {
	tl := needTools(t)
	began := time.Now()
	last := began
	mark := func(what string) {
		now := time.Now()
		t.Logf("[%6.1fs] %s (%.1fs)", now.Sub(began).Seconds(), what, now.Sub(last).Seconds())
		last = now
	}

	// Scrapes negotiate protobuf, and remote write stores native histograms
	// (the OTLP path's exponential ones).
	// The example also exports an older vLLM version's families, which
	// llm-d's autoscaler reads in the namespace its scrape job adds.
	e := &env{tools: tl, work: t.TempDir(), promArgs: []string{"--enable-feature=native-histograms"}, nativeOTLP: true,
		scrapeConfig: wvaRelabel}
	ports := distinctPorts(t, 4)
	promPort, otlpPort, prefillPort, decodePort := ports[0], ports[1], ports[2], ports[3]
	prefillAddr := fmt.Sprintf("127.0.0.1:%d", prefillPort)
	decodeAddr := fmt.Sprintf("127.0.0.1:%d", decodePort)

	e.startPrometheus(t, promPort, prefillAddr, decodeAddr)
	mark("prometheus ready")
	e.startCollector(t, otlpPort, promPort)
	mark("collector ready")
	// Built while Prometheus applies its targets, which it does a few
	// seconds after start-up.
	pd := buildExample(t, e.work)
	mark("example built")
	exampleStart := time.Now()
	// The example sends no request before SIGUSR1 (-start-on-signal), which
	// comes once Prometheus scraped both freshly started instances.
	e.startExample(t, pd, prefillAddr, decodeAddr, fmt.Sprintf("127.0.0.1:%d", otlpPort), "-vllm-version", exampleVLLMVersion,
		"-idle", "0", "-start-on-signal")
	mark("example serving")

	// Prometheus scrapes both idle instances.
	poll(t, time.Minute, "prometheus scraping both instances before the first request", func() (bool, string) {
		e.example.alive(t)
		up, err := e.prom.query(`up{path="direct"} == 1`, time.Now())
		if err != nil {
			return false, err.Error()
		}
		return len(up) == 2, fmt.Sprintf("%d of 2 targets up", len(up))
	})
	// Every scrape up to idleAt is one of the freshly started instances,
	// before the first request: the load starts after it.
	idleAt := time.Now()
	if err := e.example.signal(syscall.SIGUSR1); err != nil {
		t.Fatalf("SIGUSR1 to the example: %v", err)
	}
	mark("first scrape of both instances in prometheus; load started")
	e.sendAPICalls(t) // the HTTP families vLLM's overview dashboard reads

	// Load ends after loadDuration; then both instances drain. Over is
	// when several consecutive direct scrapes show nothing running or
	// waiting and no counter moving.
	final := e.waitQuiet(t, loadDuration+2*time.Minute)
	quietAt := time.Now()
	mark("load over, both instances idle and counters still")

	// Prometheus holds a scrape of each instance newer than that moment.
	poll(t, 30*time.Second, "a prometheus scrape of each instance after the load", func() (bool, string) {
		ts, err := e.prom.query(`timestamp(up{path="direct"} == 1)`, time.Now())
		if err != nil {
			return false, err.Error()
		}
		newer := 0
		for _, s := range ts {
			if s.value >= float64(quietAt.UnixMilli())/1000 {
				newer++
			}
		}
		return newer == 2, fmt.Sprintf("%d of 2 targets scraped after %s", newer, quietAt.Format(time.RFC3339Nano))
	})
	evalAt := time.Now()
	runSeconds := int(math.Ceil(evalAt.Sub(exampleStart).Seconds())) + 5
	mark("final scrape in prometheus")

	t.Run("prometheus matches direct scrape", func(t *testing.T) { e.checkPromMatchesScrape(t, final, evalAt) })
	t.Run("the rule", func(t *testing.T) { e.checkRule(t, evalAt) })
	t.Run("prompt token sources", func(t *testing.T) { e.checkSources(t, evalAt) })
	t.Run("kv transfer", func(t *testing.T) { e.checkKVTransfer(t, evalAt) })
	t.Run("quantiles direct", func(t *testing.T) { e.checkQuantiles(t, "direct", evalAt, runSeconds) })
	t.Run("promtool", func(t *testing.T) {
		for _, role := range []string{"prefill", "decode"} {
			e.checkPromtool(t, role, final[role].body)
		}
	})
	t.Run("dashboard", func(t *testing.T) { e.checkDashboard(t, evalAt, runSeconds) })
	t.Run("zero series before the first request", func(t *testing.T) { e.checkStartupZero(t, idleAt, final) })
	t.Run("le as vllm writes it", func(t *testing.T) { e.checkLeText(t, evalAt, runSeconds) })
	t.Run("new families", func(t *testing.T) { e.checkNewFamilies(t, evalAt, final) })
	t.Run("vllm dashboards", func(t *testing.T) { e.checkVLLMDashboards(t, evalAt, runSeconds) })
	t.Run("families of an older vllm", func(t *testing.T) { e.checkLegacyFamilies(t, evalAt) })
	t.Run("llm-d autoscaler queries", func(t *testing.T) { e.checkWVAQueries(t, evalAt) })
	mark("direct-path assertions")

	// What the direct path holds, per series identity, before the example
	// goes away (its series go stale once it stops).
	direct := e.cumulativeSeries(t, "direct", evalAt, final)

	// SIGINT: the example shuts its MeterProviders down, flushing OTLP.
	e.stopExample(t)
	mark("example flushed OTLP and exited 0")

	t.Run("otlp path agrees with direct", func(t *testing.T) { e.checkOTLPAgrees(t, direct, final) })
	mark("otlp path agrees")
	t.Run("native quantiles closer", func(t *testing.T) { e.checkNativeQuantiles(t, evalAt, time.Now()) })
	mark("done")
}

// buildExample builds example/pd from the repository root, so the suite
// always tests the current code.
func buildExample(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "pd")
	cmd := exec.Command("go", "build", "-o", bin, "./example/pd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./example/pd in %s: %v\n%s", root, err, out)
	}
	return bin
}

// childEnv is the environment of the started processes: the test's own,
// less OTEL_* variables that would redirect the example's exports.
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

func (e *env) startPrometheus(t *testing.T, port int, targets ...string) {
	t.Helper()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
  - job_name: direct
    static_configs:
      - targets: [%[2]s]
        labels:
          path: direct
%[3]s%[4]s`, cmp.Or(e.scrapeInterval, scrapeInterval), strings.Join(quoted, ", "), e.scrapeConfig, e.promConfig)
	cfgFile := filepath.Join(e.work, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	storage := filepath.Join(e.work, "prometheus-data")
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	bin := e.tools.prometheus
	if e.promBin != "" {
		bin = e.promBin
	}
	p := startProc(t, e.work, "prometheus", childEnv(), append([]string{bin,
		"--config.file=" + cfgFile,
		"--storage.tsdb.path=" + storage,
		"--web.listen-address=" + listen,
		"--web.enable-remote-write-receiver",
	}, e.promArgs...)...)
	e.prom = promAPI{base: "http://" + listen}
	poll(t, 30*time.Second, "prometheus /-/ready", func() (bool, string) {
		p.alive(t)
		_, err := httpGet(e.prom.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func (e *env) startCollector(t *testing.T, otlpPort, promPort int) {
	t.Helper()
	otlp := fmt.Sprintf("127.0.0.1:%d", otlpPort)
	// prometheus_remote_write (formerly prometheusremotewrite) with its
	// default translation strategy; the external label path=otlp tells its
	// series from the direct scrape's (path=direct) in PromQL.
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  prometheus_remote_write:
    endpoint: http://127.0.0.1:%d/api/v1/write
    external_labels:
      path: otlp
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [prometheus_remote_write]
`, otlp, promPort)
	cfgFile := filepath.Join(e.work, "otelcol.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, e.work, "otelcol", childEnv(), e.tools.otelcol, "--config=file:"+cfgFile)
	waitListening(t, p, "collector OTLP/gRPC", otlp)
}

// waitListening waits until p accepts TCP connections on addr.
func waitListening(t *testing.T, p *proc, what, addr string) {
	t.Helper()
	poll(t, 30*time.Second, what+" listening on "+addr, func() (bool, string) {
		p.alive(t)
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

var urlLine = regexp.MustCompile(`(?m)^(prefill|decode) metrics: (http://\S+)$`)

// startExample starts the example with the suite's load and extra flags
// (later flags win).
func (e *env) startExample(t *testing.T, bin, prefillAddr, decodeAddr, otlp string, extra ...string) {
	t.Helper()
	// The OTLP reader aggregates every histogram exponentially, the scrape
	// keeps vLLM's buckets: the same observations reach Prometheus as
	// native histograms (path=otlp) and classic ones (path=direct).
	env, args := append(childEnv(), e.exampleEnv...), []string{bin}
	if e.nativeOTLP {
		env = append(env, exponentialOTLP)
		e.observations = filepath.Join(e.work, "observations.json")
		args = append(args, "-observations", e.observations)
	}
	args = append(args,
		"-prefill-listen", prefillAddr,
		"-decode-listen", decodeAddr,
		"-rate", strconv.Itoa(loadRate),
		"-duration", loadDuration.String(),
		"-idle", startupIdle.String(),
		"-decode-engines", strconv.Itoa(decodeEngines),
		"-log-interval", "1s",
		"-otlp-endpoint", otlp,
		"-otlp-interval", otlpInterval.String(),
		// No router (its default port is fixed, and its metrics would
		// reach the OTLP path unscraped): TestRouterClients asks for one.
		"-router-listen", "",
	)
	e.example = startProc(t, e.work, "example", env, append(args, extra...)...)
	poll(t, 30*time.Second, "the example printing its /metrics URLs", func() (bool, string) {
		e.example.alive(t)
		b, _ := os.ReadFile(e.example.stdout)
		e.urls = map[string]string{}
		for _, m := range urlLine.FindAllStringSubmatch(string(b), -1) {
			e.urls[m[1]] = m[2]
		}
		return len(e.urls) == 2, fmt.Sprintf("stdout so far: %q", b)
	})
	for role, addr := range map[string]string{"prefill": prefillAddr, "decode": decodeAddr} {
		if want := "http://" + addr + "/metrics"; e.urls[role] != want {
			t.Fatalf("%s metrics URL %q, want %q", role, e.urls[role], want)
		}
	}
}

// waitQuiet polls the /metrics of every server in e.urls (both instances,
// and the router where a test added it) until the example's generated load
// is over (it logged so: every request sent) and every server idle
// (waitQuietURLs).
func (e *env) waitQuiet(t *testing.T, timeout time.Duration) map[string]*scrape {
	t.Helper()
	return waitQuietURLs(t, e.urls, e.example.loadFinished, timeout, func() { e.example.alive(t) })
}

// loadFinishedLine is what the example logs once it sent the last request
// of its generated load (-duration).
const loadFinishedLine = `msg="load finished;`

// loadFinished reports whether an example logged the end of its load.
func (p *proc) loadFinished() (bool, string) {
	b, err := os.ReadFile(p.stderr)
	if err != nil {
		return false, err.Error()
	}
	return bytes.Contains(b, []byte(loadFinishedLine)), "its load still running (no " + loadFinishedLine + " in its log)"
}

// waitQuietURLs polls the /metrics at urls (by name) until the load is
// over: once loadOver reports so, quietScrapes consecutive scrapes with
// num_requests_running and num_requests_waiting all 0 and every counter and
// histogram unchanged; alive fails the test when a process ended. It
// returns the last scrape of each.
func waitQuietURLs(t *testing.T, urls map[string]string, loadOver func() (bool, string), timeout time.Duration, alive func()) map[string]*scrape {
	t.Helper()
	var prev map[string]float64
	quiet := 0
	var final map[string]*scrape
	poll(t, timeout, "load over and every server idle", func() (bool, string) {
		alive()
		if over, detail := loadOver(); !over {
			return false, detail
		}
		cur := map[string]float64{}
		scrapes := map[string]*scrape{}
		var busy float64
		for role, u := range urls {
			s, err := fetchScrape(u)
			if err != nil {
				quiet = 0
				return false, err.Error()
			}
			scrapes[role] = s
			for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting"} {
				v, n := s.sum(name)
				if n == 0 {
					t.Fatalf("%s: no %s series in the scrape", role, name)
				}
				busy += v
			}
			for k, v := range s.cumulative() {
				cur[role+" "+k] = v
			}
		}
		still := prev != nil && equalMaps(prev, cur)
		prev = cur
		if busy != 0 || !still {
			quiet = 0
			return false, fmt.Sprintf("running+waiting=%g, counters unchanged=%v", busy, still)
		}
		quiet++
		final = scrapes
		return quiet >= quietScrapes, fmt.Sprintf("%d quiet scrapes", quiet)
	})
	return final
}

func equalMaps(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// checkPromMatchesScrape: every counter and histogram sample of the final
// direct scrapes is in Prometheus with the same value.
func (e *env) checkPromMatchesScrape(t *testing.T, final map[string]*scrape, at time.Time) {
	got := map[string]float64{}
	for _, s := range e.prom.mustQuery(t, `{__name__=~"vllm:.+", path="direct"}`, at) {
		got[identity(s)] = s.value
	}
	n := 0
	for role, s := range final {
		for id, want := range s.cumulative() {
			n++
			if v, ok := got[id]; !ok {
				t.Errorf("%s: %s in the scrape (%g) but not in prometheus", role, id, want)
			} else if v != want {
				t.Errorf("%s: %s = %g in prometheus, %g in the scrape", role, id, v, want)
			}
		}
	}
	t.Logf("%d counter and histogram series identical in the scrapes and in prometheus", n)
}

// engineKey keys a sample by role and engine.
func engineKey(s series) string { return s.labels["role"] + "/" + s.labels["engine"] }

func (e *env) byEngine(t *testing.T, expr string, at time.Time) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, s := range e.prom.mustQuery(t, expr, at) {
		m[engineKey(s)] = s.value
	}
	return m
}

// engineKeys are the role/engine pairs the example runs.
func engineKeys() []string {
	keys := []string{"prefill/0"}
	for i := range decodeEngines {
		keys = append(keys, "decode/"+strconv.Itoa(i))
	}
	return keys
}

// checkRule: THE RULE. Over the whole run (the counters start at 0 with the
// process and never reset: checked), the increase of
// vllm:iteration_tokens_total's sum equals the increase of
// prompt_tokens_by_source{source="local_compute"} plus generation_tokens,
// exactly, per engine, on the decode instance (and on prefill too).
func (e *env) checkRule(t *testing.T, at time.Time) {
	const window = "[15m]" // longer than the run: Prometheus started with it
	for _, fam := range []string{
		`vllm:iteration_tokens_total_sum`,
		`vllm:prompt_tokens_by_source_total{source="local_compute"}`,
		`vllm:generation_tokens_total`,
	} {
		sel := addMatcher(fam, `path="direct"`)
		for k, v := range e.byEngine(t, `resets(`+sel+window+`)`, at) {
			if v != 0 {
				t.Errorf("%s: %s reset %g times: the increase is not the final value", k, sel, v)
			}
		}
	}
	iter := e.byEngine(t, `sum by (role, engine) (vllm:iteration_tokens_total_sum{path="direct"})`, at)
	local := e.byEngine(t, `sum by (role, engine) (vllm:prompt_tokens_by_source_total{path="direct", source="local_compute"})`, at)
	gen := e.byEngine(t, `sum by (role, engine) (vllm:generation_tokens_total{path="direct"})`, at)
	prompt := e.byEngine(t, `sum by (role, engine) (vllm:prompt_tokens_total{path="direct"})`, at)
	for _, k := range engineKeys() {
		i, ok1 := iter[k]
		l, ok2 := local[k]
		g, ok3 := gen[k]
		if !ok1 || !ok2 || !ok3 {
			t.Errorf("%s: series missing: iteration_tokens_total_sum %v, local_compute %v, generation_tokens %v", k, ok1, ok2, ok3)
			continue
		}
		if i != l+g {
			t.Errorf("THE RULE broken on %s: iteration_tokens_total_sum %g != local_compute %g + generation_tokens %g (= %g)", k, i, l, g, l+g)
		} else {
			t.Logf("%s: iteration_tokens_total_sum %g = local_compute %g + generation_tokens %g (prompt_tokens_total %g)", k, i, l, g, prompt[k])
		}
		if g == 0 {
			t.Errorf("%s: no generation tokens: the load made no data", k)
		}
	}
	// Same check as one PromQL expression over the decode instance.
	lhs := e.prom.scalar(t, `sum(vllm:iteration_tokens_total_sum{path="direct", role="decode"})`, at)
	rhs := e.prom.scalar(t, `sum(vllm:prompt_tokens_by_source_total{path="direct", role="decode", source="local_compute"}) + sum(vllm:generation_tokens_total{path="direct", role="decode"})`, at)
	if lhs != rhs || lhs == 0 {
		t.Errorf("THE RULE on decode: iteration tokens %g, local_compute + generation %g", lhs, rhs)
	}
}

// addMatcher adds a label matcher to a selector.
func addMatcher(sel, m string) string {
	if i := strings.IndexByte(sel, '}'); i >= 0 {
		return sel[:i] + ", " + m + "}"
	}
	return sel + "{" + m + "}"
}

var sources = []string{"local_compute", "local_cache_hit", "external_kv_transfer"}

// checkSources: prompt_tokens_total equals the sum over sources, and
// prompt_tokens_cached the cached sources, per engine; every source series
// exists on every engine.
func (e *env) checkSources(t *testing.T, at time.Time) {
	total := e.byEngine(t, `vllm:prompt_tokens_total{path="direct"}`, at)
	bySource := e.byEngine(t, `sum by (role, engine) (vllm:prompt_tokens_by_source_total{path="direct"})`, at)
	cached := e.byEngine(t, `vllm:prompt_tokens_cached_total{path="direct"}`, at)
	cachedSources := e.byEngine(t, `sum by (role, engine) (vllm:prompt_tokens_by_source_total{path="direct", source=~"local_cache_hit|external_kv_transfer"})`, at)
	present := map[string][]string{}
	for _, s := range e.prom.mustQuery(t, `vllm:prompt_tokens_by_source_total{path="direct"}`, at) {
		present[engineKey(s)] = append(present[engineKey(s)], s.labels["source"])
	}
	for _, k := range engineKeys() {
		if got := present[k]; !sameSet(got, sources) {
			t.Errorf("%s: prompt_tokens_by_source sources %v, want %v", k, got, sources)
		}
		if total[k] != bySource[k] || total[k] == 0 {
			t.Errorf("%s: prompt_tokens_total %g, sum over sources %g", k, total[k], bySource[k])
		}
		if cached[k] != cachedSources[k] {
			t.Errorf("%s: prompt_tokens_cached_total %g, local_cache_hit + external_kv_transfer %g", k, cached[k], cachedSources[k])
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

// checkKVTransfer: prompt tokens arrive through the KV connector on decode
// only.
func (e *env) checkKVTransfer(t *testing.T, at time.Time) {
	ext := e.byEngine(t, `vllm:prompt_tokens_by_source_total{path="direct", source="external_kv_transfer"}`, at)
	var decode float64
	for _, k := range engineKeys() {
		v, ok := ext[k]
		if !ok {
			t.Errorf("%s: no external_kv_transfer series", k)
			continue
		}
		if strings.HasPrefix(k, "prefill/") && v != 0 {
			t.Errorf("%s: external_kv_transfer %g, want 0 on prefill", k, v)
		}
		if strings.HasPrefix(k, "decode/") {
			decode += v
		}
	}
	if decode <= 0 {
		t.Errorf("decode: external_kv_transfer %g, want > 0", decode)
	}
	t.Logf("external_kv_transfer: decode %g, prefill %g", decode, ext["prefill/0"])
}

// histSpec is a latency histogram and the bucket bounds vLLM gives it.
type histSpec struct {
	name        string
	first, last float64
	roles       []string
}

var latencyHistograms = []histSpec{
	{"vllm:time_to_first_token_seconds", 0.001, 2560, []string{"prefill", "decode"}},
	// prefill runs every request with max_tokens=1: no inter-token latency.
	{"vllm:inter_token_latency_seconds", 0.01, 80, []string{"decode"}},
	{"vllm:e2e_request_latency_seconds", 0.3, 7680, []string{"prefill", "decode"}},
}

// checkQuantiles: histogram_quantile(0.9) over TTFT, ITL and e2e latency is
// finite and lies within the bucket range: between the bounds of the
// bucket that holds the 90th percentile observation, inside [0, last bound]
// (Prometheus takes the first bucket to start at 0); and the buckets are
// vLLM's, from the first bound to the last.
func (e *env) checkQuantiles(t *testing.T, path string, at time.Time, windowSeconds int) {
	window := fmt.Sprintf("[%ds]", max(windowSeconds, 60))
	for _, h := range latencyHistograms {
		for _, role := range h.roles {
			sel := fmt.Sprintf(`%s_bucket{path=%q, role=%q}`, h.name, path, role)
			rates := fmt.Sprintf(`sum by (le) (rate(%s%s))`, sel, window)
			buckets := e.prom.mustQuery(t, rates, at)
			type bucket struct{ le, v float64 }
			var bs []bucket
			for _, b := range buckets {
				le, err := strconv.ParseFloat(b.labels["le"], 64)
				if err != nil {
					t.Fatalf("%s: le %q: %v", sel, b.labels["le"], err)
				}
				bs = append(bs, bucket{le, b.value})
			}
			sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
			if len(bs) < 2 || !math.IsInf(bs[len(bs)-1].le, 1) {
				t.Errorf("%s: buckets %v, want finite bounds and +Inf", sel, bs)
				continue
			}
			if bs[0].le != h.first || bs[len(bs)-2].le != h.last {
				t.Errorf("%s: bucket bounds %g..%g, want %g..%g", sel, bs[0].le, bs[len(bs)-2].le, h.first, h.last)
			}
			total := bs[len(bs)-1].v
			if total <= 0 {
				t.Errorf("%s: no observations in %s", sel, window)
				continue
			}
			expr := fmt.Sprintf(`histogram_quantile(0.9, %s)`, rates)
			q := e.prom.scalar(t, expr, at)
			if math.IsNaN(q) || math.IsInf(q, 0) {
				t.Errorf("%s = %g, want a finite value", expr, q)
				continue
			}
			// The bucket the 0.9 rank falls in.
			rank := 0.9 * total
			lo, hi := 0.0, h.last
			for i, b := range bs {
				if b.v >= rank {
					if i > 0 {
						lo = bs[i-1].le
					}
					hi = min(b.le, h.last)
					break
				}
			}
			const eps = 1e-9
			if q < lo-eps || q > hi+eps || q < 0 || q > h.last {
				t.Errorf("%s: p90 %g outside its bucket [%g, %g] or the range [0, %g]", sel, q, lo, hi, h.last)
				continue
			}
			t.Logf("%s role=%s path=%s: p90 %.4gs (bucket %g..%g)", h.name, role, path, q, lo, hi)
		}
	}
}

// The only promtool findings allowed on a vLLM-compatible scrape.
const colonRule = "metric names should not contain ':'"

// iterationTokensTotal is the one other finding that vLLM compatibility
// forces: vllm:iteration_tokens_total is a histogram whose family name ends
// in _total (vllm-compat.md), which promlint flags.
const iterationTokensTotal = `vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix`

// checkPromtool: `promtool check metrics` on a scrape reports nothing but
// the rule against ':' in names (and the _total histogram vLLM mandates).
func (e *env) checkPromtool(t *testing.T, role string, body []byte) {
	cmd := exec.Command(e.tools.promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == 3: // lint problems, looked at below
	default:
		t.Fatalf("%s: promtool check metrics: %v\n%s", role, err, out)
	}
	colon, other := 0, 0
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasSuffix(line, colonRule):
			colon++
		case line == iterationTokensTotal:
			t.Logf("%s: promtool: %s (kept: vLLM's name for a histogram)", role, line)
		default:
			other++
			t.Errorf("%s: promtool check metrics: %s", role, line)
		}
	}
	t.Logf("%s: promtool: %d findings of the ':' rule filtered, %d others", role, colon, other)
}

// cumulativeSeries returns what path holds at time at for every counter
// and histogram series of the final scrapes, by identity.
func (e *env) cumulativeSeries(t *testing.T, path string, at time.Time, final map[string]*scrape) map[string]float64 {
	t.Helper()
	want := map[string]bool{}
	for _, s := range final {
		for id := range s.cumulative() {
			want[id] = true
		}
	}
	got := map[string]float64{}
	for _, s := range e.prom.mustQuery(t, fmt.Sprintf(`{__name__=~"vllm:.+", path=%q}`, path), at) {
		id := identity(s)
		if !want[id] {
			continue
		}
		if _, dup := got[id]; dup {
			t.Fatalf("%s path: two series with identity %s", path, id)
		}
		got[id] = s.value
	}
	if len(got) != len(want) {
		t.Fatalf("%s path: %d of %d counter and histogram series in prometheus", path, len(got), len(want))
	}
	return got
}

// checkOTLPAgrees polls until every counter and histogram series that came
// through the collector equals its direct-scrape twin, and no series exists
// on one path only, but for histograms at zero on the direct path (the
// handler's start-up series, which OTLP does not carry) and the classic
// buckets of histograms the OTLP path carries as native ones, which agree by
// count and sum.
func (e *env) checkOTLPAgrees(t *testing.T, direct map[string]float64, final map[string]*scrape) {
	names := map[string]bool{}
	for _, s := range final {
		for _, se := range s.series {
			if _, typ := s.family(se.name); typ == "counter" || typ == "histogram" {
				names[se.name] = true
			}
		}
	}
	// Histogram series the handler completed at zero have no OTLP twin.
	zero := zeroHistogramSamples(final)
	var agreed, directOnly, bucketsOnly int
	poll(t, 60*time.Second, "OTLP path equal to the direct scrape on every counter and histogram series", func() (bool, string) {
		res, err := e.prom.query(`{__name__=~"vllm:.+", path="otlp"}`, time.Now())
		if err != nil {
			return false, err.Error()
		}
		otlp := map[string]float64{}
		native := map[string]bool{} // families that came through the collector as native histograms
		var problems []string
		for _, s := range res {
			if !names[s.name] {
				continue
			}
			if s.native {
				native[strings.TrimSuffix(strings.TrimSuffix(s.name, "_count"), "_sum")] = true
			}
			id := identity(s)
			if _, dup := otlp[id]; dup {
				problems = append(problems, "two OTLP series "+id)
			}
			otlp[id] = s.value
			if _, ok := direct[id]; !ok {
				problems = append(problems, fmt.Sprintf("%s: otlp %g, absent from the direct scrape", id, s.value))
			}
		}
		directOnly, bucketsOnly = 0, 0
		for id, want := range direct {
			got, ok := otlp[id]
			switch {
			case !ok && zero[id]:
				directOnly++
			case !ok && strings.Contains(id, "_bucket{") && native[id[:strings.Index(id, "_bucket{")]]:
				bucketsOnly++ // classic buckets on the direct path, native on the OTLP path
			case !ok:
				problems = append(problems, fmt.Sprintf("%s: direct %g, absent from the otlp path", id, want))
			case !sameValue(got, want):
				problems = append(problems, fmt.Sprintf("%s: direct %g, otlp %g", id, want, got))
			}
		}
		if len(problems) > 0 {
			sort.Strings(problems)
			n := len(problems)
			if n > 25 {
				problems = append(problems[:25], fmt.Sprintf("... and %d more", n-25))
			}
			return false, fmt.Sprintf("%d mismatches:\n  %s", n, strings.Join(problems, "\n  "))
		}
		agreed = len(otlp)
		return true, ""
	})
	t.Logf("%d counter and histogram series (%d sample names) identical on the direct and the OTLP path (native "+
		"histograms by count and sum); %d samples of zero histograms and %d classic buckets of native histograms on the direct path only",
		agreed, len(names), directOnly, bucketsOnly)
}

// reportExportWarnings logs the OTLP export errors the example reported.
func (e *env) reportExportWarnings(t *testing.T) {
	b, err := os.ReadFile(e.example.stderr)
	if err != nil {
		return
	}
	var warns []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "metrics export") || strings.Contains(l, "level=ERROR") {
			warns = append(warns, l)
		}
	}
	if len(warns) > 0 {
		t.Logf("the example reported %d export warnings or errors:\n%s", len(warns), tail(strings.Join(warns, "\n"), 10))
	}
}
