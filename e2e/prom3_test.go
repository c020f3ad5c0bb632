package e2e

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Prometheus 3, built from the Go module proxy by scripts/e2e-deps.sh, runs
// beside Debian's 2.x: it stores exemplars of native histograms (2.42 drops
// them), ingests native histograms only with scrape_native_histograms in
// its scrape configuration, normalises le ("1" is written "1.0") and
// receives OTLP itself (--web.enable-otlp-receiver), without a collector.

// prom3Flags are the flags of every Prometheus 3 of the suite: exemplar
// storage (still a feature flag in 3.x) and the OTLP receiver at
// /api/v1/otlp/v1/metrics.
var prom3Flags = []string{"--enable-feature=exemplar-storage", "--web.enable-otlp-receiver"}

// prom3OTLPConfig is the OTLP section of its configuration.
// NoUTF8EscapingWithSuffixes keeps vLLM's names with their colons (the
// default, UnderscoreEscapingWithSuffixes, writes vllm_time_to_...) and adds
// the suffixes vLLM's names have (_total on counters, _seconds); the
// resource attribute path (OTEL_RESOURCE_ATTRIBUTES=path=otlp in the
// example's environment) becomes a label of every series, as the
// collector's external label does on the remote-write path.
const prom3OTLPConfig = `otlp:
  translation_strategy: NoUTF8EscapingWithSuffixes
  promote_resource_attributes: [path]
`

// prom3ScrapeConfig makes the scrape negotiate protobuf and keep native
// histograms (without it Prometheus 3 ingests none, whatever the flags).
const prom3ScrapeConfig = "    scrape_native_histograms: true\n    scrape_protocols: [PrometheusProto]\n"

// needPrometheus3 returns the Prometheus 3 binary, $E2E_PROMETHEUS3 or
// bin/prometheus3, or skips the test (fails it under E2E_REQUIRED=1).
func needPrometheus3(t *testing.T) string {
	t.Helper()
	bin, ok := builtBinary("E2E_PROMETHEUS3", "prometheus3")
	if !ok {
		msg := fmt.Sprintf("e2e: Prometheus 3 binary %s missing; run scripts/e2e-deps.sh", bin)
		if required() {
			t.Fatal(msg + " (E2E_REQUIRED=1: a missing binary is a failure)")
		}
		t.Skip(msg)
	}
	return bin
}

// prom3Env is an env on Prometheus 3 whose example pushes OTLP (http/protobuf)
// straight to Prometheus's receiver, the collector's place, at promPort.
func prom3Env(t *testing.T, promPort int, scrape bool) *env {
	tl := needTools(t)
	e := &env{tools: tl, work: t.TempDir(), promBin: needPrometheus3(t), promArgs: prom3Flags,
		promConfig: prom3OTLPConfig}
	if scrape {
		e.scrapeConfig = prom3ScrapeConfig
	}
	e.exampleEnv = []string{
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		fmt.Sprintf("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://127.0.0.1:%d/api/v1/otlp/v1/metrics", promPort),
		"OTEL_RESOURCE_ATTRIBUTES=path=otlp",
	}
	return e
}

// prom3Run starts Prometheus 3 (scraping both instances when scrape is set)
// and the example with a sampled span per request and one slow request,
// waits for the load to end and both paths to hold the slow request, and
// returns the slow request's trace ID and when the run started.
func prom3Run(t *testing.T, e *env, promPort int, scrape bool, extra ...string) (trace string, start time.Time) {
	t.Helper()
	ports := distinctPorts(t, 3)
	for ports[0] == promPort || ports[1] == promPort || ports[2] == promPort {
		ports = distinctPorts(t, 3)
	}
	prefillAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	decodeAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	var targets []string
	if scrape {
		targets = []string{prefillAddr, decodeAddr}
	}
	e.startPrometheus(t, promPort, targets...)
	if v, err := httpGet(e.prom.base + "/api/v1/status/buildinfo"); err == nil {
		t.Logf("prometheus buildinfo: %s", v)
	}
	pd := buildExample(t, e.work)
	start = time.Now()
	// No -otlp-endpoint: the environment (prom3Env) names the receiver.
	e.startExample(t, pd, prefillAddr, decodeAddr, "", append([]string{
		"-trace", "-slow-request", "3", "-slow-delay", slowDelay.String()}, extra...)...)
	trace = e.slowTrace(t)
	// The suite's load, the slow request among it (the example's load ends
	// once it sent the slow one too).
	e.waitQuiet(t, startupIdle+loadDuration+slowDelay+2*time.Minute)
	return trace, start
}

