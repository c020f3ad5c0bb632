package views

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
)

// BucketKind is one of vLLM's histogram bucket kinds: the histograms of a
// kind share one list of boundaries, which vLLM's --custom-histogram-buckets
// replaces for all of them (histogram_buckets(kind, overrides=...) in
// vllm/v1/metrics/buckets.py; vllm/v1/metrics/loggers.py gives each
// histogram its kind). WithCustomHistogramBuckets takes the same mapping.
type BucketKind string

// vLLM's bucket kinds.
const (
	// BucketKindRequestLatency: the e2e, queue, inference, prefill and
	// decode time histograms.
	BucketKindRequestLatency BucketKind = "request_latency"
	// BucketKindTimeToFirstToken: vllm:time_to_first_token_seconds.
	BucketKindTimeToFirstToken BucketKind = "time_to_first_token"
	// BucketKindInterTokenLatency: the inter-token latency and the
	// request's time per output token.
	BucketKindInterTokenLatency BucketKind = "inter_token_latency"
	// BucketKindIterationTokens: vllm:iteration_tokens_total.
	BucketKindIterationTokens BucketKind = "iteration_tokens"
	// BucketKindRequestParamsN: vllm:request_params_n.
	BucketKindRequestParamsN BucketKind = "request_params_n"
	// BucketKindRequestNumPreemptions: vllm:request_num_preemptions.
	BucketKindRequestNumPreemptions BucketKind = "request_num_preemptions"
	// BucketKindRequestTokens: the token-count histograms, whose default
	// is 1-2-5 up to the max model length.
	BucketKindRequestTokens BucketKind = "request_tokens"
	// BucketKindKVCacheResidency: the KV block lifetime, idle time before
	// eviction and reuse gap histograms.
	BucketKindKVCacheResidency BucketKind = "kv_cache_residency"
)

// bucketKinds are the instruments of each kind, as vLLM's loggers.py
// @5b846bf6 (docs/metrics.md) builds its histograms.
var bucketKinds = []struct {
	kind        BucketKind
	instruments []string
}{
	{BucketKindRequestLatency, []string{instrument.NameE2ERequestLatency, instrument.NameRequestQueueTime,
		instrument.NameRequestInferenceTime, instrument.NameRequestPrefillTime, instrument.NameRequestDecodeTime}},
	{BucketKindTimeToFirstToken, []string{instrument.NameTimeToFirstToken}},
	{BucketKindInterTokenLatency, []string{instrument.NameInterTokenLatency, instrument.NameRequestTimePerOutputToken}},
	{BucketKindIterationTokens, []string{instrument.NameIterationTokens}},
	{BucketKindRequestParamsN, []string{instrument.NameRequestParamsN}},
	{BucketKindRequestNumPreemptions, []string{instrument.NameRequestNumPreemptions}},
	{BucketKindRequestTokens, []string{instrument.NameRequestPromptTokens, instrument.NameRequestGenerationTokens,
		instrument.NameRequestMaxNumGenerationTokens, instrument.NameRequestParamsMaxTokens,
		instrument.NameRequestPrefillKVComputedTokens}},
	{BucketKindKVCacheResidency, []string{instrument.NameKVBlockLifetime, instrument.NameKVBlockIdleBeforeEvict,
		instrument.NameKVBlockReuseGap}},
}

// BucketKinds returns vLLM's bucket kinds, in a stable order.
func BucketKinds() []BucketKind {
	out := make([]BucketKind, len(bucketKinds))
	for i, k := range bucketKinds {
		out[i] = k.kind
	}
	return out
}

// Families returns the histogram families of VLLM of the kind, by their
// exposed names; nil for a kind vLLM does not have.
func (k BucketKind) Families() []string {
	var out []string
	for _, f := range Families() {
		if slices.Contains(k.instruments(), f.Instrument.Name) {
			out = append(out, f.Name)
		}
	}
	return out
}

// instruments returns the instruments of the kind.
func (k BucketKind) instruments() []string {
	for _, b := range bucketKinds {
		if b.kind == k {
			return b.instruments
		}
	}
	return nil
}

// WithCustomHistogramBuckets replaces the buckets of every histogram of
// each kind it names, as vLLM's --custom-histogram-buckets does: decode
// the flag's JSON object (for example {"request_latency": [0.1, 1, 10]})
// into the map. The legacy families of older versions (WithVersion) whose
// instrument is of a kind take its buckets too. A family's own WithBuckets
// or WithExponential wins over its kind's, and WithExponentialLatency
// leaves a kind given here with these buckets. A kind vLLM does not have,
// and boundaries WithBuckets would refuse, are refused (ErrOption); so is
// the option on Semconv.
func WithCustomHistogramBuckets(overrides map[BucketKind][]float64) Option {
	kinds := slices.Sorted(maps.Keys(overrides))
	opts := make([]kindBucketsOption, 0, len(kinds))
	for _, k := range kinds {
		opts = append(opts, kindBucketsOption{k, append([]float64(nil), overrides[k]...)})
	}
	return optionFunc(func(c *config) { c.kindBuckets = append(c.kindBuckets, opts...) })
}

type kindBucketsOption struct {
	kind   BucketKind
	bounds []float64
}

// kindBucketsOf returns the boundaries set for the kind of an instrument,
// the last option winning.
func (c *config) kindBucketsOf(instrumentName string) ([]float64, bool) {
	for i := len(c.kindBuckets) - 1; i >= 0; i-- {
		if slices.Contains(c.kindBuckets[i].kind.instruments(), instrumentName) {
			return c.kindBuckets[i].bounds, true
		}
	}
	return nil, false
}

// checkKinds reports the first kind vLLM does not have or whose boundaries
// are bad.
func (c *config) checkKinds() error {
	for _, o := range c.kindBuckets {
		where := fmt.Sprintf("WithCustomHistogramBuckets(%q)", o.kind)
		if o.kind.instruments() == nil {
			kinds := make([]string, 0, len(bucketKinds))
			for _, k := range BucketKinds() {
				kinds = append(kinds, string(k))
			}
			return fmt.Errorf("%w: %s: vLLM has no bucket kind %q; its kinds are %s (views.BucketKinds)",
				ErrOption, where, o.kind, strings.Join(kinds, ", "))
		}
		if err := checkBounds(where, o.bounds); err != nil {
			return err
		}
	}
	return nil
}
