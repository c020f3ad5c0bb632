package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestRouterStream streams a chat completion through the router, as curl -N
// does, and checks it against both instances' scrapes: the usage's tokens
// are the decode instance's, its prompt came by KV transfer from the
// prefill instance, which generated one token, and the first token reached
// the client after the prefill leg ended.
func TestRouterStream(t *testing.T) {
	d := startDeployment(t)
	body := `{"model":"test-model","messages":[{"role":"system","content":"` + strings.Repeat("word ", 300) + `"},
		{"role":"user","content":"tell me more"}],"max_tokens":30,"stream":true,"stream_options":{"include_usage":true}}`
	res := post(t, context.Background(), d.router.base()+"/v1/chat/completions", body, nil)
	u := res.usage.Usage
	if res.status != http.StatusOK || !res.done || u == nil || u.Details == nil || res.finish == "" {
		t.Fatalf("status %d, [DONE] %v, finish_reason %q, usage %+v; want a whole stream with usage", res.status, res.done, res.finish, u)
	}

	decode := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	prefill := scrapeWhen(t, d.prefill, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	if got := total(decode, "vllm:generation_tokens_total", nil); got != float64(u.CompletionTokens) {
		t.Errorf("usage completion_tokens %d, decode vllm:generation_tokens_total %v", u.CompletionTokens, got)
	}
	for role, fams := range map[string]map[string]*dto.MetricFamily{"prefill": prefill, "decode": decode} {
		if got := total(fams, "vllm:prompt_tokens_total", nil); got != float64(u.PromptTokens) {
			t.Errorf("usage prompt_tokens %d, %s vllm:prompt_tokens_total %v", u.PromptTokens, role, got)
		}
	}
	// The decode leg's cached_tokens are its cached tokens, local and by
	// KV transfer: the whole prompt but its last token, which vLLM
	// recomputes (Scheduler._update_waiting_for_remote_kv).
	if got := total(decode, "vllm:prompt_tokens_cached_total", nil); got != float64(u.Details.CachedTokens) || got != float64(u.PromptTokens-1) {
		t.Errorf("usage cached_tokens %d, decode vllm:prompt_tokens_cached_total %v; want both the %d prompt tokens less one",
			u.Details.CachedTokens, got, u.PromptTokens)
	}
	if got := total(decode, "vllm:prompt_tokens_by_source_total", map[string]string{"source": "external_kv_transfer"}); got <= 0 {
		t.Errorf("decode external_kv_transfer = %v, want > 0", got)
	}
	if got := total(prefill, "vllm:generation_tokens_total", nil); got != 1 {
		t.Errorf("prefill vllm:generation_tokens_total = %v, want the prefill leg's 1", got)
	}
	if got := finished(prefill, "length"); got != 1 {
		t.Errorf("prefill request_success_total{finished_reason=length} = %v, want 1", got)
	}
	leg := histogramSum(prefill, "vllm:e2e_request_latency_seconds", "0")
	if ttft := res.firstText.Seconds(); leg <= 0 || ttft < leg {
		t.Errorf("time to first token at the client %vs, prefill leg %vs: want at least the prefill leg", ttft, leg)
	}

	// The router records the request once, as its client saw it.
	router := scrapeWhen(t, d.router, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	for name, want := range map[string]int64{"vllm:generation_tokens_total": u.CompletionTokens,
		"vllm:prompt_tokens_total": u.PromptTokens} {
		if got := total(router, name, map[string]string{"role": "router"}); got != float64(want) {
			t.Errorf("router %s = %v, want the usage's %d", name, got, want)
		}
	}
	// Its prompt's sources are the prefill instance's (its leg reports its
	// cache hits: none for this first prompt), not the decode leg's
	// cached_tokens (TestRouterSourcesSharedPrompt).
	for _, source := range []string{"external_kv_transfer", "local_cache_hit", "local_compute"} {
		src := map[string]string{"source": source}
		if got, want := total(router, "vllm:prompt_tokens_by_source_total", src), total(prefill, "vllm:prompt_tokens_by_source_total", src); got != want {
			t.Errorf("router prompt tokens from %s = %v, want the prefill instance's %v", source, got, want)
		}
	}
	for _, name := range []string{"router_pd_prefill_leg_duration_seconds", "router_pd_handoff_duration_seconds",
		"router_pd_decode_leg_time_to_first_chunk_seconds", "vllm:time_to_first_token_seconds"} {
		if n := histogramCount(router, name, nil); n != 1 {
			t.Errorf("router %s count = %v, want 1", name, n)
		}
	}
	ttft := histogramSum(router, "vllm:time_to_first_token_seconds", "0")
	legs := histogramSum(router, "router_pd_prefill_leg_duration_seconds", "0") + histogramSum(router, "router_pd_handoff_duration_seconds", "0")
	if ttft < legs || ttft > res.firstText.Seconds() {
		t.Errorf("router TTFT %vs: want at least prefill leg + handoff %vs, at most the client's %vs", ttft, legs, res.firstText.Seconds())
	}
	for _, role := range []string{"prefill", "decode"} {
		if n := histogramCount(router, "gen_ai_client_operation_duration_seconds", map[string]string{"backend": role + "-0", "backend_role": role}); n != 1 {
			t.Errorf("router gen_ai_client_operation_duration_seconds{backend=%s-0} count = %v, want 1", role, n)
		}
	}
}

// TestRouterDisconnect leaves a stream through the router after its first
// token: the router cancels the decode leg and the decode instance counts
// an abort.
func TestRouterDisconnect(t *testing.T) {
	d := startDeployment(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := post(t, ctx, d.router.base()+"/v1/completions", `{"prompt":"once upon a time","max_tokens":4000,"ignore_eos":true,"stream":true}`,
		func(chunk) bool { return true })
	cancel()
	if res.text == "" {
		t.Fatalf("status %d: no first chunk", res.status)
	}
	fams := scrapeWhen(t, d.decode, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	if got := finished(fams, "abort"); got != 1 {
		t.Errorf("decode request_success_total{finished_reason=abort} = %v, want 1", got)
	}
	router := scrapeWhen(t, d.router, func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == 1 })
	if got := finished(router, "abort"); got != 1 {
		t.Errorf("router request_success_total{finished_reason=abort} = %v, want 1", got)
	}
}

// TestRouterPassesErrors checks that an instance's 400 reaches the client
// and that a request the prefill instance rejects never reaches decode.
func TestRouterPassesErrors(t *testing.T) {
	d := startDeployment(t)
	resp, err := http.Post(d.router.base()+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"x","max_tokens":9000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d, want the prefill instance's 400", resp.StatusCode)
	}
	resp, err = http.Post(d.router.base()+"/v1/completions", "application/json", strings.NewReader(`[1]`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body that is not an object: status %d, want 400", resp.StatusCode)
	}
	fams := scrapeWhen(t, d.decode, func(map[string]*dto.MetricFamily) bool { return true })
	if got := total(fams, "vllm:prompt_tokens_total", nil); got != 0 {
		t.Errorf("decode vllm:prompt_tokens_total = %v, want 0", got)
	}
}

// TestRouterSourcesSharedPrompt sends requests sharing a system prompt
// through the router, one after another, so that both instances find the
// prompt's prefix in their own cache, with the decode instance's usage of
// vLLM before PR #54222 (cached_tokens: what it did not compute, its own
// hits and the KV it received together) and of vLLM since (the prefill
// instance's count, passed on in kv_transfer_params). Either way the router
// records the prefill instance's split, which its leg reports: its cache
// hits as local_cache_hit, the rest local_compute, no
// external_kv_transfer; only the clients' cached_tokens differ.
func TestRouterSourcesSharedPrompt(t *testing.T) {
	for _, c := range []struct {
		name          string
		prefillCached bool
	}{{"before PR 54222", false}, {"from PR 54222", true}} {
		t.Run(c.name, func(t *testing.T) {
			d := startDeploymentCached(t, c.prefillCached)
			const n = 6
			var cached int64
			for i := range n {
				body := `{"messages":[{"role":"system","content":"` + strings.Repeat("policy ", 200) + `"},
			{"role":"user","content":"question ` + strings.Repeat("x ", i+1) + `"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`
				res := post(t, context.Background(), d.router.base()+"/v1/chat/completions", body, nil)
				if res.usage.Usage == nil || res.usage.Usage.Details == nil {
					t.Fatalf("request %d: no usage", i)
				}
				cached += res.usage.Usage.Details.CachedTokens
			}
			done := func(f map[string]*dto.MetricFamily) bool { return finished(f, "") == n }
			decode, router := scrapeWhen(t, d.decode, done), scrapeWhen(t, d.router, done)
			prefill := scrapeWhen(t, d.prefill, done)
			src := func(fams map[string]*dto.MetricFamily, source string) float64 {
				return total(fams, "vllm:prompt_tokens_by_source_total", map[string]string{"source": source})
			}
			if src(decode, "local_cache_hit") <= 0 || src(prefill, "local_cache_hit") <= 0 {
				t.Fatalf("local_cache_hit: decode %v, prefill %v: want the shared prompt found in both instances' cache",
					src(decode, "local_cache_hit"), src(prefill, "local_cache_hit"))
			}
			hits := src(prefill, "local_cache_hit") + src(prefill, "external_kv_transfer")
			for _, w := range []struct {
				source    string
				got, want float64
			}{
				{"local_cache_hit", src(router, "local_cache_hit"), hits},
				{"local_compute", src(router, "local_compute"), src(prefill, "local_compute")},
				{"external_kv_transfer", src(router, "external_kv_transfer"), 0},
			} {
				if w.got != w.want {
					t.Errorf("router %s = %v, want %v (the prefill instance's)", w.source, w.got, w.want)
				}
			}
			if got := total(router, "vllm:prompt_tokens_cached_total", nil); got != hits {
				t.Errorf("router vllm:prompt_tokens_cached_total = %v, want the prefill instance's hits %v", got, hits)
			}
			// What the clients got: the decode instance's count before PR
			// #54222, the prefill instance's since.
			want := src(decode, "external_kv_transfer") + src(decode, "local_cache_hit")
			if c.prefillCached {
				want = hits
			}
			if float64(cached) != want {
				t.Errorf("the clients' cached_tokens %d, want %v", cached, want)
			}
		})
	}
}
