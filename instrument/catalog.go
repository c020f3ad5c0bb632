package instrument

import "slices"

// Instrument names. They are valid OpenTelemetry names (no ':'); package views
// renames the streams to vLLM's exposition names.
const (
	NameNumRequestsRunning         = "vllm.num_requests_running"
	NameNumRequestsWaiting         = "vllm.num_requests_waiting"
	NameNumRequestsWaitingByReason = "vllm.num_requests_waiting_by_reason"
	NameEngineSleepState           = "vllm.engine_sleep_state"
	NameKVCacheUsage               = "vllm.kv_cache_usage"
	NamePrefixCacheQueries         = "vllm.prefix_cache_queries"
	NamePrefixCacheHits            = "vllm.prefix_cache_hits"
	NameExternalPrefixCacheQueries = "vllm.external_prefix_cache_queries"
	NameExternalPrefixCacheHits    = "vllm.external_prefix_cache_hits"
	NameMMCacheQueries             = "vllm.mm_cache_queries"
	NameMMCacheHits                = "vllm.mm_cache_hits"
	NameNumPreemptions             = "vllm.num_preemptions"
	NamePromptTokens               = "vllm.prompt_tokens"
	NamePromptTokensCached         = "vllm.prompt_tokens_cached"
	NameGenerationTokens           = "vllm.generation_tokens"
	NameRequestSuccess             = "vllm.request_success"
	NameCorruptedRequests          = "vllm.corrupted_requests"
	NameNumRequestsKVFetchByStage  = "vllm.num_requests_kv_fetch_by_stage"
	NameEstimatedFlopsPerGPU       = "vllm.estimated_flops_per_gpu"
	NameEstimatedReadBytesPerGPU   = "vllm.estimated_read_bytes_per_gpu"
	NameEstimatedWriteBytesPerGPU  = "vllm.estimated_write_bytes_per_gpu"

	NameRequestPromptTokens            = "vllm.request_prompt_tokens"
	NameRequestGenerationTokens        = "vllm.request_generation_tokens"
	NameIterationTokens                = "vllm.iteration_tokens"
	NameRequestMaxNumGenerationTokens  = "vllm.request_max_num_generation_tokens"
	NameRequestParamsN                 = "vllm.request_params_n"
	NameRequestParamsMaxTokens         = "vllm.request_params_max_tokens"
	NameRequestPrefillKVComputedTokens = "vllm.request_prefill_kv_computed_tokens"
	NameTimeToFirstToken               = "vllm.time_to_first_token"
	NameInterTokenLatency              = "vllm.inter_token_latency"
	NameRequestTimePerOutputToken      = "vllm.request_time_per_output_token"
	NameE2ERequestLatency              = "vllm.e2e_request_latency"
	NameRequestQueueTime               = "vllm.request_queue_time"
	NameRequestInferenceTime           = "vllm.request_inference_time"
	NameRequestPrefillTime             = "vllm.request_prefill_time"
	NameRequestDecodeTime              = "vllm.request_decode_time"
	NameKVBlockLifetime                = "vllm.kv_block_lifetime"
	NameKVBlockIdleBeforeEvict         = "vllm.kv_block_idle_before_evict"
	NameKVBlockReuseGap                = "vllm.kv_block_reuse_gap"
	NameRequestNumPreemptions          = "vllm.request_num_preemptions"
	// NamePromptTokensRecomputed is the instrument of a family of older
	// vLLM versions only (LegacyDescriptors).
	NamePromptTokensRecomputed = "vllm.prompt_tokens_recomputed"

	NameSpecDecodeNumDrafts               = "vllm.spec_decode_num_drafts"
	NameSpecDecodeNumDraftTokens          = "vllm.spec_decode_num_draft_tokens"
	NameSpecDecodeNumAcceptedTokens       = "vllm.spec_decode_num_accepted_tokens"
	NameSpecDecodeNumAcceptedTokensPerPos = "vllm.spec_decode_num_accepted_tokens_per_pos"

	NameNIXLXferTime           = "vllm.nixl_xfer_time"
	NameNIXLPostTime           = "vllm.nixl_post_time"
	NameNIXLBytesTransferred   = "vllm.nixl_bytes_transferred"
	NameNIXLNumDescriptors     = "vllm.nixl_num_descriptors"
	NameNIXLNumFailedTransfers = "vllm.nixl_num_failed_transfers"
	NameNIXLNumFailedNotifs    = "vllm.nixl_num_failed_notifications"
	NameNIXLNumKVExpiredReqs   = "vllm.nixl_num_kv_expired_reqs"
	NameNIXLNumNotifsAfterExp  = "vllm.nixl_num_notifications_after_expiry"
	NameLoRARequestsInfo       = "vllm.lora_requests_info"
	NameCacheConfigInfo        = "vllm.cache_config_info"

	NameRequestPriority      = "vllm.request_priority"
	NameSchedulerPolicyInfo  = "vllm.scheduler_policy_info"
	NameKVOffloadLoadBytes   = "vllm.kv_offload_load_bytes"
	NameKVOffloadLoadTime    = "vllm.kv_offload_load_time"
	NameKVOffloadLoadSize    = "vllm.kv_offload_load_size"
	NameKVOffloadStoreBytes  = "vllm.kv_offload_store_bytes"
	NameKVOffloadStoreTime   = "vllm.kv_offload_store_time"
	NameKVOffloadStoreSize   = "vllm.kv_offload_store_size"
	NameKVOffloadLookupSync  = "vllm.kv_offload_lookup_sync_delay"
	NameKVOffloadLookupAsync = "vllm.kv_offload_lookup_async_delay"
	NameKVOffloadAllocFail   = "vllm.kv_offload_allocation_failure"
	NameKVOffloadCPUUsage    = "vllm.kv_offload_cpu_cache_usage_perc"
	NameKVOffloadCPUWrite    = "vllm.kv_offload_cpu_cache_write_usage_perc"
	NameKVOffloadCPURead     = "vllm.kv_offload_cpu_cache_read_usage_perc"
	NameKVOffloadCPUAlloc    = "vllm.kv_offload_cpu_allocation_size"

	NameKVOffloadStoresSkipped          = "vllm.kv_offload_stores_skipped"
	NameSimpleKVOffloadSaveOutcomes     = "vllm.simple_kv_offload_save_outcomes"
	NameSimpleKVOffloadLoadBlocks       = "vllm.simple_kv_offload_load_blocks"
	NameSimpleKVOffloadUsedBlocks       = "vllm.simple_kv_offload_used_blocks"
	NameSimpleKVOffloadPendingStore     = "vllm.simple_kv_offload_pending_store_blocks"
	NameSimpleKVOffloadInfo             = "vllm.simple_kv_offload_info"
	NameSleepModeOperationDuration      = "vllm.sleep_mode_operation_duration"
	NameRLWeightUpdateOperationDuration = "vllm.rl_weight_update_operation_duration"
)

