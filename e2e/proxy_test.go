package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// proxyModel is the example's default served model name (example/pd -model).
const proxyModel = "meta-llama/Llama-3.1-8B-Instruct"

// proxyFamilies are the vLLM families cmd/infermetrics-proxy records (it
// sees requests, not engine steps), and the HTTP families of vLLM's API
// server (openaihttp.WithHTTPMetrics): an expression of vLLM's dashboards
// that names only these must return data from the proxy alone.
var proxyFamilies = []string{
	"vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
	"vllm:prompt_tokens_by_source_total", "vllm:prompt_tokens_cached_total",
	"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
	"vllm:request_time_per_output_token_seconds", "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
	"vllm:request_params_n", "vllm:request_params_max_tokens", "vllm:num_requests_running", "vllm:num_requests_waiting",
	"http_requests_total", "http_request_duration_seconds", "http_request_duration_highr_seconds",
}

// permID is a model permission's id in a /v1/models answer, random per answer.
var permID = regexp.MustCompile(`"modelperm-[A-Za-z0-9]+"`)

var vllmFamily = regexp.MustCompile(`vllm:[a-z_:]+|\bhttp_[a-z_]+`)

// proxyCanFill reports an expression whose every vllm: and http_ family the
// proxy records (and that names at least one).
func proxyCanFill(expr string) bool {
	names := vllmFamily.FindAllString(expr, -1)
	if len(names) == 0 {
		return false
	}
	for _, n := range names {
		ok := false
		for _, f := range proxyFamilies {
			ok = ok || n == f || strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count") == f
		}
		if !ok {
			return false
		}
	}
	return true
}

// buildProxy builds cmd/infermetrics-proxy from the repository root.
func buildProxy(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "infermetrics-proxy")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/infermetrics-proxy")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/infermetrics-proxy: %v\n%s", err, out)
	}
	return bin
}

// clientUsage adds up the usage the clients received.
type clientUsage struct {
	mu                 sync.Mutex
	requests           int
	prompt, completion int64
}

func (c *clientUsage) add(prompt, completion int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	c.prompt += prompt
	c.completion += completion
}

