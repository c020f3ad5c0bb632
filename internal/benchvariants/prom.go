package benchvariants

import (
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// PromptTokensTotalHelp is the HELP text views.VLLM gives
// vllm:prompt_tokens_total (the instrument's own describes the split by
// source, which that family sums away).
const PromptTokensTotalHelp = "Prompt tokens of requests that produced their first output, over all sources " +
	"(computed here, local prefix cache hits and KV received through a connector)."

// ClientGolang is native prometheus/client_golang instrumentation of every
// vLLM family (the names, labels and buckets of views.Families), with each
// engine's children bound once: the in-process floor.
type ClientGolang struct {
	// Registry holds every family.
	Registry *prometheus.Registry
	counters map[string]*prometheus.CounterVec
	gauges   map[string]*prometheus.GaugeVec
	hists    map[string]*prometheus.HistogramVec
	engines  map[int]*PromEngine
}

// PromEngine records one engine's stats on bound children.
type PromEngine struct {
	c *ClientGolang

	promptTotal, promptCached, generation, preemptions   prometheus.Counter
	bySource                                             [3]prometheus.Counter
	success                                              [5]prometheus.Counter
	prefixQueries, prefixHits, mmQueries, mmHits         prometheus.Counter
	extPrefixQueries, extPrefixHits                      prometheus.Counter
	specDrafts, specDraftTokens, specAccepted            prometheus.Counter
	specPerPos                                           []prometheus.Counter
	nixlFailedTransfers, nixlFailedNotifs, nixlKVExpired prometheus.Counter
	corrupted                                            *prometheus.CounterVec
	engineLabel                                          string

	running, waiting, kvUsage prometheus.Gauge
	waitingBy                 [2]prometheus.Gauge
	sleep                     [3]prometheus.Gauge

	iterationTokens, ttft, itl                             prometheus.Observer
	requestPrompt, requestGeneration, prefillKV, maxTokens prometheus.Observer
	paramsN, maxGeneration                                 prometheus.Observer
	e2e, tpot, queue, inference, prefill, decode           prometheus.Observer
	nixlXfer, nixlPost, nixlBytes, nixlDesc                prometheus.Observer
	kvLifetime, kvIdle, kvReuseGap                         prometheus.Observer

	// Families of newer vLLM versions.
	byTier                   [5]prometheus.Counter
	numPreemptions           prometheus.Observer
	flops, readBytes, writeB prometheus.Counter
	nixlAfterExpiry          prometheus.Counter
	kvFetch                  [3]prometheus.Gauge

	loraMu   sync.Mutex
	loraLast stats.LoRA
	lora     prometheus.Gauge
}

// NewClientGolang registers every vLLM family on a new registry and binds
// the children of every engine, creating the counter and gauge series at
// zero as vLLM does. Histogram children are bound too; client_golang
// exposes them with zero observations while OpenTelemetry shows a histogram
// from its first observation (Samples.Diff treats the two as equal).
func NewClientGolang(ranks ...int) (*ClientGolang, error) {
	c := &ClientGolang{
		Registry: prometheus.NewRegistry(),
		counters: map[string]*prometheus.CounterVec{},
		gauges:   map[string]*prometheus.GaugeVec{},
		hists:    map[string]*prometheus.HistogramVec{},
		engines:  map[int]*PromEngine{},
	}
	for _, f := range views.Families() {
		labels := f.Labels
		if f.Instrument.Name == instrument.NameCacheConfigInfo {
			labels = append([]string{instrument.KeyEngine}, CacheConfig().Keys()...)
		}
		help := f.Instrument.Description
		if f.Name == "vllm:prompt_tokens_total" {
			help = PromptTokensTotalHelp
		}
		var col prometheus.Collector
		switch f.Type {
		case "counter":
			v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.Name, Help: help}, labels)
			c.counters[f.Name], col = v, v
		case "gauge":
			v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: f.Name, Help: help}, labels)
			c.gauges[f.Name], col = v, v
		case "histogram":
			buckets := f.Buckets
			if f.Instrument.LengthBuckets {
				buckets = instrument.LengthBuckets(MaxModelLen)
			}
			v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: f.Name, Help: help, Buckets: buckets}, labels)
			c.hists[f.Name], col = v, v
		default:
			return nil, fmt.Errorf("benchvariants: family %s of type %q", f.Name, f.Type)
		}
		if err := c.Registry.Register(col); err != nil {
			return nil, fmt.Errorf("benchvariants: %s: %w", f.Name, err)
		}
	}
	for _, rank := range ranks {
		e, err := c.newEngine(rank)
		if err != nil {
			return nil, err
		}
		c.engines[rank] = e
	}
	// The front end's counter: one series per reason, no engine.
	for _, r := range stats.AdmissionReasons() {
		c.counters["vllm:admission_rejections_total"].WithLabelValues(Model, r.String())
	}
	return c, nil
}