// Attribute keys. model_name and engine are on every instrument but the two
// info gauges; the others are on the instruments whose Descriptor lists them.
const (
	KeyModelName      = "model_name"
	KeyEngine         = "engine"
	KeySource         = "source"
	KeyFinishedReason = "finished_reason"
	KeyWaitingReason  = "reason"
	KeySleepState     = "sleep_state"
	KeyPosition       = "position"
	KeyMaxLoRA        = "max_lora"
	KeyWaitingLoRA    = "waiting_lora_adapters"
	KeyRunningLoRA    = "running_lora_adapters"
	KeyPriority       = "priority" // under priority scheduling, see Descriptor.Priority
	KeyPolicy         = "policy"
	KeyStage          = "stage"
	KeyOutcome        = "outcome"   // store decision of the SimpleCPUOffloadConnector
	KeyPhase          = "phase"     // of its loads: issued or completed
	KeyOperation      = "operation" // of the API server's sleep mode and weight-transfer operations

	// The labels of vllm:simple_kv_offload_info.
	KeyOffloadBackend = "backend"
	KeyPageCache      = "page_cache"
	KeyLazyOffload    = "lazy_offload"
	KeyCapacityBlocks = "capacity_blocks"

	// OpenTelemetry GenAI semantic-convention attributes, carried by the
	// GenAI server metrics (WithGenAISemconv) and client metrics.
	KeyGenAIOperationName = "gen_ai.operation.name"
	KeyGenAIProviderName  = "gen_ai.provider.name"
	KeyGenAIRequestModel  = "gen_ai.request.model"
	KeyErrorType          = "error.type"
	// KeyGenAIResponseModel is the model a front end's response named
	// (stats.ObservedRequest.ResponseModel), at most MaxResponseModels
	// values per Engine, the rest ResponseModelOther.
	KeyGenAIResponseModel = "gen_ai.response.model"
)

// Label values of the waiting reason attribute.
const (
	WaitingCapacity = "capacity"
	WaitingDeferred = "deferred"
)

// Label values of the scheduler policy attribute (vllm:scheduler_policy_info).
const (
	PolicyFCFS     = "fcfs"
	PolicyPriority = "priority"
)

