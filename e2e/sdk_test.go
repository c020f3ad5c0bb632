package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// exampleModel is the example's default served model name.
const exampleModel = "meta-llama/Llama-3.1-8B-Instruct"

// sdkUsage sums the usage a client library reported.
type sdkUsage struct {
	requests                   int
	prompt, completion, cached int64
}

func (u *sdkUsage) add(prompt, completion, cached int64) {
	u.requests++
	u.prompt += prompt
	u.completion += completion
	u.cached += cached
}

// sdkRequestID is the X-Request-Id the test gives a request: the example
// draws each request's stop token from it (a random one without it), and
// its router sends it on both legs, so every run draws the same outputs.
func sdkRequestID(kind string, i int) string { return fmt.Sprintf("sdk-%s-%d", kind, i) }

// sdkReasons counts the requests by the finished_reason vLLM's
// request_success counts for what a client saw.
type sdkReasons map[string]int64

// finished counts a request that ended with finish reason finish after
// completion tokens of its limit of max: length (OpenAI's length,
// Anthropic's max_tokens) at the limit, stop (stop, end_turn) before it
// with at least one token, as the example ends a request at max_tokens or
// at its drawn stop token. Whichever the draw gives, a reason that does not
// agree with the tokens fails.
func (r sdkReasons) finished(t *testing.T, what, finish string, completion, max int64) {
	t.Helper()
	switch {
	case (finish == "length" || finish == string(anthropic.StopReasonMaxTokens)) && completion == max:
		r["length"]++
	case (finish == "stop" || finish == string(anthropic.StopReasonEndTurn)) && completion >= 1 && completion < max:
		r["stop"]++
	default:
		t.Errorf("%s: finish reason %q after %d tokens of max_tokens %d: want length at the limit, stop before it", what, finish, completion, max)
	}
}

// check compares the request_success series of sel by finished_reason with r.
func (r sdkReasons) check(t *testing.T, e *env, sel string, at time.Time) {
	t.Helper()
	got := e.prom.byLabel(t, "sum by (finished_reason) (vllm:request_success_total"+sel+")", "finished_reason", at)
	for _, reason := range []string{"stop", "length", "abort", "error", "repetition"} {
		if got[reason] != float64(r[reason]) {
			t.Errorf("vllm:request_success_total%s by finished_reason %v, want the clients' %v", sel, got, map[string]int64(r))
			return
		}
	}
}

