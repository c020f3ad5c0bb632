package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/mixin"
)

// TestFleet's size: $E2E_FLEET instances (scripts/bench.sh runs 64), else
// defaultFleet, which fits the test command's budget.
const defaultFleet = 16

// fleetInterval is the fleet's OTLP export interval and the direct
// scrape's interval: one cadence on both paths; at 1 s the scrapes of a
// fleet time out on a loaded 2-core machine.
const fleetInterval = 5 * time.Second

// fleetLoad is how long each example generates requests, fleetRate their
// rate per example.
const (
	fleetLoad = 20 * time.Second
	fleetRate = "2"
)

// restartTokens are the generation tokens on each decode engine that the
// restarted example's first life makes, and every store holds, before it
// stops; its second life makes at most restartMaxTokens (one request), far
// fewer: the drop is a reset in every store.
const (
	restartTokens    = 10
	restartMaxTokens = 2
)

// fleetCluster is the cluster the gateway collector's resource processor
// names (and the direct scrape's target label).
const fleetCluster = "fleet"

// fleetCollectorConfig is the gateway's configuration: OTLP in;
// memory_limiter first; resource copies the sender's k8s.namespace.name to
// namespace and adds cluster unless the sender set one; batch last; one
// remote write per store, whose resource_constant_labels put namespace and
// cluster on every series (job and instance come from service.name and
// service.instance.id). docs/kubernetes.md shows it.
func fleetCollectorConfig(otlp string, writes map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
processors:
  memory_limiter:
    check_interval: 1s
    limit_mib: 1024
    spike_limit_mib: 256
  resource:
    attributes:
      - key: namespace
        from_attribute: k8s.namespace.name
        action: insert
      - key: cluster
        value: %s
        action: insert
  batch:
    send_batch_size: 8192
    timeout: 1s
exporters:
`, otlp, fleetCluster)
	var names []string
	for _, name := range slices.Sorted(maps.Keys(writes)) {
		id := "prometheus_remote_write/" + name
		names = append(names, id)
		fmt.Fprintf(&b, `  %s:
    endpoint: %s
    resource_constant_labels:
      included: [namespace, cluster]
`, id, writes[name])
	}
	fmt.Fprintf(&b, `service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [memory_limiter, resource, batch]
      exporters: [%s]
`, strings.Join(names, ", "))
	return b.String()
}

// fleetMember is one instance of the fleet: a server with its own /metrics,
// pushing OTLP under service.name job and service.instance.id addr (the
// instance label its direct scrape has).
type fleetMember struct {
	job, namespace, addr string
	proc                 func() *proc // the process serving it
}

// byteRelay forwards TCP connections from its listener to target, counting
// the bytes the clients send (the OTLP pushed): the fleet's bytes per
// minute. The collector behind it may be down; a connection then fails.
// While its gate is held, what target answers waits in the relay.
type byteRelay struct {
	ln     net.Listener
	target string
	sent   atomic.Int64
	gate   gate
	wg     sync.WaitGroup
}

// gate holds back whoever waits on it from hold to release (a test's
// moment, not a duration).
type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed when not held; nil: never held
}

func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	}
}

// wait returns once the gate is not held.
func (g *gate) wait() {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open != nil {
		<-open
	}
}

func startRelay(t *testing.T, listen, target string) *byteRelay {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	r := &byteRelay{ln: ln, target: target}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Go(func() { r.serve(c) })
		}
	})
	t.Cleanup(func() { r.gate.release(); ln.Close(); r.wg.Wait() })
	return r
}

func (r *byteRelay) serve(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			r.gate.wait()
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	n, _ := io.Copy(up, c)
	r.sent.Add(n)
	up.Close()
	<-done
}

// procUsage is a process's CPU time (user+system) and its resident set,
// now and at its peak, from /proc.
type procUsage struct {
	cpu        time.Duration
	rss, hwmKB int64
}

func usageOf(t *testing.T, pid int) procUsage {
	t.Helper()
	var u procUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th (fields 14 and 15 of proc(5)), in clock ticks.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(status), "\n") {
		k, v, _ := strings.Cut(l, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.rss = kb
		case "VmHWM":
			u.hwmKB = kb
		}
	}
	return u
}

// fleetSize is $E2E_FLEET, or defaultFleet.
func fleetSize(t *testing.T) int {
	t.Helper()
	s := os.Getenv("E2E_FLEET")
	if s == "" {
		return defaultFleet
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 8 {
		t.Fatalf("E2E_FLEET=%q: want a number of instances, at least 8", s)
	}
	return n
}

// TestFleet runs a fleet of instances as separate processes (examples'
// prefill and decode instances, and proxies in front of them), each
// pushing OTLP to one collector (memory_limiter, resource, batch) that
// remote-writes to a Prometheus 2.42 and a 3.16, while another 2.42 and
// 3.16 scrape the same instances directly. Midway the collector restarts,
// and one example restarts. Checks: every counter and histogram series of
// every instance in the pushed stores equals the instance's own final
// scrape (so each family's fleet total is exact, and the collector's
// restart lost no count: cumulative temporality), every instance's series
// are apart and carry cluster, namespace, job and instance as the direct
// scrape gives them; the restarted instance's counters reset once and
// rate() counts both lives; every recording rule and dashboard query
// returns the same series on the pushed and the scraped store, and each
// dashboard query of instant values the same values. It logs
// the collector's CPU and memory, the stores' series and the bytes pushed
// per minute (scripts/bench.sh reads that line).
func TestFleet(t *testing.T) {
	tl := needTools(t)
	// Prometheus 3 beside 2.42 when built (scripts/e2e-deps.sh); without
	// it the 2.42 stores alone (a failure under E2E_REQUIRED=1).
	versions := []string{"2", "3"}
	prom3, ok := builtBinary("E2E_PROMETHEUS3", "prometheus3")
	if !ok {
		if required() {
			t.Fatalf("e2e: Prometheus 3 binary %s missing (E2E_REQUIRED=1: a missing binary is a failure)", prom3)
		}
		t.Logf("e2e: Prometheus 3 binary %s missing: the 2.42 stores only; run scripts/e2e-deps.sh", prom3)
		versions = versions[:1]
	}
	n := fleetSize(t)
	// The polls' deadline grows with the fleet: a large one loads the
	// machine (and the stores answer slower). A bound, not an expectation:
	// idle, each poll ends in seconds.
	deadline := max(5*time.Minute, time.Duration(n)*10*time.Second)
	began := time.Now()
	mark := func(what string) { t.Logf("[%5.1fs] %s", time.Since(began).Seconds(), what) }
	files, err := mixin.Files(mixin.Default().WithFor("1s"))
	if err != nil {
		t.Fatal(err)
	}
	// A quarter of the fleet proxies, the rest the prefill and decode
	// instances of examples.
	proxies := n / 4
	examples := (n - proxies) / 2
	proxies = n - 2*examples

	work := t.TempDir()
	sd := filepath.Join(work, "sd")
	if err := os.Mkdir(sd, 0o755); err != nil {
		t.Fatal(err)
	}
	ruleConfig := writeRuleFiles(t, work, files)
	ports := distinctPorts(t, 6+3*examples+2*proxies)
	next := func() string {
		p := ports[0]
		ports = ports[1:]
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	stores := map[string]*env{} // "push 2", "push 3", "scrape 2", "scrape 3"
	writes := map[string]string{}
	for _, path := range []string{"push", "scrape"} {
		for _, v := range versions {
			name := path + " " + v
			e := &env{tools: tl, work: filepath.Join(work, path+v), promConfig: ruleConfig, scrapeInterval: fleetInterval}
			if v == "3" {
				e.promBin = prom3
			}
			if path == "scrape" {
				e.scrapeConfig = faultsScrapeConfig(sd)
			}
			if err := os.Mkdir(e.work, 0o755); err != nil {
				t.Fatal(err)
			}
			stores[name] = e
		}
	}
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		e := stores[name]
		addr := next()
		e.startPrometheus(t, mustPort(t, addr))
		if strings.HasPrefix(name, "push") {
			writes["prom"+strings.TrimPrefix(name, "push ")] = e.prom.base + "/api/v1/write"
		}
	}
	otlp, collectorAddr := next(), next()
	colCfg := filepath.Join(work, "otelcol.yaml")
	if err := os.WriteFile(colCfg, []byte(fleetCollectorConfig(collectorAddr, writes)), 0o644); err != nil {
		t.Fatal(err)
	}
	startCol := func(name string) *proc {
		p := startProc(t, work, name, childEnv(), tl.otelcol, "--config=file:"+colCfg)
		waitListening(t, p, "collector OTLP/gRPC", collectorAddr)
		return p
	}
	collector := startCol("otelcol")
	relay := startRelay(t, otlp, collectorAddr)
	pd := buildExample(t, work)
	proxyBin := buildProxy(t, work)
	mark(fmt.Sprintf("4 prometheus, the collector started; %d examples (%d instances) and %d proxies to start", examples, 2*examples, proxies))

	// The examples: each its own namespace, its instances' ids their
	// listen addresses. The last one restarts midway (restarted below).
	var members []*fleetMember
	procs := make([]*proc, examples+proxies)
	type exampleRun struct {
		args                []string
		prefill, decode, ns string
	}
	runs := make([]exampleRun, examples)
	for i := range examples {
		r := exampleRun{prefill: next(), decode: next(), ns: fmt.Sprintf("team-%d", i%4)}
		r.args = []string{pd, "-prefill-listen", r.prefill, "-decode-listen", r.decode, "-router-listen", "",
			"-service-name", engineJob, "-instance-id", "listen", "-seed", strconv.Itoa(i + 1),
			"-rate", fleetRate, "-duration", fleetLoad.String(), "-log-interval", "1h",
			"-otlp-endpoint", otlp, "-otlp-interval", fleetInterval.String()}
		runs[i] = r
		env := append(childEnv(), "OTEL_RESOURCE_ATTRIBUTES=k8s.namespace.name="+r.ns)
		procs[i] = startProc(t, work, fmt.Sprintf("example-%d", i), env, r.args...)
		for _, addr := range []string{r.prefill, r.decode} {
			members = append(members, &fleetMember{job: engineJob, namespace: r.ns, addr: addr, proc: func() *proc { return procs[i] }})
		}
	}
	// The proxies: in front of the examples' decode instances in turn,
	// clients streaming through each.
	ctx, cancel := context.WithCancel(context.Background())
	var traffic sync.WaitGroup
	t.Cleanup(func() { cancel(); traffic.Wait() })
	trafficErrs := &errList{}
	var proxyAPIs []string
	for j := range proxies {
		up := runs[j%examples]
		listen, metrics := next(), next()
		env := append(childEnv(), "OTEL_RESOURCE_ATTRIBUTES=k8s.namespace.name="+up.ns,
			"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+otlp,
			fmt.Sprintf("OTEL_METRIC_EXPORT_INTERVAL=%d", fleetInterval.Milliseconds()))
		k := examples + j
		procs[k] = startProc(t, work, fmt.Sprintf("proxy-%d", j), env, proxyBin, "-listen", listen, "-metrics-listen", metrics,
			"-upstream", "http://"+up.decode, "-include-usage", "-default-model", "meta-llama/Llama-3.1-8B-Instruct",
			"-service-name", proxyJob, "-instance-id", metrics)
		members = append(members, &fleetMember{job: proxyJob, namespace: up.ns, addr: metrics, proc: func() *proc { return procs[k] }})
		proxyAPIs = append(proxyAPIs, "http://"+listen+"/v1/chat/completions")
	}
	// The instances stop together, then the collector their last exports
	// go to: one by one (each's own cleanup) they took about 45 s.
	t.Cleanup(func() {
		stopTogether(10*time.Second, procs...)
		collector.stop(10 * time.Second)
	})
	urls := map[string]string{}
	for _, m := range members {
		waitServing(t, m.proc(), "http://"+m.addr+"/metrics")
		urls[m.addr] = "http://" + m.addr + "/metrics"
	}
	for _, job := range []string{engineJob, proxyJob} {
		byNS := map[string][]string{}
		for _, m := range members {
			if m.job == job {
				byNS[m.namespace] = append(byNS[m.namespace], m.addr)
			}
		}
		for ns, addrs := range byNS {
			sdFileLabels(t, sd, job+"-"+ns+".json", map[string]string{"namespace": ns, "cluster": fleetCluster}, addrs...)
		}
	}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	for _, api := range proxyAPIs {
		traffic.Go(func() { routerTraffic(trafficCtx, api, trafficErrs) })
	}
	pushStart := time.Now()
	mark(fmt.Sprintf("%d instances serving, pushing every %s", len(members), fleetInterval))

	// Every instance reached the pushed stores: then the collector
	// restarts, and comes back once the instances counted more requests
	// (exports fail meanwhile; the later ones carry those counts).
	push2 := stores["push 2"]
	waitInstances := func(e *env, what string) {
		poll(t, deadline, what, func() (bool, string) {
			v, err := e.prom.query(`count by (job, instance) (vllm:num_requests_running)`, time.Now())
			if err != nil {
				return false, err.Error()
			}
			return len(v) == len(members), fmt.Sprintf("%d of %d instances", len(v), len(members))
		})
	}
	waitInstances(push2, "every instance in the pushed store")
	successes := func() float64 {
		var sum float64
		for _, u := range urls {
			if s, err := fetchScrape(u); err == nil {
				v, _ := s.sum("vllm:request_success_total")
				sum += v
			}
		}
		return sum
	}
	firstCol := usageOf(t, collector.cmd.Process.Pid)
	collector.stop(10 * time.Second)
	before := successes()
	mark(fmt.Sprintf("collector stopped (the fleet has finished %g requests)", before))
	poll(t, time.Minute, "more requests finished while the collector is down", func() (bool, string) {
		now := successes()
		return now > before, fmt.Sprintf("%g finished, %g when the collector stopped", now, before)
	})
	collector = startCol("otelcol-restarted")
	mark("collector restarted")

	// The restarted example: its first life's counts scraped once it
	// generated tokens on every engine, then SIGTERM; its second life
	// serves one API request only (no generated load), so its counters
	// restart below their first life's values.
	ri := examples - 1
	restarted := runs[ri]
	genTokens := func() (map[string]float64, error) {
		s, err := fetchScrape("http://" + restarted.decode + "/metrics")
		if err != nil {
			return nil, err
		}
		m := map[string]float64{}
		for _, se := range s.series {
			if se.name == "vllm:generation_tokens_total" {
				m[se.labels["engine"]] = se.value
			}
		}
		return m, nil
	}
	var firstLife map[string]float64
	poll(t, 2*time.Minute, fmt.Sprintf("the restarted example's decode engines generated %d tokens each", restartTokens), func() (bool, string) {
		m, err := genTokens()
		if err != nil {
			return false, err.Error()
		}
		firstLife = m
		ok := len(m) == decodeEngines
		for _, v := range m {
			ok = ok && v >= restartTokens
		}
		return ok, fmt.Sprint(m)
	})
	// Every store holds them before the first life ends, however long its
	// scrape or push takes: then each sees the drop to the second life's
	// few tokens (at most restartMaxTokens) as the reset.
	firstSel := fmt.Sprintf(`max by (engine) (vllm:generation_tokens_total{instance=%q}) >= %d`, restarted.decode, restartTokens)
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		what := fmt.Sprintf("%s: the restarted example's first life (%d generation tokens or more on each decode engine) in the store", name, restartTokens)
		poll(t, deadline, what, func() (bool, string) {
			v, err := stores[name].prom.query(firstSel, time.Now())
			if err != nil {
				return false, err.Error()
			}
			return len(v) == decodeEngines, fmt.Sprintf("%s: %v", firstSel, v)
		})
	}
	procs[ri].stop(10 * time.Second) // SIGTERM: the example flushes OTLP
	restartAt := time.Now()
	lastFirst, err := genTokens()
	if err == nil {
		t.Fatalf("the stopped example still serves: %v", lastFirst)
	}
	args := slices.Clone(restarted.args)
	args = append(args, "-workload=false")
	procs[ri] = startProc(t, work, fmt.Sprintf("example-%d-restarted", ri), append(childEnv(), "OTEL_RESOURCE_ATTRIBUTES=k8s.namespace.name="+restarted.ns), args...)
	waitServing(t, procs[ri], "http://"+restarted.decode+"/metrics")
	if _, b, err := do(ctx, "POST", "http://"+restarted.decode+"/v1/chat/completions",
		fmt.Sprintf(`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":%d}`, restartMaxTokens)); err != nil {
		t.Fatalf("API request to the restarted example: %v %s", err, b)
	}
	mark(fmt.Sprintf("example %d restarted (first life's generation tokens per engine at least %v)", ri, firstLife))

	// The load ends (every example but the restarted one, whose second
	// life runs none, logged so); the proxies' clients stop; every
	// instance is still.
	loadOver := func() (bool, string) {
		for i := range examples {
			if i == ri {
				continue
			}
			if over, detail := procs[i].loadFinished(); !over {
				return false, procs[i].name + ": " + detail
			}
		}
		return true, ""
	}
	poll(t, fleetLoad+deadline, "the examples' load over", loadOver)
	stopTraffic()
	final := waitQuietURLs(t, urls, loadOver, deadline+time.Minute, func() {
		for _, p := range procs {
			p.alive(t)
		}
	})
	mark("every instance still")

	// The pushed stores hold each instance's final scrape, series by
	// series (no count lost to the collector's restart), the instance's
	// series apart and labelled as its direct scrape.
	zero := map[string]map[string]bool{} // by instance
	for inst, s := range final {
		zero[inst] = zeroHistogramSamples(map[string]*scrape{inst: s})
	}
	for _, v := range versions {
		name := "push " + v
		e := stores[name]
		t.Run(name+" equals the instances", func(t *testing.T) {
			var detail string
			poll(t, deadline, name+": every series of every instance equal to its scrape", func() (bool, string) {
				ok, d := fleetAgrees(e, members, final, zero, restarted.prefill, restarted.decode)
				detail = d
				return ok, d
			})
			t.Log(detail)
			checkFleetTotals(t, e, final, restarted.prefill, restarted.decode)
		})
	}
	// The scraped stores scrape every instance after it went still.
	stillAt := time.Now()
	for _, v := range versions {
		name := "scrape " + v
		e := stores[name]
		poll(t, deadline, name+": every instance scraped after the load", func() (bool, string) {
			v, err := e.prom.query(fmt.Sprintf(`timestamp(up{job=~"%s|%s"} == 1) > %s`, engineJob, proxyJob, promTime(stillAt)), time.Now())
			if err != nil {
				return false, err.Error()
			}
			return len(v) == len(members), fmt.Sprintf("%d of %d targets scraped since", len(v), len(members))
		})
	}
	// Every store holds the restarted instance's second life (a sample
	// after the restart of each engine it recorded tokens on), then every
	// rule group evaluated after all that was in it.
	var secondLife []string
	for _, se := range final[restarted.decode].series {
		if se.name == "vllm:generation_tokens_total" && se.value > 0 {
			secondLife = append(secondLife, se.labels["engine"])
		}
	}
	if len(secondLife) == 0 {
		t.Fatalf("the restarted example's second life generated no tokens: %s", final[restarted.decode].body)
	}
	secondSel := fmt.Sprintf(`timestamp(vllm:generation_tokens_total{instance=%q}) > %s`, restarted.decode, promTime(restartAt))
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		e := stores[name]
		what := fmt.Sprintf("%s: a sample of the restarted example's second life (after %s) of each engine it recorded on, %v",
			name, restartAt.Format(time.RFC3339Nano), secondLife)
		poll(t, deadline, what, func() (bool, string) {
			v, err := e.prom.query(secondSel, time.Now())
			if err != nil {
				return false, err.Error()
			}
			seen := map[string]bool{}
			for _, s := range v {
				seen[s.labels["engine"]] = true
			}
			return !slices.ContainsFunc(secondLife, func(eng string) bool { return !seen[eng] }), fmt.Sprintf("%s: %v", secondSel, v)
		})
		e.rulesEvaluatedAfter(t, name, time.Now())
	}
	at := time.Now()
	window := int(math.Ceil(at.Sub(began).Seconds())) + 5

	t.Run("restart in rates", func(t *testing.T) {
		for _, name := range slices.Sorted(maps.Keys(stores)) {
			checkRestartRates(t, name, stores[name], restarted.decode, restartAt, at, window, secondLife)
		}
	})
	var steady []string // the instances that did not restart
	for _, m := range members {
		if m.addr != restarted.prefill && m.addr != restarted.decode {
			steady = append(steady, m.addr)
		}
	}
	t.Run("scrape and push agree", func(t *testing.T) {
		for _, v := range versions {
			compareStores(t, "prometheus "+v, stores["scrape "+v], stores["push "+v], files, at, window, steady)
		}
	})

	// What the fleet cost the collector and the store.
	// CPU of both of the collector's lives over the time the fleet pushed;
	// bytes pushed over the same time.
	cu := usageOf(t, collector.cmd.Process.Pid)
	pushing := time.Since(pushStart)
	cpu := firstCol.cpu + cu.cpu
	series := push2.headSeries(t)
	pushed := push2.prom.scalar(t, `count({__name__=~"vllm:.+"})`, time.Now())
	t.Logf("fleet figures: instances=%d examples=%d proxies=%d interval=%s pushing=%.0fs collector_cpu_s=%.2f collector_cpu_per_min_s=%.2f "+
		"collector_rss_mib=%.1f collector_peak_rss_mib=%.1f store_head_series=%.0f vllm_series=%.0f pushed_bytes=%d pushed_bytes_per_min=%.0f",
		len(members), examples, proxies, fleetInterval, pushing.Seconds(), cpu.Seconds(), cpu.Seconds()/pushing.Minutes(),
		float64(cu.rss)/1024, float64(max(cu.hwmKB, firstCol.hwmKB))/1024,
		series, pushed, relay.sent.Load(), float64(relay.sent.Load())/pushing.Minutes())
	for _, err := range trafficErrs.take() {
		t.Errorf("traffic: %v", err)
	}
	mark("done")
}

