package stats_test

import (
	"maps"
	"math"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// Python's repr of each float, as printed by CPython 3.
func TestPythonFloat(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0.92, "0.92"}, {6, "6.0"}, {0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {0.9, "0.9"},
		{1, "1.0"}, {-2.5, "-2.5"}, {1.0 / 3, "0.3333333333333333"},
		{0.0001, "0.0001"}, {0.00001, "1e-05"}, {0.000123, "0.000123"}, {0.0000123, "1.23e-05"},
		{1e15, "1000000000000000.0"}, {1e16, "1e+16"}, {1.5e17, "1.5e+17"}, {123456789.0, "123456789.0"},
		{1e300, "1e+300"}, {5e-324, "5e-324"},
		{math.Inf(1), "inf"}, {math.Inf(-1), "-inf"}, {math.NaN(), "nan"},
	}
	for _, tt := range tests {
		if got := stats.PythonFloat(tt.v); got != tt.want {
			t.Errorf("PythonFloat(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
	if stats.PythonBool(true) != "True" || stats.PythonBool(false) != "False" {
		t.Errorf("PythonBool = %q, %q", stats.PythonBool(true), stats.PythonBool(false))
	}
}

func TestVLLMCacheConfig(t *testing.T) {
	blocks, cpu, tokens := int64(2048), int64(0), int64(32768)
	conc, size := 6.0, 4.0
	backend := "native"
	c := stats.VLLMCacheConfig{
		BlockSize: 16, NumGPUBlocks: &blocks, NumCPUBlocks: &cpu, GPUMemoryUtilization: 0.92,
		CacheDType: "auto", EnablePrefixCaching: true, PrefixCachingHashAlgo: "sha256",
		KVOffloadingBackend: &backend, KVOffloadingSize: &size,
		KVCacheSizeTokens: &tokens, KVCacheMaxConcurrency: &conc,
		Extra: stats.CacheConfig{"mamba_cache_dtype": "auto", "cache_dtype": "fp8"},
	}
	want := stats.CacheConfig{
		"block_size": "16", "num_gpu_blocks": "2048", "num_cpu_blocks": "0", "num_gpu_blocks_override": "None",
		"gpu_memory_utilization": "0.92", "cache_dtype": "fp8", "enable_prefix_caching": "True",
		"prefix_caching_hash_algo": "sha256", "sliding_window": "None", "is_attention_free": "False",
		"kv_cache_memory_bytes": "None", "kv_offloading_backend": "native", "kv_offloading_size": "4.0",
		"kv_sharing_fast_prefill": "False", "kv_cache_size_tokens": "32768", "kv_cache_max_concurrency": "6.0",
		"mamba_cache_dtype": "auto",
	}
	got := c.CacheConfig()
	if !maps.Equal(got, want) {
		t.Errorf("CacheConfig() =\n%v\nwant\n%v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	// The zero value: every optional field None.
	zero := (&stats.VLLMCacheConfig{}).CacheConfig()
	for _, k := range []string{"num_gpu_blocks", "num_cpu_blocks", "kv_offloading_backend", "kv_offloading_size",
		"kv_cache_size_tokens", "kv_cache_max_concurrency"} {
		if zero[k] != "None" {
			t.Errorf("zero value: %s = %q, want None", k, zero[k])
		}
	}
	if zero["gpu_memory_utilization"] != "0.0" || zero["enable_prefix_caching"] != "False" {
		t.Errorf("zero value: %v", zero)
	}
}