// Engine returns the engine of a rank (nil if unknown).
func (c *ClientGolang) Engine(rank int) *PromEngine { return c.engines[rank] }

func (c *ClientGolang) newEngine(rank int) (e *PromEngine, err error) {
	defer func() {
		if r := recover(); r != nil { // a family missing from the maps
			err = fmt.Errorf("benchvariants: binding engine %d: %v", rank, r)
		}
	}()
	eng := engineLabel(rank)
	e = &PromEngine{c: c, engineLabel: eng}
	counter := func(family string, extra ...string) prometheus.Counter {
		return c.counters[family].WithLabelValues(append([]string{Model, eng}, extra...)...)
	}
	gauge := func(family string, extra ...string) prometheus.Gauge {
		return c.gauges[family].WithLabelValues(append([]string{Model, eng}, extra...)...)
	}
	hist := func(family string) prometheus.Observer { return c.hists[family].WithLabelValues(Model, eng) }

	e.promptTotal = counter("vllm:prompt_tokens_total")
	for _, s := range stats.Sources() {
		e.bySource[s] = counter("vllm:prompt_tokens_by_source_total", s.String())
	}
	for _, r := range stats.FinishReasons() {
		e.success[r] = counter("vllm:request_success_total", r.String())
	}
	e.promptCached = counter("vllm:prompt_tokens_cached_total")
	e.generation = counter("vllm:generation_tokens_total")
	e.preemptions = counter("vllm:num_preemptions_total")
	e.prefixQueries = counter("vllm:prefix_cache_queries_total")
	e.prefixHits = counter("vllm:prefix_cache_hits_total")
	e.mmQueries = counter("vllm:mm_cache_queries_total")
	e.mmHits = counter("vllm:mm_cache_hits_total")
	e.extPrefixQueries = counter("vllm:external_prefix_cache_queries_total")
	e.extPrefixHits = counter("vllm:external_prefix_cache_hits_total")
	e.specDrafts = counter("vllm:spec_decode_num_drafts_total")
	e.specDraftTokens = counter("vllm:spec_decode_num_draft_tokens_total")
	e.specAccepted = counter("vllm:spec_decode_num_accepted_tokens_total")
	for i := range SpecTokens {
		e.specPerPos = append(e.specPerPos, counter("vllm:spec_decode_num_accepted_tokens_per_pos_total", strconv.Itoa(i)))
	}
	e.nixlFailedTransfers = counter("vllm:nixl_num_failed_transfers_total")
	e.nixlFailedNotifs = counter("vllm:nixl_num_failed_notifications_total")
	e.nixlKVExpired = counter("vllm:nixl_num_kv_expired_reqs_total")
	// Like the Recorder, corrupted requests get a series on their first report.
	e.corrupted = c.counters["vllm:corrupted_requests_total"]

	e.running = gauge("vllm:num_requests_running")
	e.waiting = gauge("vllm:num_requests_waiting")
	e.kvUsage = gauge("vllm:kv_cache_usage_perc")
	e.waitingBy[0] = gauge("vllm:num_requests_waiting_by_reason", instrument.WaitingCapacity)
	e.waitingBy[1] = gauge("vllm:num_requests_waiting_by_reason", instrument.WaitingDeferred)
	for _, s := range stats.SleepStates() {
		e.sleep[s] = gauge("vllm:engine_sleep_state", s.String())
	}

	e.iterationTokens = hist("vllm:iteration_tokens_total")
	e.ttft = hist("vllm:time_to_first_token_seconds")
	e.itl = hist("vllm:inter_token_latency_seconds")
	e.requestPrompt = hist("vllm:request_prompt_tokens")
	e.requestGeneration = hist("vllm:request_generation_tokens")
	e.prefillKV = hist("vllm:request_prefill_kv_computed_tokens")
	e.maxTokens = hist("vllm:request_params_max_tokens")
	e.paramsN = hist("vllm:request_params_n")
	e.maxGeneration = hist("vllm:request_max_num_generation_tokens")
	e.e2e = hist("vllm:e2e_request_latency_seconds")
	e.tpot = hist("vllm:request_time_per_output_token_seconds")
	e.queue = hist("vllm:request_queue_time_seconds")
	e.inference = hist("vllm:request_inference_time_seconds")
	e.prefill = hist("vllm:request_prefill_time_seconds")
	e.decode = hist("vllm:request_decode_time_seconds")
	e.nixlXfer = hist("vllm:nixl_xfer_time_seconds")
	e.nixlPost = hist("vllm:nixl_post_time_seconds")
	e.nixlBytes = hist("vllm:nixl_bytes_transferred")
	e.nixlDesc = hist("vllm:nixl_num_descriptors")
	e.kvLifetime = hist("vllm:kv_block_lifetime_seconds")
	e.kvIdle = hist("vllm:kv_block_idle_before_evict_seconds")
	e.kvReuseGap = hist("vllm:kv_block_reuse_gap_seconds")

	for _, t := range stats.Tiers() {
		e.byTier[t] = counter("vllm:prompt_tokens_cached_by_source_total", t.String())
	}
	e.numPreemptions = hist("vllm:request_num_preemptions")
	e.flops = counter("vllm:estimated_flops_per_gpu_total")
	e.readBytes = counter("vllm:estimated_read_bytes_per_gpu_total")
	e.writeB = counter("vllm:estimated_write_bytes_per_gpu_total")
	e.nixlAfterExpiry = counter("vllm:nixl_num_notifications_after_expiry_total")
	for _, s := range stats.FetchStages() { // RecorderOptions declares a KV consumer
		e.kvFetch[s] = gauge("vllm:num_requests_kv_fetch_by_stage", s.String())
	}

	e.RecordScheduler(&stats.Scheduler{}) // gauges at their start-up values
	cfg := CacheConfig()
	values := []string{eng}
	for _, k := range cfg.Keys() {
		values = append(values, cfg[k])
	}
	c.gauges["vllm:cache_config_info"].WithLabelValues(values...).Set(1)
	gauge("vllm:scheduler_policy_info", instrument.PolicyFCFS).Set(1)
	gauge("vllm:scheduler_policy_info", instrument.PolicyPriority).Set(0)
	return e, nil
}