// mustPort is the port of a host:port.
func mustPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fleetAgrees reports whether every counter and histogram series of every
// instance's final scrape is in the pushed store with its value, under the
// instance's job and instance, and no pushed series of an instance is
// missing from its scrape (but for the restarted instances, whose first
// life's series the store keeps: remote write sends no staleness marker).
func fleetAgrees(e *env, members []*fleetMember, final map[string]*scrape, zero map[string]map[string]bool, restarted ...string) (bool, string) {
	res, err := e.prom.query(`{__name__=~"vllm:.+"}`, time.Now())
	if err != nil {
		return false, err.Error()
	}
	jobOf := map[string]*fleetMember{}
	for _, m := range members {
		jobOf[m.addr] = m
	}
	got := map[string]float64{}
	var problems []string
	for _, s := range res {
		inst := s.labels["instance"]
		m := jobOf[inst]
		if m == nil {
			problems = append(problems, "a series of no instance of the fleet: "+fmt.Sprint(s.labels))
			continue
		}
		if s.labels["job"] != m.job || s.labels["namespace"] != m.namespace || s.labels["cluster"] != fleetCluster {
			problems = append(problems, fmt.Sprintf("%s: job %q namespace %q cluster %q, want %q %q %q", inst,
				s.labels["job"], s.labels["namespace"], s.labels["cluster"], m.job, m.namespace, fleetCluster))
		}
		// The instance's own scrape has no cluster label: checked above.
		s.labels = maps.Clone(s.labels)
		delete(s.labels, "cluster")
		id := inst + " " + identity(s)
		if _, dup := got[id]; dup {
			problems = append(problems, "two series "+id)
		}
		got[id] = s.value
	}
	want := map[string]float64{}
	var zeros, lingering, pushedZero int
	for inst, sc := range final {
		for id, v := range sc.cumulative() {
			if zero[inst][id] {
				zeros++
				continue // start-up zero histograms: not on OTLP
			}
			want[inst+" "+id] = v
		}
	}
	for id, v := range want {
		g, ok := got[id]
		switch {
		case !ok && v == 0:
			zeros++ // a start-up zero series: OTLP has a series from its first observation
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: %g in the scrape, not pushed", id, v))
		case !sameValue(g, v):
			problems = append(problems, fmt.Sprintf("%s: %g in the scrape, %g pushed", id, v, g))
		}
	}
	for id, v := range got {
		if _, ok := want[id]; ok || !strings.HasPrefix(id, "vllm:") && !isCumulativeID(id, final) {
			continue
		}
		if slices.ContainsFunc(restarted, func(a string) bool { return strings.HasPrefix(id, a+" ") }) {
			lingering++
			continue
		}
		if v == 0 {
			pushedZero++ // a counter the SDK exports at 0, the scrape omits
			continue
		}
		if isCumulativeID(id, final) {
			problems = append(problems, fmt.Sprintf("%s: %g pushed, not in the scrape", id, v))
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
		}
		return false, strings.Join(problems, "\n  ")
	}
	return true, fmt.Sprintf("%d counter and histogram series of %d instances equal to their scrapes (%d zero start-up samples "+
		"not pushed; %d pushed at 0 absent from the scrape; %d series of the restarted instance's first life still in the store)",
		len(want), len(final), zeros, pushedZero, lingering)
}