// TestRouterSDKClients drives the example's P/D router with the official
// OpenAI (github.com/openai/openai-go/v3 v3.98.0) and Anthropic
// (github.com/anthropics/anthropic-sdk-go/v2 v2.15.0) Go clients, as an
// application would, with the generated load off: the model list, chat
// completions streamed and not (sharing a system prompt, so that the
// decode engines hit their own prefix cache), one stream the client
// cancels, and Anthropic messages streamed and not. On the real
// Prometheus: the router's tokens and successes are the clients' usage,
// the cancelled stream is one abort at the router and on the decode
// instance, and the router's prompt tokens by source are the prefill
// instance's (its legs report its cache hits), not the decode leg's
// cached_tokens, which the clients get (vLLM's decode response before PR
// #54222 reports there its own hits and the KV it received together). Every request carries a fixed X-Request-Id, so the
// example draws the same stop tokens on every run; each finish reason must
// agree with the tokens the client got, and the router and the decode
// instance count the requests by the reasons the clients saw.
func TestRouterSDKClients(t *testing.T) {
	tl := needTools(t)
	began := time.Now()
	e, routerAddr := startRouterDeployment(t, tl)
	ctx := context.Background()
	oa := openai.NewClient(option.WithBaseURL("http://"+routerAddr+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))

	// 1. The model list, as clients read it first.
	page, err := oa.Models.List(ctx)
	if err != nil || !slices.ContainsFunc(page.Data, func(m openai.Model) bool { return m.ID == exampleModel }) {
		t.Fatalf("models.list: %v, %+v: want %s listed", err, page, exampleModel)
	}

	// 2. Chat completions sharing a system prompt, streamed and not.
	system := strings.Repeat("You answer questions about the sea. ", 25)
	params := func(i int) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model:     exampleModel,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(fmt.Sprintf("question %d about tides", i))},
			MaxTokens: openai.Int(int64(8 + 3*i)),
		}
	}
	var chat sdkUsage
	reasons := sdkReasons{}
	for i := range 6 {
		p := params(i)
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := oa.Chat.Completions.NewStreaming(ctx, p, option.WithHeader("X-Request-Id", sdkRequestID("chat-stream", i)))
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil || len(acc.Choices) != 1 || acc.Usage.PromptTokens == 0 {
			t.Fatalf("stream %d: %v, %+v: want one choice and usage", i, err, acc.ChatCompletion)
		}
		reasons.finished(t, fmt.Sprintf("stream %d", i), acc.Choices[0].FinishReason, acc.Usage.CompletionTokens, p.MaxTokens.Value)
		chat.add(acc.Usage.PromptTokens, acc.Usage.CompletionTokens, acc.Usage.PromptTokensDetails.CachedTokens)
	}
	for i := range 3 {
		p := params(10 + i)
		c, err := oa.Chat.Completions.New(ctx, p, option.WithHeader("X-Request-Id", sdkRequestID("chat", i)))
		if err != nil || len(c.Choices) != 1 {
			t.Fatalf("chat %d: %v, %+v", i, err, c)
		}
		if c.Choices[0].Message.Content == "" && c.Usage.CompletionTokens > 1 {
			t.Errorf("chat %d: no content after %d tokens", i, c.Usage.CompletionTokens) // a stop token's text is empty
		}
		reasons.finished(t, fmt.Sprintf("chat %d", i), c.Choices[0].FinishReason, c.Usage.CompletionTokens, p.MaxTokens.Value)
		chat.add(c.Usage.PromptTokens, c.Usage.CompletionTokens, c.Usage.PromptTokensDetails.CachedTokens)
	}
	t.Logf("[%5.1fs] %d chat completions: prompt %d, completion %d, cached %d", time.Since(began).Seconds(),
		chat.requests, chat.prompt, chat.completion, chat.cached)

	at := e.settled(t)
	q := func(expr string) float64 { return e.prom.scalar(t, expr, at) }
	const router, decode = `{path="direct",role="router"}`, `{path="direct",role="decode"}`
	for _, c := range []struct {
		expr string
		want int64
	}{
		{"sum(vllm:generation_tokens_total" + router + ")", chat.completion},
		{"sum(vllm:prompt_tokens_total" + router + ")", chat.prompt},
		{"sum(vllm:prompt_tokens_total" + decode + ")", chat.prompt},
		{"sum(vllm:request_success_total" + router + ")", int64(chat.requests)},
		{"sum(vllm:prompt_tokens_cached_total" + decode + ")", chat.cached},
	} {
		if got := q(c.expr); got != float64(c.want) {
			t.Errorf("%s = %v, want %d (from the clients' usage)", c.expr, got, c.want)
		}
	}
	reasons.check(t, e, router, at)
	reasons.check(t, e, decode, at)
	bySource := func(sel string) map[string]float64 {
		return e.prom.byLabel(t, "sum by (source) (vllm:prompt_tokens_by_source_total"+sel+")", "source", at)
	}
	rs, ds, ps := bySource(router), bySource(decode), bySource(`{path="direct",role="prefill"}`)
	t.Logf("prompt tokens by source: router %v, prefill %v, decode %v", rs, ps, ds)
	if ds["local_cache_hit"] <= 0 || ps["local_cache_hit"] <= 0 {
		t.Errorf("local_cache_hit: decode %v, prefill %v: want the shared system prompt found in both instances' cache",
			ds["local_cache_hit"], ps["local_cache_hit"])
	}
	if ds["external_kv_transfer"]+ds["local_cache_hit"] != float64(chat.cached) {
		t.Errorf("decode external_kv_transfer + local_cache_hit %v, want the clients' cached_tokens %d",
			ds["external_kv_transfer"]+ds["local_cache_hit"], chat.cached)
	}
	checkRouterSources(t, rs, ps)

	// 3. A stream the client cancels after its first content.
	cctx, cancel := context.WithCancel(ctx)
	long := params(20)
	long.MaxTokens = openai.Int(4000)
	stream := oa.Chat.Completions.NewStreaming(cctx, long, option.WithJSONSet("ignore_eos", true),
		option.WithHeader("X-Request-Id", sdkRequestID("cancelled", 0)))
	content := false
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			content = true
			cancel()
		}
	}
	cancel()
	if !content || !errors.Is(stream.Err(), context.Canceled) {
		t.Fatalf("cancelled stream: content %v, error %v: want content, then context.Canceled", content, stream.Err())
	}
	reasons["abort"]++
	at = e.settled(t)
	for _, c := range []struct {
		expr string
		want int64
	}{
		{`sum(vllm:request_success_total{path="direct",role="router",finished_reason="abort"})`, 1},
		{`sum(vllm:request_success_total{path="direct",role="decode",finished_reason="abort"})`, 1},
		{"sum(vllm:request_success_total" + router + ")", int64(chat.requests) + 1},
		{"sum(vllm:generation_tokens_total" + router + ")", chat.completion},
		{"sum(vllm:prompt_tokens_total" + router + ")", chat.prompt},
	} {
		if got := e.prom.scalar(t, c.expr, at); got != float64(c.want) {
			t.Errorf("after the cancelled stream: %s = %v, want %d", c.expr, got, c.want)
		}
	}
	decodePrompt := e.prom.scalar(t, "sum(vllm:prompt_tokens_total"+decode+")", at)
	decodeGen := e.prom.scalar(t, "sum(vllm:generation_tokens_total"+decode+")", at)

	// 4. Anthropic messages through the router, streamed and not.
	an := anthropic.NewClient(anthropicopt.WithBaseURL("http://"+routerAddr+"/"), anthropicopt.WithAPIKey("none"),
		anthropicopt.WithMaxRetries(0))
	msg := func(i int) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: exampleModel, MaxTokens: int64(6 + 2*i),
			System:   []anthropic.TextBlockParam{{Text: system}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("anthropic question %d", i)))}}
	}
	var msgs sdkUsage
	addMessage := func(m anthropic.Message) {
		u := m.Usage
		msgs.add(u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens, u.OutputTokens, u.CacheReadInputTokens)
	}
	for i := range 3 {
		p := msg(i)
		stream := an.Messages.NewStreaming(ctx, p, anthropicopt.WithHeader("X-Request-Id", sdkRequestID("anthropic-stream", i)))
		var m anthropic.Message
		for stream.Next() {
			if err := m.Accumulate(stream.Current()); err != nil {
				t.Fatalf("anthropic stream %d: %v", i, err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("anthropic stream %d: %v, %+v", i, err, m)
		}
		reasons.finished(t, fmt.Sprintf("anthropic stream %d", i), string(m.StopReason), m.Usage.OutputTokens, p.MaxTokens)
		addMessage(m)
	}
	for i := range 2 {
		p := msg(10 + i)
		m, err := an.Messages.New(ctx, p, anthropicopt.WithHeader("X-Request-Id", sdkRequestID("anthropic", i)))
		if err != nil || len(m.Content) == 0 {
			t.Fatalf("anthropic message %d: %v, %+v", i, err, m)
		}
		reasons.finished(t, fmt.Sprintf("anthropic message %d", i), string(m.StopReason), m.Usage.OutputTokens, p.MaxTokens)
		addMessage(*m)
	}
	t.Logf("finish reasons: %v", map[string]int64(reasons))
	t.Logf("[%5.1fs] %d Anthropic messages: prompt %d, output %d, cache_read %d", time.Since(began).Seconds(),
		msgs.requests, msgs.prompt, msgs.completion, msgs.cached)
	at = e.settled(t)
	// The decode instance ran them: its counters moved by their usage.
	if got := e.prom.scalar(t, "sum(vllm:prompt_tokens_total"+decode+")", at) - decodePrompt; got != float64(msgs.prompt) {
		t.Errorf("decode prompt tokens of the Anthropic messages: %v, want the usage's %d", got, msgs.prompt)
	}
	if got := e.prom.scalar(t, "sum(vllm:generation_tokens_total"+decode+")", at) - decodeGen; got != float64(msgs.completion) {
		t.Errorf("decode generation tokens of the Anthropic messages: %v, want the usage's %d", got, msgs.completion)
	}
	for _, c := range []struct {
		expr string
		want int64
	}{
		{"sum(vllm:prompt_tokens_total" + router + ")", chat.prompt + msgs.prompt},
		{"sum(vllm:generation_tokens_total" + router + ")", chat.completion + msgs.completion},
		{"sum(vllm:request_success_total" + router + ")", int64(chat.requests+msgs.requests) + 1},
	} {
		if got := e.prom.scalar(t, c.expr, at); got != float64(c.want) {
			t.Errorf("after the Anthropic messages: %s = %v, want %d (from the clients' usage)", c.expr, got, c.want)
		}
	}
	// The router's split is the prefill instance's, whatever the decode
	// instance reports cached (docs/metrics.md, "P/D router"), for the
	// requests whose usage reached the router: the one aborted above
	// (request_success's + 1) counts at the prefill instance alone.
	rs, ps = bySource(router), bySource(`{path="direct",role="prefill"}`)
	if rs["external_kv_transfer"] != 0 || rs["local_cache_hit"] > ps["local_cache_hit"]+ps["external_kv_transfer"] ||
		rs["local_compute"] > ps["local_compute"] || rs["local_cache_hit"]+rs["local_compute"] != float64(chat.prompt+msgs.prompt) {
		t.Errorf("after the Anthropic messages: router sources %v, prefill %v: want the router's no external_kv_transfer, "+
			"each other source at most the prefill instance's, and the clients' %d prompt tokens in all", rs, ps, chat.prompt+msgs.prompt)
	}
	reasons.check(t, e, router, at)
	reasons.check(t, e, decode, at)
	t.Logf("[%5.1fs] done", time.Since(began).Seconds())
}
