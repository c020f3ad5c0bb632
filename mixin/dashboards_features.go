package mixin

import (
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// The families only the features dashboard reads.
var (
	queueTimeHist     = family(instrument.NameRequestQueueTime)
	inferenceTime     = family(instrument.NameRequestInferenceTime)
	prefillTime       = family(instrument.NameRequestPrefillTime)
	decodeTime        = family(instrument.NameRequestDecodeTime)
	timePerOutput     = family(instrument.NameRequestTimePerOutputToken)
	paramsMaxTokens   = family(instrument.NameRequestParamsMaxTokens)
	paramsN           = family(instrument.NameRequestParamsN)
	maxGeneration     = family(instrument.NameRequestMaxNumGenerationTokens)
	requestPreempts   = family(instrument.NameRequestNumPreemptions)
	requestPriority   = family(instrument.NameRequestPriority)
	flops             = family(instrument.NameEstimatedFlopsPerGPU)
	readBytes         = family(instrument.NameEstimatedReadBytesPerGPU)
	writeBytes        = family(instrument.NameEstimatedWriteBytesPerGPU)
	schedulerPolicy   = family(instrument.NameSchedulerPolicyInfo)
	sleepOperations   = family(instrument.NameSleepModeOperationDuration)
	weightUpdates     = family(instrument.NameRLWeightUpdateOperationDuration)
	kvFetchByStage    = family(instrument.NameNumRequestsKVFetchByStage)
	specDrafts        = family(instrument.NameSpecDecodeNumDrafts)
	specDraftTokens   = family(instrument.NameSpecDecodeNumDraftTokens)
	specAccepted      = family(instrument.NameSpecDecodeNumAcceptedTokens)
	specAcceptedByPos = family(instrument.NameSpecDecodeNumAcceptedTokensPerPos)
	loraInfo          = family(instrument.NameLoRARequestsInfo)
	mmHits            = family(instrument.NameMMCacheHits)
	mmQueries         = family(instrument.NameMMCacheQueries)
	blockLifetime     = family(instrument.NameKVBlockLifetime)
	blockIdle         = family(instrument.NameKVBlockIdleBeforeEvict)
	blockReuseGap     = family(instrument.NameKVBlockReuseGap)
	offloadLoadBytes  = family(instrument.NameKVOffloadLoadBytes)
	offloadLoadTime   = family(instrument.NameKVOffloadLoadTime)
	offloadLoadSize   = family(instrument.NameKVOffloadLoadSize)
	offloadStoreBytes = family(instrument.NameKVOffloadStoreBytes)
	offloadStoreTime  = family(instrument.NameKVOffloadStoreTime)
	offloadStoreSize  = family(instrument.NameKVOffloadStoreSize)
	offloadSync       = family(instrument.NameKVOffloadLookupSync)
	offloadAsync      = family(instrument.NameKVOffloadLookupAsync)
	offloadAllocFail  = family(instrument.NameKVOffloadAllocFail)
	offloadCPUUsage   = family(instrument.NameKVOffloadCPUUsage)
	offloadCPUWrite   = family(instrument.NameKVOffloadCPUWrite)
	offloadCPURead    = family(instrument.NameKVOffloadCPURead)
	offloadCPUAlloc   = family(instrument.NameKVOffloadCPUAlloc)
	offloadSkipped    = family(instrument.NameKVOffloadStoresSkipped)
	simpleOutcomes    = family(instrument.NameSimpleKVOffloadSaveOutcomes)
	simpleLoadBlocks  = family(instrument.NameSimpleKVOffloadLoadBlocks)
	simpleUsed        = family(instrument.NameSimpleKVOffloadUsedBlocks)
	simplePending     = family(instrument.NameSimpleKVOffloadPendingStore)
	simpleInfo        = family(instrument.NameSimpleKVOffloadInfo)
	nixlXferTime      = family(instrument.NameNIXLXferTime)
	nixlPostTime      = family(instrument.NameNIXLPostTime)
	nixlBytes         = family(instrument.NameNIXLBytesTransferred)
	nixlDescriptors   = family(instrument.NameNIXLNumDescriptors)
	nixlFailedXfers   = family(instrument.NameNIXLNumFailedTransfers)
	nixlFailedNotifs  = family(instrument.NameNIXLNumFailedNotifs)
	nixlExpired       = family(instrument.NameNIXLNumKVExpiredReqs)
	nixlAfterExpiry   = family(instrument.NameNIXLNumNotifsAfterExp)
)

// rates are one target per counter family: its rate in s, summed.
func (s scope) rates(fs ...views.Family) []target {
	var out []target
	for _, f := range fs {
		out = append(out, target{s.sumRate(f, by()), f.ScrapeName()})
	}
	return out
}

// means are one target per histogram family: its mean observation in s.
func (s scope) means(fs ...views.Family) []target {
	var out []target
	for _, f := range fs {
		out = append(out, target{s.mean(f, by()), f.ScrapeName()})
	}
	return out
}

// serverTimes are the front ends that record prefill and decode times
// (stats.ObservedRequest's ServerTimes).
const serverTimes = "infermetrics-proxy in front of a server that reports them (Ollama, llama.cpp)"

// featuresBoard is the dashboard of the families the other dashboards do
// not show: request phases and parameters, scheduling, sleep and weight
// updates, speculative decoding, LoRA, the multimodal cache, KV block
// residency, KV offload and NIXL transfers, per model and engine.
func featuresBoard(c Config) board {
	s, vars := engineScope(c)
	all := by()
	slowest := c.Quantiles[len(c.Quantiles)-1]
	operation, stage := label(instrument.KeyOperation), label(instrument.KeyStage)
	phases := boardRow{title: "Request phases and parameters", panels: []panel{
		s.latency("Queue time", "From a request's arrival to its first scheduling.", queueTimeHist, 8, c.Quantiles...).engineOnly(),
		s.latency("Prefill time", "From a request's first scheduling to its first token.", prefillTime, 8, c.Quantiles...).engineOnlyAnd(serverTimes),
		s.latency("Decode time", "From a request's first token to its last.", decodeTime, 8, c.Quantiles...).engineOnlyAnd(serverTimes),
		s.latency("Inference time", "From a request's first scheduling to its end: prefill and decode.", inferenceTime, 8, c.Quantiles...).engineOnly(),
		s.latency("Time per output token", "A finished request's decode time over its output tokens after the first.", timePerOutput, 8, c.Quantiles...),
		{title: "Request parameters (mean)", unit: "short", width: 8,
			description: "The max_tokens and n a request asked for, the largest max_tokens of its choices, and the preemptions a finished request went through.",
			targets:     s.means(paramsMaxTokens, maxGeneration, paramsN, requestPreempts)},
		panel{title: "Requests by priority (req/s) and mean priority", unit: "short", width: 8,
			description: "Finished requests of priority scheduling, and their mean priority (lower runs first).",
			targets: []target{{s.sumRateOf(requestPriority, "_count", all), "requests"},
				{s.mean(requestPriority, all), "mean priority"}}}.withFeature("priority scheduling"),
		panel{title: "Scheduler policy", unit: "short", width: 8, description: "The scheduling policy of each engine (vllm:scheduler_policy_info).",
			targets: []target{{s.gauge("count", schedulerPolicy, by(label(instrument.KeyPolicy))), legendOf(label(instrument.KeyPolicy))}}}.engineOnly(),
		panel{title: "Engines reporting a cache configuration", unit: "short", width: 8,
			description: "Engines of the selected instances that export their cache configuration (vllm:cache_config_info): vLLM's engines, and an infermetrics engine whose Recorder has instrument.WithCacheConfig.",
			targets:     []target{{s.gauge("count", cacheConfig, all), "engines"}}}.withFeature("a cache configuration"),
	}}
	sleeps := by(operation).aggregate("sum", s.sel(sleepOperations, sleepOperations.ScrapeName()+"_count"))
	sleptSeconds := by(operation).aggregate("sum", s.sel(sleepOperations, sleepOperations.ScrapeName()+"_sum"))
	health := boardRow{title: "Health, sleep and weight updates", panels: []panel{
		{title: "Corrupted requests and refused events (per s)", unit: "short", width: 8,
			description: "Requests finished with NaN logits (vllm:corrupted_requests_total), and the events the Recorder refused or bounded by kind (infermetrics_invalid_events_total, which has no series before the first: 0 then).",
			targets: []target{{s.sumRate(corrupted, all), "corrupted requests"},
				{s.sumRate(invalidEvents, by(label(instrument.KeyKind))) + " or on() vector(0)", "invalid: " + legendOf(label(instrument.KeyKind))}}},
		panel{title: "Estimated compute per GPU (FLOP/s)", unit: "short", width: 8, description: "The engines' estimate of the floating-point operations each GPU performs.",
			targets: s.rates(flops)}.withFeature("work estimates (stats.PerfEstimate)"),
		panel{title: "Estimated memory traffic per GPU (bytes/s)", unit: "Bps", width: 8, description: "The engines' estimate of the bytes each GPU reads and writes.",
			targets: s.rates(readBytes, writeBytes)}.withFeature("work estimates (stats.PerfEstimate)"),
		panel{title: "Sleep state", unit: "short", width: 8, description: "Engines in each sleep state (vllm:engine_sleep_state is 1 for the current one).",
			targets: []target{{s.gauge("sum", sleepState, by(label(instrument.KeySleepState))), legendOf(label(instrument.KeySleepState))}}}.engineOnly(),
		panel{title: "Sleep and wake operations (since start)", unit: "short", width: 8,
			description: "Operations of sleep mode (sleep, wake up) since each server started, by operation, and their mean duration in seconds: rare events, whose series starts with the first, so a rate over a window would miss it.",
			targets:     []target{{sleeps, legendOf(operation)}, {sleptSeconds + " / " + sleeps, legendOf(operation) + " mean (s)"}}}.withFeature("sleep mode"),
		panel{title: "Weight updates", unit: "s", width: 8, description: "Operations of RL weight updates per second by operation, and the slowest quantile of their duration.",
			targets: append([]target{{s.sumRateOf(weightUpdates, "_count", by(operation)), legendOf(operation) + " (per s)"}},
				s.quantiles(weightUpdates, by(operation), " "+legendOf(operation), slowest)...)}.withFeature("RL weight updates"),
	}}
	spec := boardRow{title: "Speculative decoding", panels: withFeatures("speculative decoding",
		panel{title: "Draft acceptance rate", unit: "percentunit", width: 8, description: "Accepted draft tokens of those proposed.",
			targets: []target{{s.ratio(specAccepted, specDraftTokens), "acceptance rate"}}},
		panel{title: "Mean acceptance length", unit: "short", width: 8, description: "Tokens a draft step yields: one plus the accepted draft tokens per draft.",
			targets: []target{{"1 + " + s.ratio(specAccepted, specDrafts), "acceptance length"}}},
		panel{title: "Acceptance by draft position", unit: "percentunit", width: 8, description: "The share of drafts whose token at each position was accepted.",
			targets: []target{{s.sumRate(specAcceptedByPos, by(label(instrument.KeyPosition))) + " / ignoring(" + label(instrument.KeyPosition) + ") group_left " +
				s.sumRate(specDrafts, all), "position " + legendOf(label(instrument.KeyPosition))}}},
		panel{title: "Drafts and draft tokens (per s)", unit: "short", width: 24, description: "Draft steps, the tokens they proposed and those accepted.",
			targets: s.rates(specDrafts, specDraftTokens, specAccepted)},
	)}
	maxLoRA, runningLoRA, waitingLoRA := label(instrument.KeyMaxLoRA), label(instrument.KeyRunningLoRA), label(instrument.KeyWaitingLoRA)
	caches := boardRow{title: "LoRA, multimodal cache, KV blocks", panels: []panel{
		panel{title: "LoRA adapters running and waiting", unit: "short", width: 8,
			description: "The engines' LoRA state (vllm:lora_requests_info): the adapters with running and with waiting requests, of max_lora.",
			targets: []target{{s.gauge("count", loraInfo, by(maxLoRA, runningLoRA, waitingLoRA)),
				"running: " + legendOf(runningLoRA) + " waiting: " + legendOf(waitingLoRA) + " (max " + legendOf(maxLoRA) + ")"}}}.withFeature("LoRA adapters"),
		panel{title: "Multimodal cache hit rate", unit: "percentunit", width: 8, description: "Multimodal items (images) found in the engines' cache of those looked up.",
			targets: []target{{s.ratio(mmHits, mmQueries), "hit rate"}}}.withFeature("a multimodal cache"),
		panel{title: "KV block residency", unit: "s", width: 8,
			description: "The slowest quantile of a KV cache block's lifetime, its idle time before eviction and the gap between two reuses.",
			targets: append(append(s.quantiles(blockLifetime, all, " lifetime", slowest),
				s.quantiles(blockIdle, all, " idle before evict", slowest)...), s.quantiles(blockReuseGap, all, " reuse gap", slowest)...)}.withFeature("KV block residency (instrument.WithKVResidency)"),
	}}
	outcome, phase := label(instrument.KeyOutcome), label(instrument.KeyPhase)
	offloadBackend, pageCache, lazy, capacity := label(instrument.KeyOffloadBackend), label(instrument.KeyPageCache), label(instrument.KeyLazyOffload), label(instrument.KeyCapacityBlocks)
	offload := boardRow{title: "KV offload", panels: withFeatures("KV offload",
		panel{title: "Offload traffic (bytes/s)", unit: "Bps", width: 8, description: "KV bytes loaded from and stored to the offload tier.",
			targets: s.rates(offloadLoadBytes, offloadStoreBytes)},
		panel{title: "Offload time (s/s)", unit: "s", width: 8, description: "Seconds spent loading and storing KV per second.",
			targets: s.rates(offloadLoadTime, offloadStoreTime)},
		panel{title: "Offload transfer size (mean)", unit: "bytes", width: 8, description: "The mean size of a load, a store and a CPU allocation.",
			targets: s.means(offloadLoadSize, offloadStoreSize, offloadCPUAlloc)},
		panel{title: "Offload lookup delay", unit: "s", width: 8, description: "The slowest quantile of the synchronous and asynchronous lookups in the offload tier.",
			targets: append(s.quantiles(offloadSync, all, " sync", slowest), s.quantiles(offloadAsync, all, " async", slowest)...)},
		panel{title: "Offload failures and skips (per s)", unit: "short", width: 8, description: "Allocation failures in the offload tier and stores skipped.",
			targets: s.rates(offloadAllocFail, offloadSkipped)},
		panel{title: "CPU offload cache usage", unit: "percentunit", width: 8, description: "The share of the CPU offload cache in use, and being written and read.",
			targets: []target{{s.gauge("max", offloadCPUUsage, all), "usage"}, {s.gauge("max", offloadCPUWrite, all), "write"},
				{s.gauge("max", offloadCPURead, all), "read"}}},
		panel{title: "Simple CPU offload: saves and loads (blocks/s)", unit: "short", width: 8, description: "The SimpleCPUOffloadConnector's saves by outcome and loaded blocks by phase.",
			targets: []target{{s.sumRate(simpleOutcomes, by(outcome)), "save: " + legendOf(outcome)},
				{s.sumRate(simpleLoadBlocks, by(phase)), "load: " + legendOf(phase)}}},
		panel{title: "Simple CPU offload: blocks", unit: "short", width: 8, description: "Blocks in use in the CPU tier and blocks waiting to be stored.",
			targets: []target{{s.gauge("sum", simpleUsed, all), "used"}, {s.gauge("sum", simplePending, all), "pending store"}}},
		panel{title: "Simple CPU offload: configuration", unit: "short", width: 8, description: "The connector's configuration (vllm:simple_kv_offload_info), one line per engine configuration.",
			targets: []target{{s.gauge("count", simpleInfo, by(offloadBackend, pageCache, lazy, capacity)),
				legendOf(offloadBackend) + " page_cache=" + legendOf(pageCache) + " lazy=" + legendOf(lazy) + " capacity=" + legendOf(capacity)}}},
	)}
	nixl := boardRow{title: "KV transfer (NIXL)", panels: withFeatures("a NIXL KV connector",
		panel{title: "NIXL transfer and post time", unit: "s", width: 8, description: "The slowest quantile of a KV transfer's duration and of posting it.",
			targets: append(s.quantiles(nixlXferTime, all, " transfer", slowest), s.quantiles(nixlPostTime, all, " post", slowest)...)},
		panel{title: "NIXL transfer size (mean)", unit: "short", width: 8, description: "The mean bytes and descriptors of a KV transfer.",
			targets: s.means(nixlBytes, nixlDescriptors)},
		panel{title: "NIXL failures (per s)", unit: "short", width: 8, description: "Failed transfers and notifications, requests whose KV expired, notifications after expiry.",
			targets: s.rates(nixlFailedXfers, nixlFailedNotifs, nixlExpired, nixlAfterExpiry)},
		panel{title: "Requests fetching KV by stage", unit: "short", width: 24, description: "Requests waiting for remote KV, by stage of the fetch.",
			targets: []target{{s.gauge("sum", kvFetchByStage, by(stage)), legendOf(stage)}}},
	)}
	return board{file: "docs/grafana/infermetrics-features.json", uid: "infermetrics-features", title: "infermetrics: engine features",
		description: "The families of an engine's optional features and details the other dashboards leave out: request phases and parameters, priorities, sleep mode and weight updates, speculative decoding, LoRA, the multimodal cache, KV block residency, KV offload and NIXL transfers, per model and engine." + engineScoped(c),
		variables:   vars,
		rows:        []boardRow{phases, health, spec, caches, offload, nixl}}
}