// isCumulativeID reports whether a pushed series (instance and identity) is
// of a counter or histogram family of the scrapes.
func isCumulativeID(id string, final map[string]*scrape) bool {
	inst, rest, _ := strings.Cut(id, " ")
	name, _, _ := strings.Cut(rest, "{")
	s := final[inst]
	if s == nil {
		return false
	}
	_, typ := s.family(name)
	return typ == "counter" || typ == "histogram"
}

// checkFleetTotals checks each family's fleet total in the store, one
// PromQL sum by name over the fleet, against the sum of the instances'
// scrapes (but the restarted instances', whose first life lingers).
func checkFleetTotals(t *testing.T, e *env, final map[string]*scrape, restarted ...string) {
	t.Helper()
	want := map[string]float64{}
	for inst, s := range final {
		if slices.Contains(restarted, inst) {
			continue
		}
		for _, se := range s.series {
			if _, typ := s.family(se.name); strings.HasPrefix(se.name, "vllm:") && typ == "counter" {
				want[se.name] += se.value
			}
		}
	}
	sel := fmt.Sprintf(`{__name__=~"vllm:.+_total", instance!~"%s"}`, strings.Join(restarted, "|"))
	got := map[string]float64{}
	for _, s := range e.prom.mustQuery(t, `sum by (__name__) (`+sel+`)`, time.Now()) {
		got[s.labels["__name__"]] = s.value
	}
	for name, v := range want {
		if !sameValue(got[name], v) {
			t.Errorf("fleet total of %s: %g in the store, %g over the instances' scrapes", name, got[name], v)
		}
	}
	t.Logf("%d counter families: the fleet's total in the store equals the sum over the instances' scrapes", len(want))
}

