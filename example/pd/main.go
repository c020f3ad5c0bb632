// Command pd simulates a prefill/decode disaggregated LLM deployment in one
// process and exports its vLLM-compatible metrics through infermetrics.
//
// A prefill instance computes every prompt (with prefix-cache hits on shared
// system prompts) and hands the KV over to a decode instance with several
// data-parallel engines, which counts those tokens as external_kv_transfer
// and decodes. Each instance has its own MeterProvider, /metrics endpoint on
// 127.0.0.1 and service.instance.id, logs vLLM's periodic stats line, and
// pushes OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or -otlp-endpoint) is set.
//
// Each instance also serves an OpenAI-compatible API beside /metrics
// (POST /v1/chat/completions and /v1/completions, streamed or not,
// Anthropic's POST /v1/messages, GET /v1/models), and a P/D router on a
// third listener sends each client request to the prefill instance and
// then to the decode instance as vLLM's disaggregated serving proxy does.
// The router has its own MeterProvider, /metrics and front-end Recorder,
// fed by package openaihttp (its handler and its legs' transport): what
// its clients saw, and each leg. The instances and the router record every
// request but /metrics in the HTTP families of vLLM's API server
// (httpmetrics.go). API requests run on the same simulated engines as the
// generated workload, which -workload=false turns off.
//
// Some generated requests carry images, which each engine's multimodal cache
// may hold; the prefill instance's host-memory KV tier skips the blocks
// offered once (a store threshold of 2) and its engines sleep when idle
// after a load, timed as sleep mode operations; the decode instance's
// engines offload finished requests' KV through a SimpleCPUOffloadConnector,
// and a reinforcement learning trainer pushes it new weights while it
// generates (-vllm-version adds the families of an older vLLM).
//
// The simulated engines only drive stats.Timeline per request and the
// Recorder per step: no metric is set directly.
//
// Fault flags (faults.go) inject what each alert of mixin/ pages on: a
// stuck engine (-stuck-engine), slow steps (-slow-prefill, -slow-decode), a
// small KV cache (-decode-kv-tokens), few running requests (-max-num-seqs),
// preemptions (-preempt-every),
// a slow P/D handoff (-handoff-delay), API requests answered 503
// (-http-5xx), events the Recorder refuses (-invalid-events), a small
// cardinality limit (-cardinality-limit), a decode instance that stops
// answering (-decode-down-after) and usage with more cached tokens than
// the prompt (-cached-excess); -corrupt, clients that stop and a restart
// cause the others.
//
//	go run ./example/pd
//	curl -s http://127.0.0.1:9401/metrics | grep iteration_tokens
//	curl -N http://127.0.0.1:9402/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}'
//	curl -s http://127.0.0.1:9402/metrics | grep router_pd
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/views"
)

const maxModelLen = 8192

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pd:", err)
		os.Exit(1)
	}
}

