package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The router test's client load: streamed chat completions through the
// router, routerConcurrency at a time.
const (
	routerRequests    = 20
	routerConcurrency = 4
)

var routerLine = regexp.MustCompile(`(?m)^router metrics: (http://\S+)$`)

// streamResult is what one curl client saw of a streamed completion.
type streamResult struct {
	ttft     time.Duration // from starting curl to its first content chunk
	content  bool          // a content chunk came
	done     bool          // data: [DONE] came
	usage    *usage
	exitErr  error
	stderr   string
	finishes []string
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	Details          *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// TestRouterClients runs the example with its generated load off, so that
// only API clients move it, and drives its P/D router with curl -N:
// routerRequests streamed chat completions with usage, some at once, then
// one client that hangs up mid-stream. On the real Prometheus, which
// scrapes prefill, decode and the router: the tokens of the usage the
// clients got are the router's, prompt tokens counted once per request;
// the router's TTFT is at least its prefill legs plus handoffs (and at most
// what the clients measured); the router's external_kv_transfer is the
// decode instance's external_kv_transfer plus local_cache_hit; the
// hung-up client is an abort at the router and on the decode instance.
func TestRouterClients(t *testing.T) {
	tl := needTools(t)
	curl, err := exec.LookPath("curl")
	if err != nil {
		msg := "e2e: curl missing: the router test drives the router with curl -N"
		if required() {
			t.Fatal(msg + " (E2E_REQUIRED=1: a missing binary is a failure)")
		}
		t.Skip(msg)
	}
	began := time.Now()
	e, routerAddr := startRouterDeployment(t, tl)
	api := "http://" + routerAddr + "/v1/chat/completions"

	// 1. Streamed chat completions with usage, routerConcurrency at once.
	results := make([]streamResult, routerRequests)
	var wg sync.WaitGroup
	slots := make(chan struct{}, routerConcurrency)
	for i := range results {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			body := fmt.Sprintf(`{"messages":[{"role":"system","content":%q},{"role":"user","content":"question %d"}],`+
				`"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`,
				strings.Repeat("context ", 20+37*i), i, 10+5*i)
			results[i] = runCurl(curl, api, body, false)
		})
	}
	wg.Wait()
	var prompt, completion, cached int64
	var clientTTFT time.Duration
	for i, r := range results {
		if r.exitErr != nil || !r.done || !r.content || r.usage == nil || r.usage.Details == nil {
			t.Fatalf("request %d: curl %v (%s), content %v, [DONE] %v, usage %+v: want a whole stream with usage",
				i, r.exitErr, r.stderr, r.content, r.done, r.usage)
		}
		prompt += r.usage.PromptTokens
		completion += r.usage.CompletionTokens
		cached += r.usage.Details.CachedTokens
		clientTTFT += r.ttft
	}
	t.Logf("[%5.1fs] %d streams through the router: usage prompt_tokens %d, completion_tokens %d, cached_tokens %d; client TTFT sum %.3fs",
		time.Since(began).Seconds(), routerRequests, prompt, completion, cached, clientTTFT.Seconds())

	at := e.settled(t)
	q := func(expr string) float64 { return e.prom.scalar(t, expr, at) }
	// (a) The usage's tokens are the router's, the prompt counted once per
	// request (each instance counts it once too, for its own leg).
	for _, c := range []struct {
		expr string
		want int64
	}{
		{`sum(vllm:generation_tokens_total{path="direct",role="router"})`, completion},
		{`sum(vllm:prompt_tokens_total{path="direct",role="router"})`, prompt},
		{`sum(vllm:prompt_tokens_total{path="direct",role="prefill"})`, prompt},
		{`sum(vllm:prompt_tokens_total{path="direct",role="decode"})`, prompt},
		{`sum(vllm:request_success_total{path="direct",role="router"})`, routerRequests},
	} {
		if got := q(c.expr); got != float64(c.want) {
			t.Errorf("%s = %v, want %d (from the clients' usage)", c.expr, got, c.want)
		}
	}
	// (b) The client-visible TTFT holds the prefill leg and the handoff.
	ttft := q(`sum(vllm:time_to_first_token_seconds_sum{path="direct",role="router"})`)
	prefillLegs := q(`sum(router_pd_prefill_leg_duration_seconds_sum{path="direct",role="router"})`)
	handoffs := q(`sum(router_pd_handoff_duration_seconds_sum{path="direct",role="router"})`)
	decodeTTFC := q(`sum(router_pd_decode_leg_time_to_first_chunk_seconds_sum{path="direct",role="router"})`)
	t.Logf("router sums: TTFT %.4fs, prefill legs %.4fs, handoffs %.4fs, decode legs' first chunk %.4fs; clients' TTFT %.4fs",
		ttft, prefillLegs, handoffs, decodeTTFC, clientTTFT.Seconds())
	if ttft < prefillLegs+handoffs+decodeTTFC {
		t.Errorf("router TTFT sum %vs < prefill legs %vs + handoffs %vs + decode legs' first chunk %vs", ttft, prefillLegs, handoffs, decodeTTFC)
	}
	if ttft > clientTTFT.Seconds() {
		t.Errorf("router TTFT sum %vs > the %vs the clients measured", ttft, clientTTFT.Seconds())
	}
	for _, name := range []string{"vllm:time_to_first_token_seconds_count", "router_pd_prefill_leg_duration_seconds_count",
		"router_pd_handoff_duration_seconds_count"} {
		if got := q(fmt.Sprintf(`sum(%s{path="direct",role="router"})`, name)); got != routerRequests {
			t.Errorf("sum(%s) = %v, want %d", name, got, routerRequests)
		}
	}
	// (c) The router's external_kv_transfer is the decode leg's
	// cached_tokens: the decode instance's external_kv_transfer plus its
	// local_cache_hit (none here: every system prompt differs).
	router := e.prom.byLabel(t, `sum by (source) (vllm:prompt_tokens_by_source_total{path="direct",role="router"})`, "source", at)
	decode := e.prom.byLabel(t, `sum by (source) (vllm:prompt_tokens_by_source_total{path="direct",role="decode"})`, "source", at)
	t.Logf("prompt tokens by source: router %v, decode %v", router, decode)
	if want := decode["external_kv_transfer"] + decode["local_cache_hit"]; router["external_kv_transfer"] != want || want != float64(cached) {
		t.Errorf("external_kv_transfer: router %v, decode external_kv_transfer + local_cache_hit %v, clients' cached_tokens %d: want all equal",
			router["external_kv_transfer"], want, cached)
	}
	if router["local_cache_hit"] != 0 || router["local_compute"] != decode["local_compute"] {
		t.Errorf("router local_cache_hit = %v, local_compute %v (decode %v): want 0, the decode instance's", router["local_cache_hit"],
			router["local_compute"], decode["local_compute"])
	}

	// 2. A client that hangs up mid-stream.
	hung := runCurl(curl, api, `{"messages":[{"role":"user","content":"a long story"}],"max_tokens":4000,"ignore_eos":true,"stream":true}`, true)
	if !hung.content || hung.done || hung.exitErr == nil {
		t.Fatalf("hang-up client: content %v, [DONE] %v, curl %v: want a stream left after its first chunks", hung.content, hung.done, hung.exitErr)
	}
	at = e.settled(t)
	// (d) An abort at the router and on the decode instance, no tokens
	// invented at the router (its client got no usage).
	for _, c := range []struct {
		expr string
		want float64
	}{
		{`sum(vllm:request_success_total{path="direct",role="router",finished_reason="abort"})`, 1},
		{`sum(vllm:request_success_total{path="direct",role="decode",finished_reason="abort"})`, 1},
		{`sum(vllm:request_success_total{path="direct",role="router"})`, routerRequests + 1},
		{`sum(vllm:generation_tokens_total{path="direct",role="router"})`, float64(completion)},
		{`sum(vllm:prompt_tokens_total{path="direct",role="router"})`, float64(prompt)},
	} {
		if got := q(c.expr); got != c.want {
			t.Errorf("after the hang-up: %s = %v, want %v", c.expr, got, c.want)
		}
	}
	t.Logf("hang-up client: first content chunk after %.3fs, curl: %v", hung.ttft.Seconds(), hung.exitErr)
	// The router pushes OTLP with the instances' settings: its series reach
	// Prometheus through the collector too (path=otlp), with the same count.
	otlp := `sum(vllm:generation_tokens_total{path="otlp",role="router"})`
	poll(t, 30*time.Second, "the router's series over OTLP", func() (bool, string) {
		v, err := e.prom.query(otlp, time.Now())
		if err != nil {
			return false, err.Error()
		}
		return len(v) == 1 && v[0].value == float64(completion), fmt.Sprintf("%s: %v, want %d", otlp, v, completion)
	})
	t.Logf("[%5.1fs] done", time.Since(began).Seconds())
}