// checkRestartRates: on the restarted decode instance, each engine's
// vllm:generation_tokens_total resets once, and increase() over the run
// counts both lives: at least the first life's last value less its first
// plus the second life's value (rate() treats the drop as a reset). Each
// engine of secondLife (those the second life recorded tokens on) has a
// sample of it.
func checkRestartRates(t *testing.T, name string, e *env, inst string, restartAt, at time.Time, window int, secondLife []string) {
	t.Helper()
	sel := fmt.Sprintf(`vllm:generation_tokens_total{instance=%q}`, inst)
	w := fmt.Sprintf("[%ds]", window)
	// The engines the second life recorded on (the other's first-life
	// series lingers in a pushed store: no staleness marker).
	second := e.byLabelAt(t, fmt.Sprintf(`timestamp(%s) > %s`, sel, promTime(restartAt)), at)
	resets := e.byLabelAt(t, `resets(`+sel+w+`)`, at)
	incr := e.byLabelAt(t, `increase(`+sel+w+`)`, at)
	last := e.byLabelAt(t, sel, at)
	lifeW := fmt.Sprintf("[%ds]", int(restartAt.Sub(at.Add(-time.Duration(window)*time.Second)).Seconds()))
	firstMax := e.byLabelAt(t, `max_over_time(`+sel+lifeW+`)`, restartAt)
	firstMin := e.byLabelAt(t, `min_over_time(`+sel+lifeW+`)`, restartAt)
	for _, eng := range secondLife {
		if _, ok := second[eng]; !ok {
			t.Errorf("%s: %s: engine %s has no sample of the second life at %s", name, sel, eng, at.Format(time.RFC3339Nano))
		}
	}
	for eng := range second {
		r := resets[eng]
		floor := firstMax[eng] - firstMin[eng] + last[eng]
		if r != 1 || incr[eng] < floor {
			t.Errorf("%s: engine %s: resets %g (want 1), increase %g (want at least %g - %g + %g = %g)", name, eng, r, incr[eng],
				firstMax[eng], firstMin[eng], last[eng], floor)
			continue
		}
		t.Logf("%s: engine %s: first life %g..%g, second life %g: resets %g, increase over the run %.1f", name, eng,
			firstMin[eng], firstMax[eng], last[eng], r, incr[eng])
	}
}

