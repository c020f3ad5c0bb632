package instrument

// vLLM's bucket boundaries. Each list is defined here once; the descriptors
// carry them as advisory boundaries, which views may override.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	kvResidencyBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5,
		10, 20, 30, 60, 120, 300, 600, 1200, 1800}
	iterationTokensBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	paramsNBuckets         = []float64{1, 2, 5, 10, 20}
	nixlXferTimeBuckets    = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0}
	nixlPostTimeBuckets    = append([]float64{0.001}, nixlXferTimeBuckets...)
	nixlBytesBuckets       = powersOfTwo(11, 33, 2)
	nixlDescriptorBuckets  = []float64{10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000}
	// numPreemptionsBuckets: REQUEST_NUM_PREEMPTIONS_BUCKETS (PR #49984); the
	// first bucket holds the never and the once preempted requests together.
	numPreemptionsBuckets = []float64{1, 2, 3, 4, 5, 10, 20}
)

// attemptsBuckets are ours, for infermetrics.gateway.request.attempts: one
// per count up to 5, then 10 (a retry policy's usual bounds).
var attemptsBuckets = []float64{1, 2, 3, 4, 5, 10}

// LengthBuckets returns vLLM's 1-2-5 boundaries for token-count histograms:
// 1, 2, 5, 10, 20, 50, ... while the value is at most maxModelLen (maxModelLen
// itself is not added). LengthBuckets(4096) is [1 2 5 10 20 50 100 200 500
// 1000 2000]. A maxModelLen below 1 gives no boundaries.
func LengthBuckets(maxModelLen int) []float64 {
	var bounds []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range [...]int{1, 2, 5} {
			v := m * scale
			if v > maxModelLen {
				return bounds
			}
			bounds = append(bounds, float64(v))
		}
		if scale > maxModelLen/10 {
			// the next decade's first value, 10*scale, exceeds maxModelLen
			// (checked by division to avoid overflow)
			return bounds
		}
	}
}

// powersOfTwo returns 2^from, 2^(from+step), ... up to 2^to.
func powersOfTwo(from, to, step int) []float64 {
	var bounds []float64
	for e := from; e <= to; e += step {
		bounds = append(bounds, float64(int64(1)<<e))
	}
	return bounds
}

// Bucket boundaries of the priority scheduling and KV offloading families.
var (
	// requestPriorityBuckets are ours: vLLM's list for vllm:request_priority
	// was not readable (PR #58078's branch @04dc4606, not yet merged when
	// read); its test shows only that 1 and 10 are bounds.
	requestPriorityBuckets = []float64{-1000, -100, -10, -2, -1, 0, 1, 2, 10, 100, 1000}
	// TRANSFER_SIZE_BUCKETS and the lookup delay lists of vLLM's
	// kv_connector/v1/offloading/metrics.py; the CPU allocation list of its
	// kv_offload/cpu/spec.py (powers of 4 from 1 to 262144).
	kvOffloadSizeBuckets          = []float64{1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6}
	kvOffloadLookupSyncBuckets    = []float64{1e-5, 5e-5, 1e-4, 5e-4, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1}
	kvOffloadLookupAsyncBuckets   = []float64{1e-4, 5e-4, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}
	kvOffloadCPUAllocationBuckets = powersOfTwo(0, 18, 2)
)

// Advisory boundaries of the OpenTelemetry GenAI metrics, as the semantic
// conventions give them (open-telemetry/semantic-conventions-genai):
// gen_ai.client.token.usage's and the durations'; the client's time to
// first chunk and time per output chunk take the durations' too
// (docs/gen-ai/client-inference.md @ 024a4f94: "SHOULD be specified with
// ExplicitBucketBoundaries of [0.01, 0.02, ..., 81.92]" for both); the
// server's time to first token and time per output token have lists of
// their own (docs/gen-ai/gen-ai-metrics.md).
var (
	genAITokenUsageBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576,
		4194304, 16777216, 67108864}
	genAIDurationBuckets   = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAIChunkBuckets      = genAIDurationBuckets
	genAIServerTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	genAIServerTPOTBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
)
