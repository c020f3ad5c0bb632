package openaihttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// vllmPrefill is a vLLM prefill instance's answer to a P/D router's
// prefill leg (non-streamed, max_tokens 1, do_remote_decode), in the shape
// of vLLM's ChatCompletionResponse: usage with prompt_tokens_details when
// the server runs with --enable-prompt-tokens-details (details), and the
// kv_transfer_params of the NIXL connector's request_finished for the
// decode instance, with remote_prefill_cached_tokens from vLLM PR #54222
// on (remote: its value, -1 for none).
func vllmPrefill(prompt, cached int, details bool, remote int) string {
	usage := fmt.Sprintf(`"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":1`, prompt, prompt+1)
	if details {
		usage += fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, cached)
	}
	params := `"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[12,13,14,15,16,17,18]],` +
		`"remote_engine_id":"e0b1c2d3-prefill","remote_request_id":"chatcmpl-7f3a","remote_host":"10.0.0.7",` +
		`"remote_port":5600,"tp_size":1,"remote_num_tokens":` + fmt.Sprint(prompt)
	if remote >= 0 {
		params += fmt.Sprintf(`,"remote_prefill_cached_tokens":%d`, remote)
	}
	return `{"id":"chatcmpl-7f3a","object":"chat.completion","created":1767225600,"model":"qwen-7b",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"The","refusal":null,"annotations":null,` +
		`"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,` +
		`"finish_reason":"length","stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,` +
		`"usage":{` + usage + `},"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":{` + params + `}}`
}

// A P/D router (NewHandler in front, the legs through NewTransport) in
// front of vLLM instances that report cached tokens either way: a decode
// instance before vLLM PR #54222 reports what it did not compute (the KV it
// received and its own hits: the prompt less the last token), one since
// reports the prefill instance's count that the router passed on. The
// router records the same source split for both, the prefill instance's:
// its cached tokens (from its kv_transfer_params, or its usage when it
// sends no such field) as local_cache_hit, the rest local_compute. Only
// when the prefill leg reports neither (an instance before PR #54222
// without --enable-prompt-tokens-details) are the decode leg's cached
// tokens all it knows: external_kv_transfer, as before.
func TestRouterCachedTokensEitherDecode(t *testing.T) {
	const prompt, prefillHits = 100, 64
	for _, c := range []struct {
		name          string
		prefill       string
		decodeCached  int
		hit, computed float64
		transferred   float64
	}{
		{"decode before PR #54222, prefill usage with details", vllmPrefill(prompt, prefillHits, true, -1), prompt - 1,
			prefillHits, prompt - prefillHits, 0},
		{"decode from PR #54222, prefill usage with details", vllmPrefill(prompt, prefillHits, true, prefillHits), prefillHits,
			prefillHits, prompt - prefillHits, 0},
		{"decode from PR #54222, prefill without details", vllmPrefill(prompt, prefillHits, false, prefillHits), prefillHits,
			prefillHits, prompt - prefillHits, 0},
		{"decode before PR #54222 whose field got lost, prefill from it", vllmPrefill(prompt, prefillHits, false, prefillHits), prompt - 1,
			prefillHits, prompt - prefillHits, 0},
		{"both before PR #54222, prefill without details", vllmPrefill(prompt, prefillHits, false, -1), prompt - 1,
			0, 1, prompt - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			router := newRec(t)
			prefill := httptest.NewServer(jsonHandler(200, c.prefill))
			defer prefill.Close()
			decode := httptest.NewServer(sseHandler(chunk("The"), chunk(" end"), finishChunk("stop"),
				usageChunk(prompt, 2, c.decodeCached), done))
			defer decode.Close()
			tr := openaihttp.NewTransport(nil, openaihttp.WithEngine(router.e))
			s := serve(t, router, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				ctx := r.Context()
				p := sendLeg(t, tr, ctx, prefill.URL, instrument.RolePrefill, chatBody)
				_, _ = io.Copy(io.Discard, p.Body)
				_ = p.Body.Close()
				d := sendLeg(t, tr, ctx, decode.URL, instrument.RoleDecode, string(body))
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.Copy(w, d.Body)
				_ = d.Body.Close()
			}))
			if got := readAll(t, post(t, s.URL+"/v1/chat/completions", streamBody)); !strings.Contains(got,
				fmt.Sprintf(`"cached_tokens":%d`, c.decodeCached)) {
				t.Errorf("the client got %q", got)
			}
			s.wait()
			r := router.snapshot()
			for source, want := range map[string]float64{"local_cache_hit": c.hit, "local_compute": c.computed,
				"external_kv_transfer": c.transferred} {
				if got := r.value("vllm:prompt_tokens_by_source_total", "source", source); got != want {
					t.Errorf("%s on the router = %v, want %v", source, got, want)
				}
			}
			if got := r.value("vllm:prompt_tokens_cached_total"); got != c.hit+c.transferred {
				t.Errorf("prompt_tokens_cached on the router = %v, want %v", got, c.hit+c.transferred)
			}
		})
	}
}