// byLabelAt maps the samples of expr at time at by their engine label.
func (e *env) byLabelAt(t *testing.T, expr string, at time.Time) map[string]float64 {
	t.Helper()
	return e.prom.byLabel(t, expr, "engine", at)
}

// compareStores runs every recording rule and every dashboard query on the
// scraped and the pushed store at time at, and fails unless both return
// the same series (label sets) with data; it logs the largest relative
// difference of their values (rates: the two paths sample at different
// instants). The dashboard queries of instant values (no range, no
// recorded series: gauges, info series, counts) run once more on the
// instances given (all but a restarted one, whose first life's series the
// pushed store keeps without staleness markers) and must give equal
// values: after the load both paths hold each instance's last values.
func compareStores(t *testing.T, name string, scraped, pushed *env, files []mixin.File, at time.Time, window int, instances []string) {
	t.Helper()
	var recorded []string
	for l := range strings.SplitSeq(string(fileData(t, files, mixin.RecordingRulesFile)), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(l), "- record: "); ok {
			if q, err := strconv.Unquote(r); err == nil {
				r = q
			}
			recorded = append(recorded, r)
		}
	}
	exprs := slices.Clone(recorded)
	sub, subOn := dashboardVars(window), dashboardVarsFor(window, instances)
	var instant []string
	for _, f := range files {
		if !strings.HasPrefix(f.Path, dashboardDir) || !strings.HasSuffix(f.Path, ".json") || usageOnly(f.Path) {
			continue
		}
		for _, q := range boardQueries(t, f.Data) {
			exprs = append(exprs, sub.Replace(q))
			if !strings.Contains(q, "[") && strings.Contains(q, "$instance") &&
				!slices.ContainsFunc(recorded, func(r string) bool { return strings.Contains(q, r) }) {
				instant = append(instant, subOn.Replace(q))
			}
		}
	}
	slices.Sort(exprs)
	exprs = slices.Compact(exprs)
	slices.Sort(instant)
	instant = slices.Compact(instant)
	compareInstant(t, name, scraped, pushed, instant, at)
	var same, differ, empty, pushedOnly int
	worst, worstExpr := 0.0, ""
	for _, expr := range exprs {
		a, err := scraped.prom.query(expr, at)
		if err != nil {
			t.Errorf("%s scraped: %v", name, err)
			continue
		}
		b, err := pushed.prom.query(expr, at)
		if err != nil {
			t.Errorf("%s pushed: %v", name, err)
			continue
		}
		ka, kb := seriesKeys(a), seriesKeys(b)
		if len(ka) == 0 && len(kb) == 0 {
			empty++
			continue
		}
		var missing, extra []string
		for k, va := range ka {
			if _, ok := kb[k]; !ok && va != 0 && !math.IsNaN(va) {
				missing = append(missing, k)
			}
		}
		for k := range kb {
			if _, ok := ka[k]; !ok {
				extra = append(extra, k)
			}
		}
		if len(missing) > 0 {
			differ++
			slices.Sort(missing)
			t.Errorf("%s: %s: series with data scraped, not pushed: %v", name, expr, missing)
			continue
		}
		if len(extra) > 0 {
			pushedOnly++
			slices.Sort(extra)
			if len(extra) > 3 {
				extra = append(extra[:3], "...")
			}
			t.Logf("%s: %s: pushed only (the store keeps a pushed series without staleness markers): %v", name, expr, extra)
		}
		same++
		for k, va := range ka {
			vb, ok := kb[k]
			if !ok {
				continue
			}
			if d := math.Abs(va-vb) / math.Max(math.Max(math.Abs(va), math.Abs(vb)), 1e-12); d > worst && !math.IsNaN(d) {
				worst, worstExpr = d, expr
			}
		}
	}
	t.Logf("%s: %d of %d recording rules and dashboard queries return every series with data scraped also pushed (%d with series "+
		"pushed only; %d empty on both; %d differ); largest relative difference of a value %.3g (%s)",
		name, same, len(exprs), pushedOnly, empty, differ, worst, worstExpr)
}

