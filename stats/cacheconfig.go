package stats

import (
	"bytes"
	"math"
	"strconv"
)

// VLLMCacheConfig holds, under vLLM's field names, the CacheConfig fields
// that dashboards and routers read from the labels of vllm:cache_config_info.
// vLLM makes a label of every CacheConfig attribute, written with Python's
// str() (vllm/config/cache.py @002f10e0, metrics_info); CacheConfig returns
// them formatted the same way: nil pointers (Python None) as "None", bools as
// "True" or "False", floats as Python's repr ("0.9", "6.0", "1e-05").
// Its field list changes between vLLM versions: Extra carries the others.
type VLLMCacheConfig struct {
	BlockSize             int64    // block_size: tokens per KV block
	NumGPUBlocks          *int64   // num_gpu_blocks: set after KV cache initialization
	NumCPUBlocks          *int64   // num_cpu_blocks
	NumGPUBlocksOverride  *int64   // num_gpu_blocks_override
	GPUMemoryUtilization  float64  // gpu_memory_utilization, 0 to 1 (vLLM's default 0.9)
	CacheDType            string   // cache_dtype, for example "auto" or "fp8"
	EnablePrefixCaching   bool     // enable_prefix_caching
	PrefixCachingHashAlgo string   // prefix_caching_hash_algo, for example "sha256"
	SlidingWindow         *int64   // sliding_window
	IsAttentionFree       bool     // is_attention_free
	KVCacheMemoryBytes    *int64   // kv_cache_memory_bytes
	KVOffloadingBackend   *string  // kv_offloading_backend, for example "native"
	KVOffloadingSize      *float64 // kv_offloading_size, in GiB
	KVSharingFastPrefill  bool     // kv_sharing_fast_prefill
	// KVCacheSizeTokens is the KV cache capacity in tokens and
	// KVCacheMaxConcurrency the requests of max_model_len it holds at once,
	// both set after KV cache initialization (vLLM PR #42206).
	KVCacheSizeTokens     *int64   // kv_cache_size_tokens
	KVCacheMaxConcurrency *float64 // kv_cache_max_concurrency

	// Extra holds further labels, already formatted (for example
	// "mamba_cache_dtype": "auto"); a key of a field above replaces the
	// field's label.
	Extra CacheConfig
}

// CacheConfig returns the labels of vllm:cache_config_info, for
// instrument.WithCacheConfig: every field above under vLLM's name, then Extra.
func (c VLLMCacheConfig) CacheConfig() CacheConfig {
	out := CacheConfig{
		"block_size":               strconv.FormatInt(c.BlockSize, 10),
		"num_gpu_blocks":           pyOptInt(c.NumGPUBlocks),
		"num_cpu_blocks":           pyOptInt(c.NumCPUBlocks),
		"num_gpu_blocks_override":  pyOptInt(c.NumGPUBlocksOverride),
		"gpu_memory_utilization":   PythonFloat(c.GPUMemoryUtilization),
		"cache_dtype":              c.CacheDType,
		"enable_prefix_caching":    PythonBool(c.EnablePrefixCaching),
		"prefix_caching_hash_algo": c.PrefixCachingHashAlgo,
		"sliding_window":           pyOptInt(c.SlidingWindow),
		"is_attention_free":        PythonBool(c.IsAttentionFree),
		"kv_cache_memory_bytes":    pyOptInt(c.KVCacheMemoryBytes),
		"kv_offloading_backend":    pyOptString(c.KVOffloadingBackend),
		"kv_offloading_size":       pyOptFloat(c.KVOffloadingSize),
		"kv_sharing_fast_prefill":  PythonBool(c.KVSharingFastPrefill),
		"kv_cache_size_tokens":     pyOptInt(c.KVCacheSizeTokens),
		"kv_cache_max_concurrency": pyOptFloat(c.KVCacheMaxConcurrency),
	}
	for k, v := range c.Extra {
		out[k] = v
	}
	return out
}

// PythonNone is how Python's str() writes None.
const PythonNone = "None"

// PythonBool returns Python's str() of a bool: "True" or "False".
func PythonBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// PythonFloat returns Python's str() (repr) of a float: the shortest digits
// that read back the same value, with ".0" on whole numbers ("6.0"), and in
// exponent form below 1e-4 or from 1e16 on ("1e-05", "1e+16"); "nan", "inf"
// and "-inf" otherwise.
func PythonFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return string(AppendPythonRepr(nil, v))
}

// AppendPythonRepr appends Python's repr of a finite float: the shortest
// digits, in exponent form below 1e-4 and from 1e16 (an exponent with a sign
// and at least two digits, as Go's 'e' format), otherwise positional with at
// least one decimal ("1.0", "0.005").
func AppendPythonRepr(dst []byte, v float64) []byte {
	start := len(dst)
	dst = strconv.AppendFloat(dst, v, 'e', -1, 64)
	exp, _ := strconv.Atoi(string(dst[start+bytes.LastIndexByte(dst[start:], 'e')+1:]))
	if v != 0 && (exp < -4 || exp >= 16) {
		return dst
	}
	dst = strconv.AppendFloat(dst[:start], v, 'f', -1, 64)
	if bytes.IndexByte(dst[start:], '.') < 0 {
		dst = append(dst, ".0"...)
	}
	return dst
}

func pyOptInt(p *int64) string {
	if p == nil {
		return PythonNone
	}
	return strconv.FormatInt(*p, 10)
}

func pyOptFloat(p *float64) string {
	if p == nil {
		return PythonNone
	}
	return PythonFloat(*p)
}

func pyOptString(p *string) string {
	if p == nil {
		return PythonNone
	}
	return *p
}