func addIfProm(c prometheus.Counter, v int64) {
	if v > 0 {
		c.Add(float64(v))
	}
}

// RecordIteration records one step's outputs and its finished requests.
func (e *PromEngine) RecordIteration(it *stats.Iteration) {
	p := &it.PromptTokens
	addIfProm(e.bySource[stats.LocalCompute], p.Computed)
	addIfProm(e.bySource[stats.LocalCacheHit], p.LocalCacheHit)
	addIfProm(e.bySource[stats.ExternalKVTransfer], p.ExternalKVTransfer)
	addIfProm(e.promptTotal, p.Computed+p.LocalCacheHit+p.ExternalKVTransfer)
	addIfProm(e.promptCached, p.LocalCacheHit+p.ExternalKVTransfer)
	for _, t := range stats.Tiers() {
		addIfProm(e.byTier[t], p.ByTier(t))
	}
	addIfProm(e.generation, it.GenerationTokens)
	addIfProm(e.preemptions, it.Preemptions)
	if it.CorruptedRequests > 0 {
		e.corrupted.WithLabelValues(Model, e.engineLabel).Add(float64(it.CorruptedRequests))
	}
	e.iterationTokens.Observe(float64(p.Computed + it.GenerationTokens))
	for _, v := range it.TTFT {
		e.ttft.Observe(v)
	}
	for _, v := range it.ITL {
		e.itl.Observe(v)
	}
	for i := range it.Finished {
		e.RecordFinished(&it.Finished[i])
	}
}

// RecordFinished records one finished request.
func (e *PromEngine) RecordFinished(f *stats.FinishedRequest) {
	e.success[f.Reason].Inc()
	e.requestPrompt.Observe(float64(f.PromptTokens))
	e.requestGeneration.Observe(float64(f.GenerationTokens))
	e.prefillKV.Observe(float64(f.PrefillComputedTokens))
	if f.MaxTokens > 0 {
		e.maxTokens.Observe(float64(f.MaxTokens))
	}
	if f.N > 0 {
		e.paramsN.Observe(float64(f.N))
		e.maxGeneration.Observe(float64(f.MaxGenerationTokens))
	}
	e.e2e.Observe(f.E2ELatency)
	e.tpot.Observe(f.TimePerOutputToken)
	e.queue.Observe(f.QueueTime)
	e.inference.Observe(f.InferenceTime)
	e.prefill.Observe(f.PrefillTime)
	e.decode.Observe(f.DecodeTime)
	e.numPreemptions.Observe(float64(f.Preemptions))
}