// compareInstant fails unless every series an expression of exprs gives on
// the scraped store at time at is on the pushed store with the same value,
// and unless some series were compared. A series pushed only is logged.
func compareInstant(t *testing.T, name string, scraped, pushed *env, exprs []string, at time.Time) {
	t.Helper()
	compared := 0
	for _, expr := range exprs {
		a, errA := scraped.prom.query(expr, at)
		b, errB := pushed.prom.query(expr, at)
		if err := errors.Join(errA, errB); err != nil {
			t.Errorf("%s: %s: %v", name, expr, err)
			continue
		}
		ka, kb := seriesKeys(a), seriesKeys(b)
		for k, va := range ka {
			vb, ok := kb[k]
			switch {
			case !ok:
				t.Errorf("%s: %s: %s scraped (%g), not pushed", name, expr, k, va)
			case va != vb && !(math.IsNaN(va) && math.IsNaN(vb)):
				t.Errorf("%s: %s: %s: scraped %g, pushed %g", name, expr, k, va, vb)
			default:
				compared++
			}
		}
		for k, vb := range kb {
			if _, ok := ka[k]; !ok {
				t.Logf("%s: %s: %s pushed only (%g): a series that went away, which the pushed store keeps without staleness markers", name, expr, k, vb)
			}
		}
	}
	if compared == 0 {
		t.Errorf("%s: the %d instant dashboard queries compared no series", name, len(exprs))
	}
	t.Logf("%s: %d instant dashboard queries give equal values scraped and pushed (%d series)", name, len(exprs), compared)
}

