package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// instance is one server of the deployment: its own MeterProvider, Recorder,
// /metrics listener and data-parallel engines.
type instance struct {
	role     role
	model    string
	stopped  <-chan struct{} // closed when the engines stop: API handlers return
	provider *exporters.Provider
	server   *http.Server
	listener net.Listener
	// handlers counts the requests being served, for shutdown to wait on
	// (tracked).
	handlers sync.WaitGroup
	engines  []*engine
	// cachedExcess is added to the cached tokens of its API usage
	// (-cached-excess).
	cachedExcess int64
	// prefillCached: see instanceConfig.prefillCached.
	prefillCached bool
}

type instanceConfig struct {
	role       role
	listen     string
	model      string
	engines    int
	kvCapacity int64
	seed       uint64
	handoff    func(request)
	setup      []exporters.Option
	priority   bool // priority scheduling
	offload    bool // a host-memory KV offload tier
	lora       bool // requests name LoRA adapters
	// specTokens is the draft tokens per step of speculative decoding (0: off).
	specTokens int
	// sleepAfter is the idle time after which engines sleep (0: never).
	sleepAfter time.Duration
	// corruptRate is the share of requests found corrupted (0: none).
	corruptRate float64
	// simpleOffload: a SimpleCPUOffloadConnector on every engine.
	simpleOffload bool
	// weightUpdates is the interval of RL weight updates on engine 0
	// while it generates (0: none).
	weightUpdates time.Duration
	// faults are the faults injected (see faults.go); the instance takes
	// its role's.
	faults faults
	// prefillCached: the P/D usage of vLLM from PR #54222 (-cached-tokens
	// prefill, see apiCall.cachedTokens).
	prefillCached bool
	// observed keeps the recorded latencies for -observations, or is nil.
	observed *observations
	// recorder are more Recorder options (tests: an error collector).
	recorder []instrument.Option
}

func newInstance(ctx context.Context, c instanceConfig) (*instance, error) {
	provider, err := exporters.Setup(ctx, append(c.role.resource(), c.setup...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.role, err)
	}
	ranks := make([]int, c.engines)
	for i := range ranks {
		ranks[i] = i
	}
	// vLLM's cache config fields, as vllm:cache_config_info labels them.
	cacheConfig := stats.VLLMCacheConfig{
		BlockSize:             blockSize,
		NumGPUBlocks:          new(c.kvCapacity / blockSize),
		NumCPUBlocks:          new(int64(0)),
		GPUMemoryUtilization:  0.9,
		CacheDType:            "auto",
		EnablePrefixCaching:   true,
		PrefixCachingHashAlgo: "sha256",
		KVOffloadingBackend:   new("native"),
		KVOffloadingSize:      new(4.0), // GiB of host memory for offloaded prefixes
		KVCacheSizeTokens:     new(c.kvCapacity),
		KVCacheMaxConcurrency: new(float64(c.kvCapacity) / maxModelLen),
	}
	recOpts := []instrument.Option{
		instrument.WithMeterProvider(provider.MeterProvider()),
		instrument.WithModelName(c.model),
		instrument.WithEngines(ranks...),
		instrument.WithMaxModelLen(maxModelLen),
		instrument.WithAttributes(attribute.String("role", string(c.role))),
		instrument.WithKVConnector(),
		instrument.WithCacheConfig(cacheConfig.CacheConfig()),
	}
	recOpts = append(recOpts, c.features()...)
	recOpts = append(recOpts, c.recorder...)
	if c.role == decodeRole {
		// The decode node receives KV: it is vLLM's KV consumer.
		recOpts = append(recOpts, instrument.WithKVConsumer())
	}
	rec, err := instrument.NewRecorder(recOpts...)
	if err != nil {
		return nil, errors.Join(err, provider.Shutdown(ctx))
	}
	in := &instance{role: c.role, model: c.model, stopped: ctx.Done(), provider: provider, cachedExcess: c.faults.cachedExcess,
		prefillCached: c.prefillCached}
	for _, rank := range ranks {
		e, _ := rec.Engine(rank) // one of the Recorder's own ranks: never an error
		eng := newEngine(c.role, e, c.seed, c.kvCapacity, c.handoff)
		if c.offload {
			eng.offload = newOffloadTier(c.seed + uint64(rank))
		}
		if c.specTokens > 0 {
			eng.spec = newSpecDecoder(c.specTokens, c.seed+uint64(rank))
		}
		if c.sleepAfter > 0 {
			eng.sleep = &sleeper{after: c.sleepAfter}
		}
		if c.simpleOffload {
			eng.simple = newSimpleOffload(c.seed + uint64(rank))
		}
		if c.weightUpdates > 0 && rank == 0 { // the API server's, one per instance
			eng.weights = newWeightUpdater(c.weightUpdates, c.seed)
		}
		eng.lora, eng.corruptRate = c.lora, c.corruptRate
		c.faults.apply(c.role, rank, eng)
		eng.priority, eng.observed = c.priority, c.observed
		in.engines = append(in.engines, eng)
	}
	in.listener, err = net.Listen("tcp", c.listen)
	if err != nil {
		return nil, errors.Join(err, provider.Shutdown(ctx))
	}
	// The OpenAI-compatible API (see api.go), beside /metrics. Its
	// requests are in the HTTP families of vLLM's API server, recorded on
	// the first engine (they carry no engine label); they are not recorded
	// as requests (no openaihttp.WithEngine): they run on the engines,
	// whose steps record them already (a front-end recording would count
	// each twice). The router records what its clients see.
	handler := withHTTPMetrics(provider.Handler(), failing(c.faults.http5xx, in.apiHandler()), in.engines[0].rec)
	// A slow client must not hold a connection open before sending its
	// headers.
	in.server = &http.Server{Handler: in.tracked(handler), ReadHeaderTimeout: 10 * time.Second}
	return in, nil
}