// RecordScheduler records one scheduler step.
func (e *PromEngine) RecordScheduler(s *stats.Scheduler) {
	e.running.Set(float64(s.Running))
	e.waiting.Set(float64(s.WaitingCapacity + s.WaitingDeferred))
	e.waitingBy[0].Set(float64(s.WaitingCapacity))
	e.waitingBy[1].Set(float64(s.WaitingDeferred))
	e.kvUsage.Set(s.KVCacheUsage)
	for st, g := range e.sleep {
		if stats.SleepState(st) == s.SleepState {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
	addIfProm(e.prefixQueries, s.PrefixCache.Queries)
	addIfProm(e.prefixHits, s.PrefixCache.Hits)
	addIfProm(e.mmQueries, s.MultimodalCache.Queries)
	addIfProm(e.mmHits, s.MultimodalCache.Hits)
	if c := s.ConnectorPrefixCache; c != nil {
		addIfProm(e.extPrefixQueries, c.Queries)
		addIfProm(e.extPrefixHits, c.Hits)
	}
	if sd := s.SpecDecoding; sd != nil {
		addIfProm(e.specDrafts, sd.Drafts)
		addIfProm(e.specDraftTokens, sd.DraftTokens)
		addIfProm(e.specAccepted, sd.AcceptedTokens)
		for i, v := range sd.AcceptedPerPosition {
			if i < len(e.specPerPos) {
				addIfProm(e.specPerPos[i], v)
			}
		}
	}
	if s.LoRA != nil {
		e.loraGauge(s.LoRA).Set(unixNow())
	}
	if k := s.KVTransfer; k != nil {
		for _, v := range k.XferTime {
			e.nixlXfer.Observe(v)
		}
		for _, v := range k.PostTime {
			e.nixlPost.Observe(v)
		}
		for _, v := range k.BytesTransferred {
			e.nixlBytes.Observe(float64(v))
		}
		for _, v := range k.NumDescriptors {
			e.nixlDesc.Observe(float64(v))
		}
		addIfProm(e.nixlFailedTransfers, k.FailedTransfers)
		addIfProm(e.nixlFailedNotifs, k.FailedNotifications)
		addIfProm(e.nixlKVExpired, k.ExpiredRequests)
		addIfProm(e.nixlAfterExpiry, k.NotificationsAfterExpiry)
	}
	if p := s.Perf; p != nil {
		e.flops.Add(p.FLOPs)
		e.readBytes.Add(p.ReadBytes)
		e.writeB.Add(p.WriteBytes)
	}
	if k := s.KVFetch; k != nil {
		for _, st := range stats.FetchStages() {
			e.kvFetch[st].Set(float64(k.ByStage(st)))
		}
	}
	for i := range s.Evictions {
		ev := &s.Evictions[i]
		e.kvLifetime.Observe(ev.Lifetime)
		e.kvIdle.Observe(ev.IdleBeforeEvict)
		for _, g := range ev.ReuseGaps {
			e.kvReuseGap.Observe(g)
		}
	}
}

// loraGauge returns the child of a LoRA state, looked up again only when the
// adapters change (as the Recorder rebuilds its attribute set).
func (e *PromEngine) loraGauge(l *stats.LoRA) prometheus.Gauge {
	e.loraMu.Lock()
	defer e.loraMu.Unlock()
	if e.lora != nil && e.loraLast.MaxLoRA == l.MaxLoRA &&
		slices.Equal(e.loraLast.Running, l.Running) && slices.Equal(e.loraLast.Waiting, l.Waiting) {
		return e.lora
	}
	maxLoRA, waiting, running := loraLabels(l)
	e.lora = e.c.gauges["vllm:lora_requests_info"].With(prometheus.Labels{
		instrument.KeyMaxLoRA: maxLoRA, instrument.KeyWaitingLoRA: waiting, instrument.KeyRunningLoRA: running})
	e.loraLast = stats.LoRA{MaxLoRA: l.MaxLoRA, Running: slices.Clone(l.Running), Waiting: slices.Clone(l.Waiting)}
	return e.lora
}