// Kind is the kind of an instrument.
type Kind uint8

// The kinds of instruments.
const (
	// Counter: a monotonic sum (exported with _total).
	Counter Kind = iota
	// Gauge: the last value.
	Gauge
	// Histogram: a distribution in buckets.
	Histogram
)

// String returns "counter", "gauge" or "histogram".
func (k Kind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "unknown"
}

// Feature says when an instrument's series exist.
type Feature uint8

const (
	// Always: pre-created at zero for every engine. OpenTelemetry cannot
	// create a histogram point without a measurement: package exporters'
	// Prometheus handler completes absent histogram series at zero.
	Always Feature = iota
	// KVConnector: with WithKVConnector, or when a step reports connector data.
	KVConnector
	// SpecDecoding: with WithSpecDecoding, or when a step reports drafts.
	SpecDecoding
	// LoRA: when a step reports LoRA state.
	LoRA
	// KVResidency: with WithKVResidency, or when a step reports sampled KV
	// block evictions.
	KVResidency
	// CacheConfig: with WithCacheConfig.
	CacheConfig
	// Corruption: with WithCorruptionDetection, or when an iteration reports
	// corrupted requests.
	Corruption
	// PriorityScheduling: with WithPriorityScheduling only.
	PriorityScheduling
	// KVOffload: with WithKVOffload, or when a step reports offloading data.
	KVOffload
	// KVOffloadCPU: with WithKVOffloadCPU, or when a step reports a CPU
	// offload tier.
	KVOffloadCPU
	// KVConsumer: with WithKVConsumer, or when a step reports KV fetch stages.
	KVConsumer
)

// Descriptor describes one instrument the Recorder creates.
type Descriptor struct {
	Name        string
	Kind        Kind
	Integer     bool // int64 measurements (float64 otherwise)
	Unit        string
	Description string
	// Attributes are the keys beyond model_name and engine (for the info
	// gauges: instead of them).
	Attributes []string
	// Buckets are the advisory histogram boundaries; nil for a token-count
	// histogram, whose boundaries are LengthBuckets(max model length).
	Buckets []float64
	// LengthBuckets marks token-count histograms bucketed by LengthBuckets.
	LengthBuckets bool
	// Recorded says when a measurement is made.
	Recorded string
	Feature  Feature
	// Priority marks the finished-request families that carry the priority
	// label (KeyPriority) under priority scheduling (WithPriorityScheduling).
	Priority bool
	// FrontEnd marks a family vLLM's front end counts before any engine
	// (NameAdmissionRejections): it carries model_name but no engine, one
	// series set per Recorder.
	FrontEnd bool
}

const (
	perStep     = "each scheduler step (RecordScheduler)"
	perIter     = "each iteration (RecordIteration)"
	perFinished = "each finished request (RecordFinished, or RecordIteration for Iteration.Finished)"
	// perServerTimed adds RecordRequest, which has prefill and decode times only from the server.
	perServerTimed = perFinished + "; RecordRequest when the server reports them (stats.ObservedRequest.ServerTimes)"
)

var genAIAttrs = []string{KeyGenAIOperationName, KeyGenAIProviderName, KeyGenAIRequestModel}