// seriesKeys maps a result's series by their label sets, le normalised
// (the remote-write exporter writes le="1" where a scrape has le="1.0").
func seriesKeys(v []series) map[string]float64 {
	m := map[string]float64{}
	for _, s := range v {
		keys := slices.Sorted(maps.Keys(s.labels))
		var b strings.Builder
		for _, k := range keys {
			val := s.labels[k]
			if f, err := strconv.ParseFloat(val, 64); err == nil && k == "le" {
				val = strconv.FormatFloat(f, 'g', -1, 64)
			}
			fmt.Fprintf(&b, "%s=%q,", k, val)
		}
		m[b.String()] = s.value
	}
	return m
}

// boardQueries are a generated dashboard's panel queries.
func boardQueries(t *testing.T, raw []byte) []string {
	t.Helper()
	var b scopedBoard
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range b.queries() {
		out = append(out, q.expr)
	}
	return out
}

// headSeries is the series in the store's head block (/api/v1/status/tsdb).
func (e *env) headSeries(t *testing.T) float64 {
	t.Helper()
	b, err := httpGet(e.prom.base + "/api/v1/status/tsdb")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Data struct {
			HeadStats struct {
				NumSeries float64 `json:"numSeries"`
			} `json:"headStats"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("/api/v1/status/tsdb: %v: %s", err, b)
	}
	return r.Data.HeadStats.NumSeries
}