// startRouterDeployment starts Prometheus (scraping prefill, decode and
// the router), the collector and the example with its generated load off
// and no corrupted requests (the clients' requests are all there is, and
// each ends as its client saw it), and returns the env, the router in its
// urls, and the router's address.
func startRouterDeployment(t *testing.T, tl tools) (*env, string) {
	t.Helper()
	e := &env{tools: tl, work: t.TempDir()}
	ports := distinctPorts(t, 5)
	promPort, otlpPort := ports[0], ports[1]
	prefillAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	decodeAddr := fmt.Sprintf("127.0.0.1:%d", ports[3])
	routerAddr := fmt.Sprintf("127.0.0.1:%d", ports[4])
	e.startPrometheus(t, promPort, prefillAddr, decodeAddr, routerAddr)
	e.startCollector(t, otlpPort, promPort)
	pd := buildExample(t, e.work)
	e.startExample(t, pd, prefillAddr, decodeAddr, fmt.Sprintf("127.0.0.1:%d", otlpPort),
		"-workload=false", "-router-listen", routerAddr, "-corrupt", "0")
	e.addRouter(t, routerAddr)
	return e, routerAddr
}

// addRouter adds the router of the started example, which listens on
// routerAddr (its -router-listen), to e.urls.
func (e *env) addRouter(t *testing.T, routerAddr string) {
	t.Helper()
	// The example prints the router's line after the instances' lines,
	// which startExample waited for: poll for it too.
	want := "http://" + routerAddr + "/metrics"
	poll(t, 30*time.Second, "the example printing its router's /metrics URL", func() (bool, string) {
		e.example.alive(t)
		b, _ := os.ReadFile(e.example.stdout)
		m := routerLine.FindSubmatch(b)
		return m != nil, fmt.Sprintf("stdout so far: %q", b)
	})
	b, _ := os.ReadFile(e.example.stdout)
	if got := string(routerLine.FindSubmatch(b)[1]); got != want {
		t.Fatalf("router metrics URL %q, want %q", got, want)
	}
	e.urls["router"] = want
}