// catalog is the one list of instruments; Descriptors returns a copy.
var catalog = []Descriptor{
	{Name: NameNumRequestsRunning, Kind: Gauge, Integer: true, Unit: "{request}", Recorded: perStep,
		Description: "Number of requests in the model execution batches."},
	{Name: NameNumRequestsWaiting, Kind: Gauge, Integer: true, Unit: "{request}", Recorded: perStep,
		Description: "Number of requests waiting to be processed, for capacity or deferred."},
	{Name: NameNumRequestsWaitingByReason, Kind: Gauge, Integer: true, Unit: "{request}", Recorded: perStep,
		Attributes:  []string{KeyWaitingReason},
		Description: "Number of waiting requests by reason: capacity (no room to schedule) or deferred (for example waiting for remote KV)."},
	{Name: NameEngineSleepState, Kind: Gauge, Integer: true, Recorded: perStep,
		Attributes:  []string{KeySleepState},
		Description: "Engine sleep state: 1 for the current state (awake, weights_offloaded or discard_all), 0 for the others."},
	{Name: NameKVCacheUsage, Kind: Gauge, Unit: "1", Recorded: perStep,
		Description: "Fraction of KV cache blocks in use, from 0 to 1 (1 means full)."},
	{Name: NamePrefixCacheQueries, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perStep,
		Description: "Prompt tokens looked up in the local prefix cache (preempted requests excluded)."},
	{Name: NamePrefixCacheHits, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perStep,
		Description: "Prompt tokens found in the local prefix cache."},
	{Name: NameExternalPrefixCacheQueries, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perStep,
		Description: "Prompt tokens looked up through the KV connector (external prefix cache); 0 without a connector."},
	{Name: NameExternalPrefixCacheHits, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perStep,
		Description: "Prompt tokens found through the KV connector (external prefix cache); 0 without a connector."},
	{Name: NameMMCacheQueries, Kind: Counter, Integer: true, Unit: "{item}", Recorded: perStep,
		Description: "Multimodal items looked up in the multimodal cache."},
	{Name: NameMMCacheHits, Kind: Counter, Integer: true, Unit: "{item}", Recorded: perStep,
		Description: "Multimodal items found in the multimodal cache."},
	{Name: NameNumPreemptions, Kind: Counter, Integer: true, Unit: "{preemption}", Recorded: perIter,
		Description: "Cumulative number of request preemptions by the engine."},
	{Name: NamePromptTokens, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perIter,
		Attributes:  []string{KeySource},
		Description: "Prompt tokens of requests that produced their first output, by source: local_compute, local_cache_hit or external_kv_transfer."},
	{Name: NamePromptTokensCached, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perIter,
		Attributes:  []string{KeySource},
		Description: "Prompt tokens not computed here (local prefix cache hits plus KV received through a connector) of requests that produced their first output, by the tier the KV came from: device, host, p2p, disk or external_unspecified."},
	{Name: NameGenerationTokens, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perIter,
		Description: "Generation tokens emitted."},
	{Name: NameRequestSuccess, Kind: Counter, Integer: true, Unit: "{request}", Recorded: perFinished,
		Attributes:  []string{KeyFinishedReason},
		Description: "Finished requests by finish reason: stop, length, abort, error or repetition."},
	{Name: NameAdmissionRejections, Kind: Counter, Integer: true, Unit: "{request}", Recorded: perAdmission, FrontEnd: true,
		Attributes: []string{KeyWaitingReason},
		Description: "Admission attempts the front end refused (HTTP 503) because a queue limit was reached, by reason: " +
			admissionReasonList() + "; one per attempt, whatever its n."},
	{Name: NameCorruptedRequests, Kind: Counter, Integer: true, Unit: "{request}", Recorded: perIter, Feature: Corruption,
		Description: "Requests whose outputs were found corrupted (for example NaN logits)."},
	{Name: NameNumRequestsKVFetchByStage, Kind: Gauge, Integer: true, Unit: "{request}", Recorded: perStep, Feature: KVConsumer,
		Attributes:  []string{KeyStage},
		Description: "Waiting requests of a KV consumer by the stage of their KV load: waiting_to_start, in_progress or completed_waiting."},
	{Name: NameEstimatedFlopsPerGPU, Kind: Counter, Unit: "{flop}", Recorded: perStep,
		Description: "Estimated floating-point operations per GPU (for model FLOPs utilization); 0 while the engine reports no estimate."},
	{Name: NameEstimatedReadBytesPerGPU, Kind: Counter, Unit: "By", Recorded: perStep,
		Description: "Estimated bytes read from memory per GPU (weights and KV cache); 0 while the engine reports no estimate."},
	{Name: NameEstimatedWriteBytesPerGPU, Kind: Counter, Unit: "By", Recorded: perStep,
		Description: "Estimated bytes written to memory per GPU (KV cache); 0 while the engine reports no estimate."},

	{Name: NameRequestPromptTokens, Kind: Histogram, Integer: true, Unit: "{token}", LengthBuckets: true, Recorded: perFinished,
		Description: "Prompt length of finished requests, in tokens."},
	{Name: NameRequestGenerationTokens, Kind: Histogram, Integer: true, Unit: "{token}", LengthBuckets: true, Recorded: perFinished,
		Description: "Generation tokens of finished requests."},
	{Name: NameIterationTokens, Kind: Histogram, Integer: true, Unit: "{token}", Buckets: iterationTokensBuckets, Recorded: perIter,
		Description: "Tokens processed per engine step: prompt tokens computed in the step plus generation tokens. Prefix cache hits and KV received from other nodes are not work done in the step and are not counted."},
	{Name: NameRequestMaxNumGenerationTokens, Kind: Histogram, Integer: true, Unit: "{token}", LengthBuckets: true, Recorded: perFinished,
		Description: "Most generation tokens among a request's n children, observed when the last child finishes."},
	{Name: NameRequestParamsN, Kind: Histogram, Integer: true, Unit: "{request}", Buckets: paramsNBuckets, Recorded: perFinished,
		Description: "The sampling parameter n of finished requests, observed once per parent request."},
	{Name: NameRequestParamsMaxTokens, Kind: Histogram, Integer: true, Unit: "{token}", LengthBuckets: true, Recorded: perFinished,
		Description: "The max_tokens parameter of finished requests that set it."},
	{Name: NameRequestPrefillKVComputedTokens, Kind: Histogram, Integer: true, Unit: "{token}", LengthBuckets: true, Recorded: perFinished,
		Description: "Prompt tokens computed here by finished requests (prompt length minus cached tokens)."},
	{Name: NameTimeToFirstToken, Kind: Histogram, Unit: "s", Buckets: ttftBuckets, Recorded: perIter + "; " + perFinished + " under priority scheduling",
		Description: "Time from a request's arrival to its first output token."},
	{Name: NameInterTokenLatency, Kind: Histogram, Unit: "s", Buckets: itlBuckets, Recorded: perIter,
		Description: "Time between consecutive outputs of a request."},
	{Name: NameRequestTimePerOutputToken, Kind: Histogram, Unit: "s", Buckets: itlBuckets, Recorded: perFinished,
		Description: "Mean time per output token of finished requests: decode time / (generation tokens - 1), 0 with one token or none."},
	{Name: NameE2ERequestLatency, Kind: Histogram, Unit: "s", Buckets: requestLatencyBuckets, Recorded: perFinished,
		Description: "Time from a request's arrival to its finish."},
	{Name: NameRequestQueueTime, Kind: Histogram, Unit: "s", Buckets: requestLatencyBuckets, Recorded: perFinished,
		Description: "Time a request spent queued before it was first scheduled."},
	{Name: NameRequestInferenceTime, Kind: Histogram, Unit: "s", Buckets: requestLatencyBuckets, Recorded: perFinished,
		Description: "Time from a request's first scheduling to its last output token."},
	{Name: NameRequestPrefillTime, Kind: Histogram, Unit: "s", Buckets: requestLatencyBuckets, Recorded: perServerTimed,
		Description: "Time from a request's first scheduling to its first output token."},
	{Name: NameRequestDecodeTime, Kind: Histogram, Unit: "s", Buckets: requestLatencyBuckets, Recorded: perServerTimed,
		Description: "Time from a request's first output token to its last."},
	{Name: NameKVBlockLifetime, Kind: Histogram, Unit: "s", Buckets: kvResidencyBuckets, Recorded: perStep, Feature: KVResidency,
		Description: "Lifetime of sampled evicted KV cache blocks, from allocation to eviction."},
	{Name: NameKVBlockIdleBeforeEvict, Kind: Histogram, Unit: "s", Buckets: kvResidencyBuckets, Recorded: perStep, Feature: KVResidency,
		Description: "Idle time of sampled evicted KV cache blocks, from last access to eviction."},
	{Name: NameKVBlockReuseGap, Kind: Histogram, Unit: "s", Buckets: kvResidencyBuckets, Recorded: perStep, Feature: KVResidency,
		Description: "Time between consecutive accesses of sampled evicted KV cache blocks."},
	{Name: NameRequestNumPreemptions, Kind: Histogram, Integer: true, Unit: "{preemption}", Buckets: numPreemptionsBuckets, Recorded: perFinished,
		Description: "Times each finished request was preempted, observed for every finished request (0 included)."},

	{Name: NameSpecDecodeNumDrafts, Kind: Counter, Integer: true, Unit: "{draft}", Recorded: perStep, Feature: SpecDecoding,
		Description: "Speculative decoding drafts proposed."},
	{Name: NameSpecDecodeNumDraftTokens, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perStep, Feature: SpecDecoding,
		Description: "Speculative decoding draft tokens proposed."},
	{Name: NameSpecDecodeNumAcceptedTokens, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perStep, Feature: SpecDecoding,
		Description: "Speculative decoding draft tokens accepted."},
	{Name: NameSpecDecodeNumAcceptedTokensPerPos, Kind: Counter, Integer: true, Unit: "{token}", Recorded: perStep, Feature: SpecDecoding,
		Attributes:  []string{KeyPosition},
		Description: "Speculative decoding draft tokens accepted, by draft position."},

	{Name: NameNIXLXferTime, Kind: Histogram, Unit: "s", Buckets: nixlXferTimeBuckets, Recorded: perStep, Feature: KVConnector,
		Description: "Duration of KV transfers through the connector."},
	{Name: NameNIXLPostTime, Kind: Histogram, Unit: "s", Buckets: nixlPostTimeBuckets, Recorded: perStep, Feature: KVConnector,
		Description: "Time to post KV transfers to the connector."},
	{Name: NameNIXLBytesTransferred, Kind: Histogram, Integer: true, Unit: "By", Buckets: nixlBytesBuckets, Recorded: perStep, Feature: KVConnector,
		Description: "Bytes moved per KV transfer through the connector."},
	{Name: NameNIXLNumDescriptors, Kind: Histogram, Integer: true, Unit: "{descriptor}", Buckets: nixlDescriptorBuckets, Recorded: perStep, Feature: KVConnector,
		Description: "Descriptors per KV transfer through the connector."},
	{Name: NameNIXLNumFailedTransfers, Kind: Counter, Integer: true, Unit: "{transfer}", Recorded: perStep, Feature: KVConnector,
		Description: "KV transfers through the connector that failed."},
	{Name: NameNIXLNumFailedNotifs, Kind: Counter, Integer: true, Unit: "{notification}", Recorded: perStep, Feature: KVConnector,
		Description: "KV connector notifications that failed."},
	{Name: NameNIXLNumKVExpiredReqs, Kind: Counter, Integer: true, Unit: "{request}", Recorded: perStep, Feature: KVConnector,
		Description: "Requests whose transferred KV expired before it was read."},
	{Name: NameNIXLNumNotifsAfterExp, Kind: Counter, Integer: true, Unit: "{notification}", Recorded: perStep, Feature: KVConnector,
		Description: "KV connector notifications that arrived after their request's KV had expired, so its blocks may already have been reused."},

	{Name: NameLoRARequestsInfo, Kind: Gauge, Feature: LoRA,
		Recorded:    perStep + " or SetLoRA; each engine's current state, or its last states with WithLoRAHistory",
		Attributes:  []string{KeyMaxLoRA, KeyWaitingLoRA, KeyRunningLoRA},
		Description: "LoRA adapters of running and waiting requests (comma-separated names); the value is the Unix time of the update."},
	{Name: NameCacheConfigInfo, Kind: Gauge, Integer: true, Recorded: "once per engine at construction", Feature: CacheConfig,
		Attributes:  []string{KeyEngine, "<every cache config key>"},
		Description: "Information of the KV cache configuration; the value is 1."},

	{Name: NameRequestPriority, Kind: Histogram, Unit: "{priority}", Buckets: requestPriorityBuckets, Recorded: perFinished, Feature: PriorityScheduling,
		Description: "Scheduling priority of finished requests, the raw value (lower is more urgent)."},
	{Name: NameSchedulerPolicyInfo, Kind: Gauge, Integer: true, Recorded: "set at construction (WithPriorityScheduling)",
		Attributes:  []string{KeyPolicy},
		Description: "Scheduler policy: 1 for the active policy (fcfs or priority), 0 for the other."},

	{Name: NameKVOffloadLoadBytes, Kind: Counter, Integer: true, Unit: "By", Recorded: perStep, Feature: KVOffload,
		Description: "Bytes loaded from the KV offload medium (host memory or disk) to the accelerator."},
	{Name: NameKVOffloadLoadTime, Kind: Counter, Unit: "s", Recorded: perStep, Feature: KVOffload,
		Description: "Time spent loading KV from the offload medium to the accelerator, in seconds."},
	{Name: NameKVOffloadLoadSize, Kind: Histogram, Integer: true, Unit: "By", Buckets: kvOffloadSizeBuckets, Recorded: perStep, Feature: KVOffload,
		Description: "Bytes per KV offload load."},
	{Name: NameKVOffloadStoreBytes, Kind: Counter, Integer: true, Unit: "By", Recorded: perStep, Feature: KVOffload,
		Description: "Bytes stored from the accelerator to the KV offload medium."},
	{Name: NameKVOffloadStoreTime, Kind: Counter, Unit: "s", Recorded: perStep, Feature: KVOffload,
		Description: "Time spent storing KV from the accelerator to the offload medium, in seconds."},
	{Name: NameKVOffloadStoreSize, Kind: Histogram, Integer: true, Unit: "By", Buckets: kvOffloadSizeBuckets, Recorded: perStep, Feature: KVOffload,
		Description: "Bytes per KV offload store."},
	{Name: NameKVOffloadLookupSync, Kind: Histogram, Unit: "s", Buckets: kvOffloadLookupSyncBuckets, Recorded: perStep, Feature: KVOffload,
		Description: "Time of one KV offload lookup call."},
	{Name: NameKVOffloadLookupAsync, Kind: Histogram, Unit: "s", Buckets: kvOffloadLookupAsyncBuckets, Recorded: perStep, Feature: KVOffload,
		Description: "Time from a request's KV offload lookup first deferring to the lookup that resolved it, or to the request's finish."},
	{Name: NameKVOffloadAllocFail, Kind: Counter, Integer: true, Unit: "{allocation}", Recorded: perStep, Feature: KVOffload,
		Description: "KV offload stores that could not allocate space on the medium."},
	{Name: NameKVOffloadCPUUsage, Kind: Gauge, Unit: "1", Recorded: perStep, Feature: KVOffloadCPU,
		Description: "Fraction of the CPU KV offload cache pinned by transfers in flight, from 0 to 1."},
	{Name: NameKVOffloadCPUWrite, Kind: Gauge, Unit: "1", Recorded: perStep, Feature: KVOffloadCPU,
		Description: "Fraction of the CPU KV offload cache pinned by stores in flight, from 0 to 1."},
	{Name: NameKVOffloadCPURead, Kind: Gauge, Unit: "1", Recorded: perStep, Feature: KVOffloadCPU,
		Description: "Fraction of the CPU KV offload cache pinned by loads in flight, from 0 to 1."},
	{Name: NameKVOffloadCPUAlloc, Kind: Histogram, Integer: true, Unit: "{chunk}", Buckets: kvOffloadCPUAllocationBuckets, Recorded: perStep, Feature: KVOffloadCPU,
		Description: "CPU chunks requested by each KV offload store allocation."},

	{Name: NameKVOffloadStoresSkipped, Kind: Counter, Integer: true, Unit: "{block}", Recorded: perStep, Feature: KVOffloadStoreThreshold,
		Description: "KV blocks a CPU offload tier did not store because they had been offered fewer times than its store threshold."},

	// The SimpleCPUOffloadConnector's families (simpleoffload.go).
	{Name: NameSimpleKVOffloadSaveOutcomes, Kind: Counter, Integer: true, Unit: "{store}", Recorded: perStep, Feature: SimpleCPUOffload,
		Attributes: []string{KeyOutcome},
		Description: "Store admission decisions of the SimpleCPUOffloadConnector, by outcome: " + saveOutcomeList() +
			"; vLLM classifies its eager mode's boundary hand-off stores, not its lazy mode's."},
	{Name: NameSimpleKVOffloadLoadBlocks, Kind: Counter, Integer: true, Unit: "{block}", Recorded: perStep, Feature: SimpleCPUOffload,
		Attributes:  []string{KeyPhase},
		Description: "KV blocks of the SimpleCPUOffloadConnector's loads, by phase: issued when dispatched to the workers, completed when the load finished successfully."},
	{Name: NameSimpleKVOffloadUsedBlocks, Kind: Gauge, Integer: true, Unit: "{block}", Recorded: perStep, Feature: SimpleCPUOffload,
		Description: "Offload pool blocks pinned by transfers in flight or cache hits (capacity minus free; evictable cached blocks are not counted)."},
	{Name: NameSimpleKVOffloadPendingStore, Kind: Gauge, Integer: true, Unit: "{block}", Recorded: perStep, Feature: SimpleCPUOffload,
		Description: "Offload pool blocks of pending stores: queued, issued to the workers or awaiting release; a value that keeps growing means a stuck transfer."},
	{Name: NameSimpleKVOffloadInfo, Kind: Gauge, Integer: true, Recorded: "once per engine at construction (WithSimpleKVOffload)", Feature: SimpleCPUOffload,
		Attributes:  []string{KeyOffloadBackend, KeyPageCache, KeyLazyOffload, KeyCapacityBlocks},
		Description: "The SimpleCPUOffloadConnector's deployment: backend cpu or disk, page_cache and lazy_offload true or false, capacity_blocks the pool's size; the value is 1."},

	// The API server's operations (serverops.go): like vLLM's, their
	// series carry only the operation.
	{Name: NameSleepModeOperationDuration, Kind: Histogram, Unit: "s", Buckets: serverOperationBuckets, Recorded: perSleepOperation, Feature: ServerOperations,
		Attributes:  []string{KeyOperation},
		Description: "Duration of one sleep mode operation of the API server: sleep, release_kv_cache_memory or wake."},
	{Name: NameRLWeightUpdateOperationDuration, Kind: Histogram, Unit: "s", Buckets: serverOperationBuckets, Recorded: perWeightOperation, Feature: ServerOperations,
		Attributes:  []string{KeyOperation},
		Description: "Duration of one weight-transfer operation of the API server (reinforcement learning): init, start, start_draft, update or finish."},

	// The P/D router families (router.go) take vLLM's TTFT buckets: each is
	// a part of the client's time to first token, so the parts and the
	// whole compare bucket by bucket.
	{Name: NamePDPrefillLegDuration, Kind: Histogram, Unit: "s", Buckets: ttftBuckets, Recorded: perRouted, Feature: PDRouting,
		Description: "Time from sending a routed request's prefill leg to the end of its response."},
	{Name: NamePDDecodeLegTimeToFirstChunk, Kind: Histogram, Unit: "s", Buckets: ttftBuckets, Recorded: perRouted + ", streamed decode legs", Feature: PDRouting,
		Description: "Time from sending a routed request's decode leg to its first content chunk."},
	{Name: NamePDHandoffDuration, Kind: Histogram, Unit: "s", Buckets: ttftBuckets, Recorded: perRouted + ", decode leg sent after the prefill leg ended", Feature: PDRouting,
		Description: "Time from the end of a routed request's prefill leg to the start of its decode leg."},
	{Name: NameGatewayRequestAttempts, Kind: Histogram, Integer: true, Unit: "{attempt}", Buckets: attemptsBuckets, Feature: HTTPClient,
		Recorded:    "each client request whose legs a gateway or router sent through openaihttp's transport, at its end (Engine.RecordAttempts)",
		Description: "Requests a gateway or router sent upstream for one client request: 1, or more with retries and fallbacks to another backend."},

	// The Recorder's own counter of refused input (refusal.go).
	{Name: NameInvalidEvents, Kind: Counter, Integer: true, Unit: "{event}", Feature: InvalidInput,
		Recorded:   "each refused event, request or step, each request recorded without a value beyond its bound, once per engine and feature for feature data without its option, and once per engine and Prometheus handler that found the engine on a provider Prometheus.Wrap did not wrap",
		Attributes: []string{KeyKind},
		Description: "Input the Recorder refused as invalid, so recorded nothing of, by kind: " + refusalKinds() +
			"; feature_not_configured counts a feature's data reported without its option (that data is recorded), value_dropped a request recorded without a count beyond stats.MaxRequestTokens or without cached tokens above its prompt, unwrapped_provider an engine whose series a Prometheus handler serves without its zero series (the engine's Recorder is not on the handler's Prometheus.Wrap provider)."},
}

