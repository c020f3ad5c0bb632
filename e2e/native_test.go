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
// percentile of the latencies the example recorded (-observations): the
// native one is within nativeRelError, and closer than the classic one
// unless vLLM's bucket around the true value is that narrow too.
func (e *env) checkNativeQuantiles(t *testing.T, directAt, otlpAt time.Time) {
	b, err := os.ReadFile(e.observations)
	if err != nil {
		t.Fatalf("the example's -observations file: %v", err)
	}
	var obs map[string]map[string][]float64
	if err := json.Unmarshal(b, &obs); err != nil {
		t.Fatalf("%s: %v", e.observations, err)
	}
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
			if classicWidth := (hi - lo) / math.Max(lo, math.SmallestNonzeroFloat64); nErr > cErr && classicWidth > nativeRelError {
				t.Errorf("%s role=%s: native p90 %.4g (%.1f%% off) no closer to the true %.4g than classic %.4g (%.1f%% off)",
					family, role, nq, 100*nErr, truth, cq, 100*cErr)
			}
		}
	}
}