func run() error {
	prefillAddr := flag.String("prefill-listen", "127.0.0.1:9400", "listen address of the prefill instance's /metrics")
	decodeAddr := flag.String("decode-listen", "127.0.0.1:9401", "listen address of the decode instance's /metrics")
	routerAddr := flag.String("router-listen", "127.0.0.1:9402", "listen address of the P/D router's OpenAI-compatible API and /metrics (empty: no router)")
	workload := flag.Bool("workload", true, "generate requests at -rate; false: only API clients drive the deployment")
	model := flag.String("model", "meta-llama/Llama-3.1-8B-Instruct", "served model name")
	rate := flag.Float64("rate", 8, "requests per second")
	duration := flag.Duration("duration", 0, "how long to send requests (0: until interrupted); afterwards the instances drain and keep serving /metrics until interrupted")
	idle := flag.Duration("idle", 0, "how long to serve /metrics before sending the first request, to scrape freshly started instances")
	startOnSignal := flag.Bool("start-on-signal", false, "send the first request only once SIGUSR1 comes (after -idle): a test starts the load once it has scraped the freshly started instances, however slow the machine")
	seed := flag.Uint64("seed", 1, "random seed of the workload")
	decodeEngines := flag.Int("decode-engines", 2, "data-parallel engines of the decode instance")
	logInterval := flag.Duration("log-interval", 10*time.Second, "interval of the stats log line")
	otlpEndpoint := flag.String("otlp-endpoint", "", "OTLP collector host:port, insecure (default: from OTEL_EXPORTER_OTLP_ENDPOINT)")
	otlpProtocol := flag.String("otlp-protocol", string(exporters.ProtocolGRPC), "OTLP protocol of -otlp-endpoint: grpc (port 4317) or http/protobuf (port 4318)")
	otlpInterval := flag.Duration("otlp-interval", 0, "OTLP export interval (default: OTEL_METRIC_EXPORT_INTERVAL or 60s)")
	serviceName := flag.String("service-name", "infermetrics-example", "service.name of every server (OTLP: the job label the collector's remote write gives)")
	instanceID := flag.String("instance-id", "role", "service.instance.id of each server: role (<role>-0) or listen (its listen address, the instance label a scrape of it has), so that many examples pushing to one collector stay apart")
	priority := flag.Bool("priority", true, "priority scheduling: requests get priorities -2 to 2 and the finished-request families a priority label")
	kvOffload := flag.Bool("kv-offload", true, "a host-memory KV offload tier on the prefill instance (vllm:kv_offload_* families)")
	lora := flag.Bool("lora", true, "LoRA adapters: 40% of requests name sql-lora, chat-lora or code-lora, max_loras 4 (vllm:lora_requests_info)")
	specDecode := flag.Int("spec-decode", 3, "draft tokens per step of speculative decoding on the decode instance (vllm:spec_decode_* families); 0: off")
	sleepAfter := flag.Duration("sleep-after", 2*time.Second, "idle time after serving requests at which the prefill engines sleep (level 1, vllm:engine_sleep_state) until requests come again; 0: never")
	corrupt := flag.Float64("corrupt", 0.005, "share of requests the decode instance finds corrupted (NaN logits) and finishes with an error (vllm:corrupted_requests_total); 0: none")
	multimodal := flag.Float64("multimodal", 0.25, "share of generated requests that carry images, which each engine's multimodal cache may hold (vllm:mm_cache_*); 0: none")
	simpleOffload := flag.Bool("simple-offload", true, "a SimpleCPUOffloadConnector on the decode instance's engines (vllm:simple_kv_offload_* families)")
	weightUpdates := flag.Duration("weight-updates", 2*time.Second, "interval of the RL weight updates a trainer pushes to the decode instance while it generates (vllm:rl_weight_update_operation_duration_seconds); 0: none")
	observationsFile := flag.String("observations", "", "file to write, at exit, every TTFT and e2e latency recorded, as JSON by role and family, for exact quantiles (the end-to-end suite uses it)")
	var tr tracing
	flag.BoolVar(&tr.on, "trace", false, "give each request a sampled span context and turn exemplars on (OpenMetrics scrape, OTLP): exemplars of a request's latencies name its trace")
	flag.IntVar(&tr.slowID, "slow-request", 0, "with -trace, the number of the request (1 is the first) that waits -slow-delay before reaching the prefill instance; its trace ID is printed; 0: none")
	flag.DurationVar(&tr.delay, "slow-delay", 15*time.Second, "how long the -slow-request request waits")
	exponential := flag.Bool("exponential-latency", false, "export the latency histograms with the exponential aggregation (views.WithExponentialLatency): native histograms on the protobuf scrape, exponential ones over OTLP")
	var fl faults
	fl.register(flag.CommandLine)
	cachedTokens := flag.String("cached-tokens", cachedTransfer, "what the decode instance's OpenAI usage reports as a P/D request's cached_tokens, as vLLM does: "+
		cachedTransfer+" (before vLLM PR #54222, v0.30 and older: the prompt tokens it did not compute, its own prefix-cache hits and the KV it received) or "+
		cachedPrefill+" (from PR #54222: the prefill instance's own count, which it returns in kv_transfer_params as remote_prefill_cached_tokens for the router to pass on); "+
		"the router's source split is the same for both")
	vllmVersion := flag.String("vllm-version", "", "also export the families this vLLM version (0.9 and later, for example 0.10) exported that later versions renamed and removed (views.WithVersion), such as vllm:time_per_output_token_seconds")
	flag.Parse()
	if *rate <= 0 || *decodeEngines < 1 || *idle < 0 {
		return errors.New("-rate must be positive, -decode-engines at least 1 and -idle not negative")
	}
	// The Recorder rejects more draft tokens than it counts positions for.
	if *specDecode < 0 || *sleepAfter < 0 || *weightUpdates < 0 || !(*corrupt >= 0 && *corrupt <= 1) || !(*multimodal >= 0 && *multimodal <= 1) {
		return errors.New("-spec-decode, -sleep-after and -weight-updates must not be negative, -corrupt and -multimodal must be 0 to 1")
	}
	if err := fl.check(*decodeEngines); err != nil {
		return err
	}
	if *cachedTokens != cachedTransfer && *cachedTokens != cachedPrefill {
		return fmt.Errorf("-cached-tokens %q: want %s or %s", *cachedTokens, cachedTransfer, cachedPrefill)
	}
	prefillCached := *cachedTokens == cachedPrefill

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Asked for before the URLs are printed: a sender that waits for them
	// never meets SIGUSR1's or SIGUSR2's default action (exit).
	startSignal := notifyIf(*startOnSignal, syscall.SIGUSR1)
	downSignal := notifyIf(fl.decodeDownOnSignal, syscall.SIGUSR2)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))

	var viewOpts []views.Option
	if *exponential {
		viewOpts = append(viewOpts, views.WithExponentialLatency())
	}
	if *vllmVersion != "" {
		viewOpts = append(viewOpts, views.WithVersion(*vllmVersion))
	}
	vllmViews, err := views.VLLM(viewOpts...)
	if err != nil {
		return err
	}
	if *instanceID != "role" && *instanceID != "listen" {
		return fmt.Errorf("-instance-id %q: want role or listen", *instanceID)
	}
	listen := map[role]string{prefillRole: *prefillAddr, decodeRole: *decodeAddr, routerRole: *routerAddr}
	setup := func(r role) []exporters.Option {
		opts := []exporters.Option{exporters.WithServiceName(*serviceName)}
		if *instanceID == "listen" {
			opts = append(opts, exporters.WithServiceInstanceID(listen[r]))
		}
		opts = append(opts,
			exporters.WithStatsLog(logger.With("instance", string(r)), exporters.WithStatsInterval(*logInterval)),
			exporters.WithErrorHandler(func(err error) { logger.Warn("metrics export", "instance", string(r), "err", err) }),
		)
		if tr.on {
			opts = append(opts, exporters.WithExemplars(), exporters.WithPrometheus(exporters.WithOpenMetrics()))
		}
		if len(viewOpts) > 0 {
			opts = append(opts, exporters.WithViews(vllmViews...))
		}
		if fl.cardinalityLimit > 0 {
			opts = append(opts, exporters.WithCardinalityLimit(fl.cardinalityLimit))
		}
		var otlp []exporters.OTLPOption
		if *otlpEndpoint != "" {
			otlp = append(otlp, exporters.WithProtocol(exporters.Protocol(*otlpProtocol)),
				exporters.WithEndpoint(*otlpEndpoint), exporters.WithInsecure())
		}
		if *otlpInterval > 0 {
			otlp = append(otlp, exporters.WithInterval(*otlpInterval))
		}
		if len(otlp) > 0 {
			opts = append(opts, exporters.WithOTLP(otlp...))
		}
		return opts
	}

	var observed *observations
	if *observationsFile != "" {
		observed = &observations{}
	}
	decode, err := newInstance(ctx, instanceConfig{role: decodeRole, listen: *decodeAddr, model: *model,
		engines: *decodeEngines, kvCapacity: fl.decodeKV, seed: *seed, setup: setup(decodeRole), priority: *priority,
		lora: *lora, specTokens: *specDecode, corruptRate: *corrupt, observed: observed,
		simpleOffload: *simpleOffload, weightUpdates: *weightUpdates, faults: fl, prefillCached: prefillCached})
	if err != nil {
		return err
	}
	handoff := func(r request) {
		// The proxy sends the request on to the decode instance with the
		// client's own max_tokens; its KV follows through the connector.
		r.arrival = time.Now()
		if tr.on {
			r.ctx = requestContext(r.ctx) // the decode instance's span, in the request's trace
		}
		if err := decode.route(r, r.maxTokens, true); err != nil {
			logger.Error("handoff", "err", err)
		}
	}
	prefill, err := newInstance(ctx, instanceConfig{role: prefillRole, listen: *prefillAddr, model: *model,
		engines: 1, kvCapacity: 64 << 10, seed: *seed + 1, handoff: handoff, setup: setup(prefillRole),
		priority: *priority, offload: *kvOffload, lora: *lora, sleepAfter: *sleepAfter, observed: observed, faults: fl,
		prefillCached: prefillCached})
	if err != nil {
		return errors.Join(err, decode.shutdown(context.Background()))
	}
	instances := []*instance{prefill, decode}

	var wg sync.WaitGroup
	serveErr := make(chan error, len(instances)+1)
	for _, in := range instances {
		fmt.Printf("%s metrics: %s\n", in.role, in.url())
		fmt.Printf("%s api: %s/v1\n", in.role, in.base())
		wg.Go(func() {
			if err := in.serve(); err != nil {
				serveErr <- err
			}
		})
		for _, e := range in.engines {
			wg.Go(func() { e.run(ctx) })
		}
	}
	if fl.decodeDownAfter > 0 {
		defer decode.closeAfter(fl.decodeDownAfter).Stop()
	}
	if downSignal != nil {
		decode.closeOn(ctx, downSignal)
	}
	router, err := startRouter(ctx, *routerAddr, *model, setup(routerRole), prefill, decode, fl.handoffDelay, serveErr, &wg)
	if err != nil {
		stop()
		for _, in := range instances {
			err = errors.Join(err, in.shutdown(context.Background()))
		}
		wg.Wait()
		return err
	}

	if *workload {
		if waitStart(ctx, *idle, startSignal) {
			w := newWorkload(*seed, maxModelLen)
			w.multimodal = *multimodal
			generate(ctx, w, *rate, *duration, prefill, &shedder{p: everyNth{share: fl.shed}}, logger, tr)
		}
		if ctx.Err() == nil {
			logger.Info("load finished; serving /metrics until interrupted", "after", duration.String())
		}
	}
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	stop()

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if router != nil {
		err = errors.Join(err, router.shutdown(shutdownCtx))
	}
	for _, in := range instances {
		err = errors.Join(err, in.shutdown(shutdownCtx))
	}
	wg.Wait()
	if observed != nil {
		err = errors.Join(err, observed.write(*observationsFile))
	}
	return err
}