// TestPrometheus3 scrapes the example's classic histograms with
// Prometheus 3 and receives its OTLP with exponential histograms through
// Prometheus's own OTLP receiver, no collector: the slow request's trace ID
// is a TTFT exemplar of the classic (scrape) and the native (OTLP)
// histogram; native quantiles are closer to the truth than classic ones;
// every vLLM dashboard expression that applies returns data (from the
// scrape: the OTLP path is native, which vLLM's _bucket selectors do not
// read); le="1.0" selects the buckets vLLM's SLO panels read.
func TestPrometheus3(t *testing.T) {
	promPort := distinctPorts(t, 1)[0]
	e := prom3Env(t, promPort, true)
	e.nativeOTLP = true
	trace, start := prom3Run(t, e, promPort, true)

	direct := `vllm:time_to_first_token_seconds_bucket{path="direct",role="prefill"}`
	e.checkSlowExemplar(t, "direct (classic)", direct, trace, start, true)
	native := `vllm:time_to_first_token_seconds{path="otlp",role="prefill"}`
	e.checkNativeSeries(t, native)
	e.checkSlowExemplar(t, "otlp (native)", native, trace, start, false)

	e.sendAPICalls(t) // the HTTP families vLLM's overview dashboard reads
	evalAt := time.Now()
	window := int(evalAt.Sub(start).Seconds()) + 5
	t.Run("le as vllm writes it", func(t *testing.T) { e.checkLeText(t, evalAt, window) })
	t.Run("vllm dashboards", func(t *testing.T) { e.checkVLLMDashboards(t, evalAt, window) })

	// The OTLP reader's last export happens at shutdown.
	e.stopExample(t)
	t.Run("native quantiles closer", func(t *testing.T) { e.checkNativeQuantiles(t, evalAt, time.Now()) })
}