// Descriptors returns every instrument the Recorder creates, in a stable order.
func Descriptors() []Descriptor { return copyDescriptors(catalog) }

// legacyCatalog are the instruments of families that older vLLM versions
// exported and later ones removed without a successor.
var legacyCatalog = []Descriptor{
	// vLLM PR #33290 added it, #38709 removed it: per request, the prompt
	// token vLLM recomputed when the whole prompt was cached
	// (vllm/v1/metrics/stats.py, PromptTokenStats.update_from_output: 1 when
	// num_cached_tokens + 1 == prompt_len, counted at the first output).
	{Name: NamePromptTokensRecomputed, Kind: Counter, Integer: true, Unit: "{token}",
		Recorded: perFinished + ", when it computed exactly one prompt token (PrefillComputedTokens)",
		Description: "Cached prompt tokens recomputed for the forward pass: 1 for each request that computed exactly one " +
			"prompt token (its whole prompt cached but the last token, which the engine recomputes)."},
}

// LegacyDescriptors returns the instruments the Recorder creates besides
// Descriptors' for families of older vLLM versions that have no successor;
// package views exports them only for those versions (views.WithVersion).
func LegacyDescriptors() []Descriptor { return copyDescriptors(legacyCatalog) }

// copyDescriptors returns a deep copy of a catalog.
func copyDescriptors(catalog []Descriptor) []Descriptor {
	out := make([]Descriptor, len(catalog))
	for i, d := range catalog {
		d.Attributes = append([]string(nil), d.Attributes...)
		d.Buckets = append([]float64(nil), d.Buckets...)
		d.Priority = slices.Contains(priorityLabelled, d.Name)
		out[i] = d
	}
	return out
}

// lookup returns the descriptor of an instrument name.
func lookup(name string) (Descriptor, bool) {
	for _, d := range slices.Concat(catalog, clientCatalog, serverCatalog, httpCatalog, legacyCatalog, usageCatalog) {
		if d.Name == name {
			d.Priority = slices.Contains(priorityLabelled, d.Name)
			return d, true
		}
	}
	return Descriptor{}, false
}
