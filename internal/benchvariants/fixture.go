package benchvariants

import (
	"errors"
	"maps"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// The configuration every variant is built with.
const (
	// Model is the served model name (model_name).
	Model = "meta-llama/Llama-3.1-8B-Instruct"
	// MaxModelLen sets the 1-2-5 token-count buckets.
	MaxModelLen = 8192
	// SpecTokens is the number of speculative draft positions.
	SpecTokens = 4
	// Batch is the number of running requests that decode in DecodeStep.
	Batch = 256
	// NewRequests is the number of requests that emit their first token in
	// DecodeStep; Finishing the number that finish in it.
	NewRequests = 4
	Finishing   = 4
)

var cacheConfig = stats.CacheConfig{
	"block_size": "16", "num_gpu_blocks": "8192", "cache_dtype": "auto",
	"enable_prefix_caching": "True", "gpu_memory_utilization": "0.9",
}

// CacheConfig returns the KV cache configuration exported by
// vllm:cache_config_info.
func CacheConfig() stats.CacheConfig { return maps.Clone(cacheConfig) }

// RecorderOptions returns the options of the infermetrics Recorder the
// variants are compared with: the model, the engines, the max model length,
// a KV connector, speculative decoding and a cache configuration, so that
// every family exists. The fixture's corrupted requests come without
// WithCorruptionDetection, as in the variants: the Recorder's report of
// that is dropped, every other refusal goes on to otel.Handle.
func RecorderOptions(mp metric.MeterProvider, ranks ...int) []instrument.Option {
	return []instrument.Option{
		instrument.WithErrorHandler(func(err error) {
			if !errors.Is(err, instrument.ErrFeatureNotConfigured) {
				otel.Handle(err)
			}
		}),
		instrument.WithMeterProvider(mp),
		instrument.WithModelName(Model),
		instrument.WithEngines(ranks...),
		instrument.WithMaxModelLen(MaxModelLen),
		instrument.WithKVConnector(),
		instrument.WithSpecDecoding(SpecTokens),
		instrument.WithCacheConfig(CacheConfig()),
		instrument.WithKVConsumer(),
	}
}

// finished returns the i-th finished request of the fixtures: a few hundred
// to a few thousand prompt tokens, part of them cached.
func finished(i int, reason stats.FinishReason) stats.FinishedRequest {
	prompt := int64(300 + 700*i)
	gen := int64(64 + 96*i)
	if reason == stats.FinishLength {
		gen = 512
	}
	decode := 0.02 * float64(gen-1)
	return stats.FinishedRequest{
		Reason:                reason,
		PromptTokens:          prompt,
		GenerationTokens:      gen,
		PrefillComputedTokens: prompt / 3,
		MaxTokens:             512,
		N:                     1,
		MaxGenerationTokens:   gen,
		QueueTime:             0.05 + 0.1*float64(i),
		PrefillTime:           0.08 + 0.02*float64(i),
		DecodeTime:            decode,
		InferenceTime:         0.08 + 0.02*float64(i) + decode,
		E2ELatency:            0.13 + 0.12*float64(i) + decode,
		TimePerOutputToken:    decode / float64(gen-1),
	}
}

// Finished returns one finished request (stop), as RecordFinished gets it.
func Finished() stats.FinishedRequest { return finished(1, stats.FinishStop) }

// DecodeStep returns one decode step of a batch of Batch running requests:
// every one of them emits a token (Batch inter-token latencies), NewRequests
// requests emit their first token (a TTFT each, and their prompts by
// source: computed here, local prefix cache hits and KV received through the
// connector) and Finishing requests finish (stop, length, stop, abort).
func DecodeStep() stats.Iteration {
	it := stats.Iteration{
		PromptTokens: stats.PromptTokens{
			// 4 prompts: 812 computed + 200 cached; 2048 transferred;
			// 1500 computed + 500 cached; 96 computed + 4000 transferred.
			Computed:           812 + 1500 + 96,
			LocalCacheHit:      200 + 500,
			ExternalKVTransfer: 2048 + 4000,
		},
		GenerationTokens: Batch + NewRequests,
		TTFT:             []float64{0.045, 0.12, 0.31, 0.82},
		ITL:              make([]float64, Batch),
	}
	for i := range it.ITL {
		// 8 ms to 90 ms: spread over the first ten ITL buckets.
		it.ITL[i] = 0.008 + 0.00032*float64(i)
	}
	for i, r := range []stats.FinishReason{stats.FinishStop, stats.FinishLength, stats.FinishStop, stats.FinishAbort} {
		it.Finished = append(it.Finished, finished(i, r))
	}
	return it
}

// SchedulerStep returns one scheduler step with every optional part: the
// gauges, prefix and multimodal cache lookups, KV connector lookups and
// transfers, speculative decoding on every draft position, an unchanged LoRA
// state and two sampled KV block evictions.
func SchedulerStep() stats.Scheduler {
	return stats.Scheduler{
		Running: Batch, WaitingCapacity: 12, WaitingDeferred: 3, KVCacheUsage: 0.83,
		PrefixCache:          stats.CacheQueries{Queries: 3584, Hits: 1200},
		MultimodalCache:      stats.CacheQueries{Queries: 2, Hits: 1},
		ConnectorPrefixCache: &stats.CacheQueries{Queries: 2384, Hits: 2048},
		SpecDecoding: &stats.SpecDecoding{Drafts: Batch, DraftTokens: SpecTokens * Batch, AcceptedTokens: 700,
			AcceptedPerPosition: []int64{250, 200, 150, 100}},
		LoRA: &stats.LoRA{MaxLoRA: 4, Running: []string{"chat-adapter", "sql-adapter"}, Waiting: []string{"summarize"}},
		KVTransfer: &stats.KVTransfer{
			XferTime: []float64{0.012, 0.031}, PostTime: []float64{0.0008, 0.0021},
			BytesTransferred: []int64{16 << 20, 4 << 20}, NumDescriptors: []int64{64, 32},
		},
		Evictions: []stats.KVEviction{
			{Lifetime: 12.5, IdleBeforeEvict: 3.2, ReuseGaps: []float64{0.4, 1.1, 2.5}},
			{Lifetime: 48, IdleBeforeEvict: 20, ReuseGaps: []float64{5, 9}},
		},
	}
}

// ScrapeSteps returns what the scrape benchmarks record on engine rank
// before scraping: decode steps with preemptions and corrupted requests,
// finished requests of every reason and a scheduler step, so that every
// family (optional ones included) has a series and every histogram
// observations. Values vary with the rank (modulo 4).
func ScrapeSteps(rank int) ([]stats.Iteration, stats.Scheduler) {
	rank %= 4
	var its []stats.Iteration
	for k := range 3 {
		it := DecodeStep()
		it.Preemptions = int64(k + rank)
		it.CorruptedRequests = int64(k % 2)
		for i := range it.ITL {
			it.ITL[i] *= 1 + 0.25*float64(rank+k)
		}
		its = append(its, it)
	}
	// One finished request of every reason, an error among them.
	var last stats.Iteration
	for i, r := range stats.FinishReasons() {
		last.Finished = append(last.Finished, finished(i+rank, r))
	}
	last.GenerationTokens = 1
	last.ITL = []float64{0.02}
	its = append(its, last)
	s := SchedulerStep()
	s.Running += int64(rank)
	s.KVCacheUsage = 0.2 * float64(rank+1) // 0.2 to 0.8
	s.SleepState = stats.SleepState(rank % 3)
	s.KVTransfer.FailedTransfers = 1
	s.KVTransfer.FailedNotifications = 2
	s.KVTransfer.ExpiredRequests = 3
	s.KVTransfer.NotificationsAfterExpiry = 1
	s.Perf = &stats.PerfEstimate{FLOPs: 2 * 8e9 * Batch, ReadBytes: 16e9, WriteBytes: float64(Batch * 128 << 10)}
	s.KVFetch = &stats.KVFetch{WaitingToStart: 1, InProgress: int64(rank), CompletedWaiting: 2}
	return its, s
}