// tracked is h counted in handlers: after closeAfter's Close, Shutdown
// waits for no connection while their handlers may still be writing (and
// reporting the write that failed).
func (in *instance) tracked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.handlers.Add(1)
		defer in.handlers.Done()
		h.ServeHTTP(w, r)
	})
}

// resource is the Setup options naming a server of the deployment: the
// example's service name, service.instance.id "<role>-0" and a role
// attribute (-service-name and -instance-id listen override the first two).
func (r role) resource() []exporters.Option {
	return []exporters.Option{
		exporters.WithServiceName("infermetrics-example"),
		exporters.WithServiceInstanceID(r.id()),
		exporters.WithResourceAttributes(attribute.String("role", string(r))),
	}
}

// id is the service.instance.id of the deployment's one server of role r.
func (r role) id() string { return string(r) + "-0" }

// features are the Recorder options of the instance's optional features.
func (c instanceConfig) features() []instrument.Option {
	// Both roles sample prefix-cache evictions; the decode role finds
	// corrupted requests (see corrupt.go).
	opts := []instrument.Option{instrument.WithKVResidency()}
	if c.role == decodeRole && c.corruptRate > 0 {
		opts = append(opts, instrument.WithCorruptionDetection())
	}
	if c.priority {
		opts = append(opts, instrument.WithPriorityScheduling())
	}
	if c.offload {
		opts = append(opts, instrument.WithKVOffloadStoreThreshold(offloadStoreThreshold))
	}
	if c.simpleOffload {
		opts = append(opts, instrument.WithSimpleKVOffload(stats.SimpleKVOffloadConfig{Backend: "cpu", CapacityBlocks: simpleCapacity}))
	}
	if c.specTokens > 0 {
		opts = append(opts, instrument.WithSpecDecoding(c.specTokens))
	}
	return opts
}

// url is the address of the instance's /metrics endpoint.
func (in *instance) url() string { return in.base() + "/metrics" }

// base is the instance's base URL, of /metrics and /v1.
func (in *instance) base() string { return "http://" + in.listener.Addr().String() }

// serve serves /metrics until shutdown.
func (in *instance) serve() error {
	if err := in.server.Serve(in.listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// route passes a request to the least loaded engine.
func (in *instance) route(r request, maxTokens int64, transfer bool) error {
	return in.leastLoaded().submit(r, maxTokens, transfer)
}

// leastLoaded is the engine holding the fewest requests, of those that
// may take one: a stuck engine (-stuck-engine) that holds a request gets
// no more, as a load balancer's health check would take it out.
func (in *instance) leastLoaded() *engine {
	var best *engine
	for _, e := range in.engines {
		if e.stuck && e.load.Load() > 0 {
			continue
		}
		if best == nil || e.load.Load() < best.load.Load() {
			best = e
		}
	}
	if best == nil {
		return in.engines[0]
	}
	return best
}

// shutdown flushes the metrics (OTLP included), stops the listener and
// waits, until ctx is done, for every handler to return.
func (in *instance) shutdown(ctx context.Context) error {
	err := errors.Join(in.provider.Shutdown(ctx), in.server.Shutdown(ctx))
	returned := make(chan struct{})
	go func() {
		in.handlers.Wait()
		close(returned)
	}()
	select {
	case <-returned:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("%s: handlers still running: %w", in.role, ctx.Err()))
	}
	return err
}