// startRouter serves the P/D router on addr in front of the two instances,
// with its own metrics (see routerServer), and prints its URLs; nil without
// an address. Serve errors go to serveErr.
func startRouter(ctx context.Context, addr, model string, setup []exporters.Option, prefill, decode *instance,
	handoffDelay time.Duration, serveErr chan<- error, wg *sync.WaitGroup) (*routerServer, error) {
	if addr == "" {
		return nil, nil
	}
	rs, err := newRouterServer(ctx, addr, model, setup, prefill, decode, handoffDelay)
	if err != nil {
		return nil, err
	}
	fmt.Printf("%s metrics: %s\n", routerRole, rs.url())
	fmt.Printf("%s api: %s/v1\n", routerRole, rs.base())
	wg.Go(func() {
		if err := rs.serve(); err != nil {
			serveErr <- err
		}
	})
	return rs, nil
}

// notifyIf relays sig to the channel it returns when on; nil otherwise.
func notifyIf(on bool, sig os.Signal) <-chan os.Signal {
	if !on {
		return nil
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	return ch
}

// waitStart waits idle, then for a signal on start unless it is nil
// (-start-on-signal), and reports whether the load is to start: false
// when ctx ended first.
func waitStart(ctx context.Context, idle time.Duration, start <-chan os.Signal) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(idle):
	}
	if start != nil {
		select {
		case <-ctx.Done():
			return false
		case <-start:
		}
	}
	return true
}