// settled waits until every server is idle with its counters still (see
// waitQuiet), then until Prometheus scraped every target after that, and
// returns the time to query at.
func (e *env) settled(t *testing.T) time.Time {
	t.Helper()
	waitQuietURLs(t, e.urls, func() (bool, string) { return true, "" }, time.Minute, func() { e.example.alive(t) }) // no generated load
	return e.scrapedAfter(t, time.Now())
}

// scrapedAfter waits until Prometheus scraped every target of e.urls after
// t0, and returns the time to query at.
func (e *env) scrapedAfter(t *testing.T, t0 time.Time) time.Time {
	t.Helper()
	var at time.Time
	// A scrape that failed (timed out on a loaded machine) has a time too,
	// and leaves the series stale: only a successful one counts.
	poll(t, time.Minute, "prometheus scraping every target after the load", func() (bool, string) {
		at = time.Now()
		v, err := e.prom.query(`timestamp(up{path="direct"} == 1)`, at)
		if err != nil {
			return false, err.Error()
		}
		if len(v) != len(e.urls) {
			return false, fmt.Sprintf("%d of %d targets", len(v), len(e.urls))
		}
		for _, s := range v {
			if s.value < float64(t0.UnixMilli())/1000 {
				return false, fmt.Sprintf("%s last scraped before the load was over", s.labels["instance"])
			}
		}
		return true, ""
	})
	return at
}

// runCurl streams one completion with curl -N and reads its SSE output as
// it comes; with hangUp the client leaves (curl is killed) on its first
// content chunk, mid-stream of a long answer whatever the time it took.
func runCurl(curl, url, body string, hangUp bool) streamResult {
	args := []string{"-sS", "-N", "-H", "Content-Type: application/json", "-d", body}
	cmd := exec.Command(curl, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return streamResult{exitErr: err}
	}
	var r streamResult
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return streamResult{exitErr: err}
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			r.done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			r.exitErr = errors.Join(r.exitErr, fmt.Errorf("chunk %q: %w", data, err))
			continue
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" && !r.content {
				r.content, r.ttft = true, time.Since(start)
				if hangUp {
					_ = cmd.Process.Kill()
				}
			}
			if ch.Finish != nil {
				r.finishes = append(r.finishes, *ch.Finish)
			}
		}
		if c.Usage != nil {
			r.usage = c.Usage
		}
	}
	r.exitErr = errors.Join(r.exitErr, cmd.Wait())
	r.stderr = stderr.String()
	return r
}
