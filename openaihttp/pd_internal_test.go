package openaihttp

import (
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// A response's prefill cached tokens: vLLM's
// kv_transfer_params.remote_prefill_cached_tokens when it is an integer
// (as vLLM's decode instance reads it), the last key winning, else the
// usage's cached_tokens when reported, else none.
func TestPrefillCached(t *testing.T) {
	const usage = `"usage":{"prompt_tokens":100,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}`
	for _, c := range []struct {
		doc  string
		want int64
		ok   bool
	}{
		{`{"choices":[],` + usage + `,"kv_transfer_params":{"do_remote_prefill":true,"remote_prefill_cached_tokens":64}}`, 64, true},
		{`{"kv_transfer_params":{"remote_block_ids":[[1,2],[3]],"remote_prefill_cached_tokens":0},"choices":[]}`, 0, true},
		{`{"choices":[],` + usage + `,"kv_transfer_params":{"do_remote_prefill":true}}`, 32, true},
		{`{"choices":[],` + usage + `,"kv_transfer_params":{"remote_prefill_cached_tokens":null}}`, 32, true},
		{`{"choices":[],` + usage + `,"kv_transfer_params":{"remote_prefill_cached_tokens":"64"}}`, 32, true},
		{`{"choices":[],` + usage + `,"kv_transfer_params":{"remote_prefill_cached_tokens":64.0}}`, 32, true},
		{`{"choices":[],"kv_transfer_params":{"remote_prefill_cached_tokens":7,"remote_prefill_cached_tokens":-1}}`, 0, false},
		{`{"choices":[],"remote_prefill_cached_tokens":64,"usage":{"prompt_tokens":100,"completion_tokens":1}}`, 0, false},
		{`{"choices":[],"kv_transfer_params":null}`, 0, false},
	} {
		var o observer
		o.init(endpoint{stats.OperationChat, dOpenAI}, time.Unix(1000, 0), false)
		feedAt(t, &o, c.doc, time.Unix(1001, 0))
		if got, ok := o.prefillCached(); got != c.want || ok != c.ok {
			t.Errorf("%s: %d, %v; want %d, %v", c.doc, got, ok, c.want, c.ok)
		}
	}
}

// vLLM's /v1/messages returns kv_transfer_params as its chat completions
// do: an Anthropic message's count is read alike.
func TestPrefillCachedAnthropic(t *testing.T) {
	var o observer
	o.init(endpoint{stats.OperationChat, dAnthropic}, time.Unix(1000, 0), false)
	feedAt(t, &o, `{"id":"msg_1","type":"message","role":"assistant","content":[],"stop_reason":"max_tokens",`+
		`"usage":{"input_tokens":90,"output_tokens":1},"kv_transfer_params":{"do_remote_prefill":true,"remote_prefill_cached_tokens":48}}`,
		time.Unix(1001, 0))
	if got, ok := o.prefillCached(); got != 48 || !ok {
		t.Errorf("%d, %v; want 48, true", got, ok)
	}
}