// TestProxy runs the proxy binary in front of the example's prefill
// instance (its generated load off) with -include-usage, drives it with curl
// and the official OpenAI and Anthropic Go clients, and checks on the real Prometheus,
// which scrapes the proxy and the instances: the proxy's token counts equal
// the clients' usage; streams whose clients did not ask for usage reach
// them without a usage chunk and are counted all the same (the proxy's
// totals equal the instance's); a path the proxy does not record passes
// through as the instance answers it; every expression of vLLM's
// dashboards that names only families a proxy can fill returns data for
// the proxy's target; SIGTERM lets a stream in flight finish, then the
// proxy exits 0.
func TestProxy(t *testing.T) {
	tl := needTools(t)
	curl, err := exec.LookPath("curl")
	if err != nil {
		msg := "e2e: curl missing: the proxy test drives the proxy with curl -N"
		if required() {
			t.Fatal(msg + " (E2E_REQUIRED=1: a missing binary is a failure)")
		}
		t.Skip(msg)
	}
	began := time.Now()
	e := &env{tools: tl, work: t.TempDir()}
	ports := distinctPorts(t, 7)
	promPort, otlpPort := ports[0], ports[1]
	prefillAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	decodeAddr := fmt.Sprintf("127.0.0.1:%d", ports[3])
	proxyAddr := fmt.Sprintf("127.0.0.1:%d", ports[4])
	proxyMetrics := fmt.Sprintf("127.0.0.1:%d", ports[5])
	// The proxy reaches the instance through a relay that can hold the
	// answers (phase 3).
	relay := startRelay(t, fmt.Sprintf("127.0.0.1:%d", ports[6]), prefillAddr)
	e.startPrometheus(t, promPort, prefillAddr, decodeAddr, proxyMetrics)
	e.startCollector(t, otlpPort, promPort)
	pd := buildExample(t, e.work)
	bin := buildProxy(t, e.work)
	e.startExample(t, pd, prefillAddr, decodeAddr, fmt.Sprintf("127.0.0.1:%d", otlpPort), "-workload=false", "-corrupt", "0")
	proxy := startProc(t, e.work, "proxy", append(childEnv(),
		"INFERMETRICS_PROXY_LISTEN="+proxyAddr, // the environment form of -listen
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", otlpPort),
		"OTEL_METRIC_EXPORT_INTERVAL=1000"),
		// -default-model the served model's name: the proxy's series (the HTTP
		// families on -default-model's Engine) then name one model, as
		// vLLM's dashboards expect of an instance.
		bin, "-upstream", "http://"+relay.ln.Addr().String(), "-metrics-listen", proxyMetrics, "-include-usage", "-default-model", proxyModel,
		"-log-format", "json", "-instance-id", "proxy-0", "-shutdown-timeout", "60s")
	poll(t, 30*time.Second, "the proxy's /health", func() (bool, string) {
		proxy.alive(t)
		b, err := httpGet("http://" + proxyMetrics + "/health")
		return err == nil && string(b) == "ok\n", fmt.Sprintf("%q %v", b, err)
	})
	e.urls["proxy"] = "http://" + proxyMetrics + "/metrics"
	base := "http://" + proxyAddr

	// 1. Clients that get usage: curl streams asking for it, the OpenAI
	// client streaming with IncludeUsage, and not streaming (chat and
	// completions), the Anthropic client (Messages, streamed and not: no
	// stream_options, passed through as sent).
	var got clientUsage
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"question %d %s"}],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`,
				proxyModel, i, strings.Repeat("context ", 10*i), 8+4*i)
			r := runCurl(curl, base+"/v1/chat/completions", body, false)
			if r.exitErr != nil || !r.done || r.usage == nil {
				t.Errorf("curl %d: %v (%s), [DONE] %v, usage %+v", i, r.exitErr, r.stderr, r.done, r.usage)
				return
			}
			got.add(r.usage.PromptTokens, r.usage.CompletionTokens)
		})
	}
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"))
	ctx := context.Background()
	for i := range 3 {
		wg.Go(func() {
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:         proxyModel,
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("stream %d", i))},
				MaxTokens:     openai.Int(int64(12 + i)),
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			})
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil || acc.Usage.CompletionTokens == 0 {
				t.Errorf("openai stream %d: %v, usage %+v", i, err, acc.Usage)
				return
			}
			got.add(acc.Usage.PromptTokens, acc.Usage.CompletionTokens)
		})
		wg.Go(func() {
			c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:     proxyModel,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("chat %d", i))},
				MaxTokens: openai.Int(int64(10 + i)),
			})
			if err != nil || c.Usage.CompletionTokens == 0 {
				t.Errorf("openai chat %d: %v", i, err)
				return
			}
			got.add(c.Usage.PromptTokens, c.Usage.CompletionTokens)
		})
		wg.Go(func() {
			c, err := client.Completions.New(ctx, openai.CompletionNewParams{
				Model:     openai.CompletionNewParamsModel(proxyModel),
				Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(fmt.Sprintf("once upon a time %d", i))},
				MaxTokens: openai.Int(int64(9 + i)),
			})
			if err != nil || c.Usage.CompletionTokens == 0 {
				t.Errorf("openai completion %d: %v", i, err)
				return
			}
			got.add(c.Usage.PromptTokens, c.Usage.CompletionTokens)
		})
	}
	an := anthropic.NewClient(anthropicopt.WithBaseURL(base+"/"), anthropicopt.WithAPIKey("unused"), anthropicopt.WithMaxRetries(0))
	msg := func(i int) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: proxyModel, MaxTokens: int64(5 + i),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("anthropic %d", i)))}}
	}
	// The prompt is input_tokens + cache_read_input_tokens +
	// cache_creation_input_tokens (Anthropic's input_tokens is the uncached
	// part).
	addMessage := func(m anthropic.Message) {
		u := m.Usage
		got.add(u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens, u.OutputTokens)
	}
	for i := range 2 {
		wg.Go(func() {
			stream := an.Messages.NewStreaming(ctx, msg(i))
			var m anthropic.Message
			for stream.Next() {
				if err := m.Accumulate(stream.Current()); err != nil {
					t.Errorf("anthropic stream %d: %v", i, err)
					return
				}
			}
			if err := stream.Err(); err != nil || m.Usage.OutputTokens == 0 {
				t.Errorf("anthropic stream %d: %v, usage %+v", i, err, m.Usage)
				return
			}
			addMessage(m)
		})
		wg.Go(func() {
			m, err := an.Messages.New(ctx, msg(10+i))
			if err != nil || m.Usage.OutputTokens == 0 {
				t.Errorf("anthropic message %d: %v", i, err)
				return
			}
			addMessage(*m)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("[%5.1fs] %d requests through the proxy: usage prompt_tokens %d, completion_tokens %d",
		time.Since(began).Seconds(), got.requests, got.prompt, got.completion)
	at := e.settled(t)
	q := func(expr string) float64 { return e.prom.scalar(t, expr, at) }
	proxySel := fmt.Sprintf(`instance=%q`, proxyMetrics)
	prefillSel := fmt.Sprintf(`instance=%q`, prefillAddr)
	for _, c := range []struct {
		expr string
		want float64
	}{
		{`sum(vllm:generation_tokens_total{` + proxySel + `})`, float64(got.completion)},
		{`sum(vllm:prompt_tokens_total{` + proxySel + `})`, float64(got.prompt)},
		{`sum(vllm:request_success_total{` + proxySel + `})`, float64(got.requests)},
		{`sum(vllm:request_success_total{` + proxySel + `, model_name="` + proxyModel + `"})`, float64(got.requests)},
		{`sum(vllm:generation_tokens_total{` + prefillSel + `})`, float64(got.completion)},
	} {
		if v := q(c.expr); v != c.want {
			t.Errorf("%s = %v, want %v (the clients' usage)", c.expr, v, c.want)
		}
	}

	// 2. Streams whose clients did not ask for usage: no usage chunk
	// reaches them, and the proxy counts their tokens all the same.
	for i := range 3 {
		r := runCurl(curl, base+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"no usage %d"}],"max_tokens":%d,"stream":true}`,
			proxyModel, i, 6+i), false)
		if r.exitErr != nil || !r.done || !r.content || r.usage != nil {
			t.Errorf("curl without usage %d: %v (%s), [DONE] %v, content %v, usage %+v: want a whole stream without usage", i, r.exitErr, r.stderr, r.done, r.content, r.usage)
		}
	}
	// A path the proxy does not record passes through as the instance
	// answers it.
	for _, path := range []string{"/v1/models", "/health", "/no/such/path"} {
		direct, derr := rawGet("http://" + prefillAddr + path)
		proxied, perr := rawGet(base + path)
		// The instance draws a new permission id for each /v1/models.
		direct, proxied = permID.ReplaceAll(direct, nil), permID.ReplaceAll(proxied, nil)
		if derr != nil || perr != nil || !bytes.Equal(direct, proxied) {
			t.Errorf("GET %s: direct %q (%v), through the proxy %q (%v)", path, direct, derr, proxied, perr)
		}
	}
	at = e.settled(t)
	for _, name := range []string{"vllm:generation_tokens_total", "vllm:prompt_tokens_total"} {
		p, i := q(`sum(`+name+`{`+proxySel+`})`), q(`sum(`+name+`{`+prefillSel+`})`)
		if p != i || p <= float64(got.completion) && name == "vllm:generation_tokens_total" {
			t.Errorf("%s: proxy %v, instance %v: want equal, and above the %d of phase 1", name, p, i, got.completion)
		}
	}
	// Every request served, on every path, in the HTTP families, by its
	// route's pattern: the LLM endpoints' posts above, and the GETs, which
	// match no route of the proxy's (none).
	for _, c := range []struct {
		sel  string
		want float64
	}{
		{`handler="/v1/chat/completions", method="POST", status="2xx"`, 6 + 3 + 3 + 3}, // curl, OpenAI streams, OpenAI chats; phase 2's curl
		{`handler="/v1/completions", method="POST", status="2xx"`, 3},
		{`handler="/v1/messages", method="POST", status="2xx"`, 4},
		{`handler="none", method="GET", status="2xx"`, 1}, // /v1/models
		{`handler="none", method="GET", status="4xx"`, 2}, // /health (the instance serves none) and /no/such/path
	} {
		expr := `sum(http_requests_total{` + proxySel + `, ` + c.sel + `})`
		if v := q(expr); v != c.want {
			t.Errorf("%s = %v, want %v", expr, v, c.want)
		}
	}
	genTotal := q(`sum(vllm:generation_tokens_total{` + proxySel + `})`)
	if v := q(`sum(vllm:request_success_total{` + proxySel + `})`); v != float64(got.requests+3) { // the OpenAI and Anthropic clients' and curl's
		t.Errorf("requests %v, want %d", v, got.requests+3)
	}

	// The proxy's series reach Prometheus over OTLP too (the collector's
	// remote write makes service.instance.id the instance label).
	otlp := `sum(vllm:generation_tokens_total{path="otlp",instance="proxy-0"})`
	poll(t, 30*time.Second, "the proxy's series over OTLP", func() (bool, string) {
		v, err := e.prom.query(otlp, time.Now())
		if err != nil {
			return false, err.Error()
		}
		return len(v) == 1 && v[0].value == genTotal, fmt.Sprintf("%s: %v, want %v", otlp, v, genTotal)
	})

	// 3. A stream in flight, while Prometheus scrapes the proxy (so that
	// the panels over vllm:num_requests_running see a request), then at
	// SIGTERM: the relay holds what the instance answers until after the
	// signal, so the stream is in flight then however slow the machine.
	relay.gate.hold()
	done := make(chan streamResult, 1)
	go func() {
		done <- runCurl(curl, base+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"a long one"}],"max_tokens":200,"ignore_eos":true,"stream":true}`, proxyModel), false)
	}()
	poll(t, 30*time.Second, "the held stream running at the proxy", func() (bool, string) {
		s, err := fetchScrape(e.urls["proxy"])
		if err != nil {
			return false, err.Error()
		}
		v, _ := s.sum("vllm:num_requests_running")
		return v == 1, fmt.Sprintf("running %v", v)
	})
	running := `max_over_time(vllm:num_requests_running{` + proxySel + `}[1m])`
	poll(t, time.Minute, "prometheus scraping the proxy with the stream running", func() (bool, string) {
		v, err := e.prom.query(running, time.Now())
		return err == nil && len(v) == 1 && v[0].value >= 1, fmt.Sprintf("%s: %v %v", running, v, err)
	})
	at = time.Now()
	if s, err := fetchScrape(e.urls["proxy"]); err != nil {
		t.Fatal(err)
	} else if v, _ := s.sum("vllm:num_requests_running"); v != 1 {
		t.Fatalf("the held stream ended before SIGTERM (running %v)", v)
	}

	// 4. SIGTERM with the stream in flight, then its answer let through:
	// it finishes, then the proxy exits 0.
	if err := proxy.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	relay.gate.release()
	r := <-done
	if r.exitErr != nil || !r.done || len(r.finishes) == 0 || r.finishes[len(r.finishes)-1] != "length" {
		t.Errorf("the stream in flight at SIGTERM: %v (%s), [DONE] %v, finishes %v: want it whole", r.exitErr, r.stderr, r.done, r.finishes)
	}
	err, ok := proxy.wait(30 * time.Second)
	if !ok || err != nil {
		t.Errorf("proxy after SIGTERM: exited %v, %v; want exit 0", ok, err)
	}

	// 5. vLLM's dashboards, for the proxy's target only, at the time
	// Prometheus had scraped it with the stream running.
	window := int(at.Sub(began).Seconds()) + 30
	substitute := dashboardVars(window)
	var filled, tried int
	for _, x := range readVLLMDashboards(t) {
		if !proxyCanFill(x.expr) {
			continue
		}
		tried++
		expr := substitute.Replace(strings.ReplaceAll(x.expr, "$instance", proxyMetrics))
		result, err := e.dashboardQuery(expr, at)
		n := 0
		for _, s := range result {
			if !math.IsNaN(s.value) {
				n++
			}
		}
		switch {
		case err != nil:
			t.Errorf("%s:%d: %v", vllmDashboardsFile, x.line, err)
		case n == 0:
			t.Errorf("%s:%d (%s): no data from the proxy: %s", vllmDashboardsFile, x.line, x.file, x.expr)
		default:
			filled++
		}
	}
	t.Logf("vLLM's dashboards: %d expressions name only families the proxy records; %d return data from it", tried, filled)
	if tried < 20 {
		t.Errorf("only %d expressions of vLLM's dashboards apply to the proxy", tried)
	}
	logs, _ := os.ReadFile(proxy.stdout)
	for _, want := range []string{`"msg":"draining"`, `"msg":"stopped"`} {
		if !bytes.Contains(logs, []byte(want)) {
			t.Errorf("proxy logs lack %s", want)
		}
	}
	t.Logf("[%5.1fs] done", time.Since(began).Seconds())
}

// rawGet returns the status line and body of a GET.
func rawGet(u string) ([]byte, error) {
	resp, err := httpClient.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %s\n", resp.StatusCode, resp.Header.Get("Content-Type"))
	_, err = b.ReadFrom(resp.Body)
	return b.Bytes(), err
}
