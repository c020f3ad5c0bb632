package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// nativeRelError is how far, relative, a quantile read from a native
// histogram can be from the true one: one bucket, 2^(1/8) - 1 = 9.05% at
// scale 3, the coarsest the SDK's default 160 buckets reach for
// observations spanning up to 2^17 (1 ms to 100 s); see
// views.DefaultExponentialMaxSize.
var nativeRelError = math.Exp2(1.0/8) - 1

// checkNativeQuantiles compares, for TTFT and e2e latency of each role,
// histogram_quantile(0.9) of the classic series (direct scrape, vLLM's
// buckets, at directAt) and of the native series (OTLP path, exponential
// through the collector's remote write, at otlpAt) with the true 90th
// percentile of the latencies the example recorded (-observations): each
// native one is within nativeRelError, where a classic one is only known to
// lie in vLLM's bucket around the true value (up to 100% wide); and the
// native ones' worst error is below the classic ones'. (One classic value
// may be closer by luck: a true p90 just under a bucket bound.)
func (e *env) checkNativeQuantiles(t *testing.T, directAt, otlpAt time.Time) {
	b, err := os.ReadFile(e.observations)
	if err != nil {
		t.Fatalf("the example's -observations file: %v", err)
	}
	var obs map[string]map[string][]float64
	if err := json.Unmarshal(b, &obs); err != nil {
		t.Fatalf("%s: %v", e.observations, err)
	}
	var worstNative, worstClassic float64
	for _, family := range []string{"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"} {
		for _, role := range []string{"prefill", "decode"} {
			vs := slices.Sorted(slices.Values(obs[role][family]))
			if len(vs) < 20 {
				t.Errorf("%s role=%s: %d observations recorded, want at least 20", family, role, len(vs))
				continue
			}
			truth := vs[int(math.Ceil(0.9*float64(len(vs))))-1] // nearest rank
			native := fmt.Sprintf(`sum(%s{path="otlp", role=%q})`, family, role)
			if n := e.prom.scalar(t, "histogram_count("+native+")", otlpAt); n != float64(len(vs)) {
				t.Errorf("%s: %g observations in the native histogram, the example recorded %d", native, n, len(vs))
			}
			nq := e.prom.scalar(t, "histogram_quantile(0.9, "+native+")", otlpAt)
			classic := fmt.Sprintf(`sum by (le) (%s_bucket{path="direct", role=%q})`, family, role)
			cq := e.prom.scalar(t, "histogram_quantile(0.9, "+classic+")", directAt)
			// vLLM's bucket around the true value: how coarse the classic
			// estimate may be.
			var bounds []float64
			for _, s := range e.prom.mustQuery(t, classic, directAt) {
				if le, err := strconv.ParseFloat(s.labels["le"], 64); err == nil {
					bounds = append(bounds, le)
				}
			}
			slices.Sort(bounds)
			lo, hi := 0.0, math.Inf(1)
			if i, _ := slices.BinarySearch(bounds, truth); i < len(bounds) {
				hi = bounds[i]
				if i > 0 {
					lo = bounds[i-1]
				}
			}
			nErr, cErr := math.Abs(nq-truth)/truth, math.Abs(cq-truth)/truth
			t.Logf("%s role=%s: true p90 %.4gs of %d; native %.4gs (%.1f%% off), classic %.4gs (%.1f%% off, bucket %g..%g)",
				family, role, truth, len(vs), nq, 100*nErr, cq, 100*cErr, lo, hi)
			if !(nErr <= nativeRelError) {
				t.Errorf("%s role=%s: native p90 %.4g is %.1f%% from the true %.4g, want at most %.2f%%",
					family, role, nq, 100*nErr, truth, 100*nativeRelError)
			}
			worstNative, worstClassic = max(worstNative, nErr), max(worstClassic, cErr)
		}
	}
	if !(worstNative < worstClassic) {
		t.Errorf("worst p90 error: native %.1f%%, classic %.1f%%; want native below classic", 100*worstNative, 100*worstClassic)
	}
	t.Logf("worst p90 error: native %.1f%%, classic %.1f%%", 100*worstNative, 100*worstClassic)
}