// TestPrometheus3NativeScrape scrapes the example's native histograms
// (-exponential-latency) with scrape_native_histograms: Prometheus 3 stores
// the scraped native series, the slow request's trace ID is a TTFT
// exemplar of the native histogram both scraped and received over OTLP,
// and every scraped TTFT series with observations holds exemplars (before
// the handler gave each such series its own family message, Prometheus
// 3.16 stored the exemplars of the first series of a family only).
func TestPrometheus3NativeScrape(t *testing.T) {
	promPort := distinctPorts(t, 1)[0]
	e := prom3Env(t, promPort, true)
	trace, start := prom3Run(t, e, promPort, true, "-exponential-latency")
	var slow exemplarHit // as received over OTLP
	for _, path := range []string{"otlp", "direct"} {
		sel := fmt.Sprintf(`vllm:time_to_first_token_seconds{path=%q,role="prefill"}`, path)
		e.checkNativeSeries(t, sel)
		if path == "otlp" {
			slow = e.checkSlowExemplar(t, path+" (native)", sel, trace, start, false)
			continue
		}
		if v := e.prom.scalar(t, "histogram_quantile(1, sum("+sel+"))", time.Now()); v < slowDelay.Seconds() {
			t.Errorf("%s: the largest TTFT is %gs, want the slow request's %s or more", sel, v, slowDelay)
		}
		hits, err := e.prom.exemplars(sel, start, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(hits, func(h exemplarHit) bool { return h.traceID == trace }) {
			t.Errorf("%s: the slow request's exemplar (trace %s, %g s) is not among the %d stored", sel, trace, slow.value, len(hits))
		}
		// Every scraped series holds exemplars, not the first of the
		// family only (see exporters' encodeNativeExemplarSplit).
		held := map[string]bool{}
		for _, h := range hits {
			held[h.series["engine"]+"/"+h.series["priority"]] = true
		}
		for _, s := range e.prom.mustQuery(t, "histogram_count("+sel+") > 0", time.Now()) {
			if k := s.labels["engine"] + "/" + s.labels["priority"]; !held[k] {
				t.Errorf("%s: series engine/priority %s has samples but no stored exemplar (held: %v)", sel, k, held)
			}
		}
	}
	// What a text scrape shows of a native-only family: _count, _sum and
	// one +Inf bucket, which Prometheus stores as such.
	body, err := httpGet(e.urls["prefill"])
	if err != nil {
		t.Fatal(err)
	}
	text, err := parseScrape(body)
	if err != nil {
		t.Fatal(err)
	}
	var buckets []string
	for _, s := range text.series {
		if s.name == "vllm:time_to_first_token_seconds_bucket" && s.labels["role"] == "prefill" {
			buckets = append(buckets, s.labels["le"])
		}
	}
	_, counts := text.sum("vllm:time_to_first_token_seconds_count")
	_, sums := text.sum("vllm:time_to_first_token_seconds_sum")
	if counts == 0 || sums != counts || len(buckets) != counts || slices.ContainsFunc(buckets, func(le string) bool { return le != "+Inf" }) {
		t.Errorf("text scrape of native TTFT: %d _count, %d _sum series, buckets le=%v; want _count, _sum and one le=\"+Inf\" bucket per series",
			counts, sums, buckets)
	}
}

// TestPrometheus3OTLP receives the example's classic histograms over OTLP
// only (nothing scrapes the example): with the NoUTF8EscapingWithSuffixes
// translation every vLLM dashboard expression that applies returns data,
// and the slow request's trace ID is a TTFT exemplar of the classic
// histogram.
func TestPrometheus3OTLP(t *testing.T) {
	promPort := distinctPorts(t, 1)[0]
	e := prom3Env(t, promPort, false)
	trace, start := prom3Run(t, e, promPort, false)
	e.checkSlowExemplar(t, "otlp (classic)", `vllm:time_to_first_token_seconds_bucket{path="otlp",role="prefill"}`, trace, start, true)
	e.apiPath = "otlp"
	e.sendAPICalls(t)
	evalAt := time.Now()
	window := int(evalAt.Sub(start).Seconds()) + 5
	e.pathNotApplicable = otlpNotApplicable
	t.Run("vllm dashboards", func(t *testing.T) { e.checkVLLMDashboards(t, evalAt, window) })
	// Prometheus's OTLP translation writes whole-number bounds as Go does
	// (le="1"), unlike its scrape, which normalises them to le="1.0".
	n := map[string]int{}
	for _, le := range []string{"1.0", "1"} {
		n[le] = len(e.prom.mustQuery(t, fmt.Sprintf(`vllm:time_to_first_token_seconds_bucket{path="otlp", le=%q}`, le), evalAt))
	}
	if n["1.0"] != 0 || n["1"] == 0 {
		t.Errorf(`otlp: le="1.0" selects %d TTFT bucket series, le="1" %d; want 0 and some (update the docs if Prometheus changed)`, n["1.0"], n["1"])
	}
}

// otlpNotApplicable are the expressions of vLLM's dashboards that stay
// empty when Prometheus receives OTLP only.
var otlpNotApplicable = []struct{ family, reason string }{
	{"process_", "process_* families are served on the scrape only, not sent over OTLP (exporters.Setup)"},
	{`le="$ttft_slo"`, `Prometheus's OTLP translation writes le="1" where vLLM's SLO panel selects le="1.0"`},
}

// checkNativeSeries fails unless sel selects native histogram samples.
func (e *env) checkNativeSeries(t *testing.T, sel string) {
	t.Helper()
	poll(t, 30*time.Second, sel+" as a native histogram", func() (bool, string) {
		v, err := e.prom.query(sel, time.Now())
		if err != nil {
			return false, err.Error()
		}
		for _, s := range v {
			if s.native {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d samples, none native", len(v))
	})
}

// stopExample interrupts the example, which flushes OTLP, and waits for it
// to exit 0.
func (e *env) stopExample(t *testing.T) {
	t.Helper()
	if err := e.example.signal(syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT to the example: %v", err)
	}
	err, ok := e.example.wait(30 * time.Second)
	if !ok {
		t.Fatal("the example did not exit within 30s of SIGINT")
	}
	if err != nil {
		t.Fatalf("the example exited with %v after SIGINT, want exit status 0", err)
	}
	e.reportExportWarnings(t)
}
