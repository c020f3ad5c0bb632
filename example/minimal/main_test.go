package main

import (
	"strings"
	"testing"
)

// The decode-node step the example records: a 512-token prompt whose KV came
// from a prefill node, all but the last token, which the node computes, and
// one generated token. THE RULE: the iteration did 1 computed + 1 generated
// = 2 tokens of work.
func TestMinimal(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	const labels = `engine="0",model_name="my-model"`
	want := strings.Join([]string{
		`vllm:generation_tokens_total{` + labels + `} 1`,
		`vllm:iteration_tokens_total_sum{` + labels + `} 2`,
		`vllm:prompt_tokens_by_source_total{` + labels + `,source="external_kv_transfer"} 511`,
		`vllm:prompt_tokens_by_source_total{` + labels + `,source="local_cache_hit"} 0`,
		`vllm:prompt_tokens_by_source_total{` + labels + `,source="local_compute"} 1`,
		`vllm:prompt_tokens_cached_by_source_total{` + labels + `,source="device"} 0`,
		`vllm:prompt_tokens_cached_by_source_total{` + labels + `,source="disk"} 0`,
		`vllm:prompt_tokens_cached_by_source_total{` + labels + `,source="external_unspecified"} 0`,
		`vllm:prompt_tokens_cached_by_source_total{` + labels + `,source="host"} 0`,
		`vllm:prompt_tokens_cached_by_source_total{` + labels + `,source="p2p"} 511`,
		`vllm:prompt_tokens_cached_total{` + labels + `} 511`,
		`vllm:prompt_tokens_total{` + labels + `} 512`,
	}, "\n") + "\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