// generate sends requests to the prefill instance at the given Poisson rate
// until ctx is done or duration (when positive) has passed, but those shed
// refuses. The prefill instance runs each with max_tokens=1, as a P/D proxy
// does.
func generate(ctx context.Context, w *workload, rate float64, duration time.Duration, prefill *instance, shed *shedder, logger *slog.Logger, tr tracing) {
	var end <-chan time.Time
	if duration > 0 {
		end = time.After(duration)
	}
	var held sync.WaitGroup // the slow request, until it is submitted: the load ends with it
	for {
		select {
		case <-ctx.Done():
			return
		case <-end:
			held.Wait()
			return
		case <-time.After(w.interarrival(rate)):
		}
		r := w.request(time.Now())
		if shed.refused(ctx, prefill) {
			continue
		}
		if tr.on {
			r.ctx = requestContext(context.Background())
		}
		if tr.on && r.id == tr.slowID {
			// Held up before the engine (a stalled front end): its TTFT
			// on the prefill instance is at least the delay.
			fmt.Printf("slow request: id=%d trace_id=%s delay=%s\n", r.id, traceID(r.ctx), tr.delay)
			held.Add(1)
			time.AfterFunc(tr.delay, func() {
				defer held.Done()
				submit(prefill, r, logger)
			})
			continue
		}
		submit(prefill, r, logger)
	}
}

// submit sends r to the prefill instance with max_tokens=1.
func submit(prefill *instance, r request, logger *slog.Logger) {
	if err := prefill.route(r, 1, false); err != nil {
		logger.Error("submit", "err", err)
	}
}
