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

// TestRouterSDKClients drives the example's P/D router with the official
// OpenAI (github.com/openai/openai-go/v3 v3.98.0) and Anthropic
// (github.com/anthropics/anthropic-sdk-go/v2 v2.15.0) Go clients, as an
// application would, with the generated load off: the model list, chat
// completions streamed and not (sharing a system prompt, so that the
// decode engines hit their own prefix cache), one stream the client
// cancels, and Anthropic messages streamed and not. On the real
// Prometheus: the router's tokens and successes are the clients' usage,
// the cancelled stream is one abort at the router and on the decode
// instance, and the router's external_kv_transfer is the decode instance's
// external_kv_transfer plus local_cache_hit (vLLM's decode response tells
// them apart nowhere).
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
	for i := range 6 {
		p := params(i)
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := oa.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil || len(acc.Choices) != 1 || acc.Usage.PromptTokens == 0 {
			t.Fatalf("stream %d: %v, %+v: want one choice and usage", i, err, acc.ChatCompletion)
		}
		if r := acc.Choices[0].FinishReason; r != "length" && r != "stop" {
			t.Errorf("stream %d: finish_reason %q, want length or stop", i, r)
		}
		chat.add(acc.Usage.PromptTokens, acc.Usage.CompletionTokens, acc.Usage.PromptTokensDetails.CachedTokens)
	}
	for i := range 3 {
		c, err := oa.Chat.Completions.New(ctx, params(10+i))
		if err != nil || len(c.Choices) != 1 || c.Choices[0].Message.Content == "" {
			t.Fatalf("chat %d: %v, %+v", i, err, c)
		}
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
	bySource := func(sel string) map[string]float64 {
		return e.prom.byLabel(t, "sum by (source) (vllm:prompt_tokens_by_source_total"+sel+")", "source", at)
	}
	rs, ds := bySource(router), bySource(decode)
	t.Logf("prompt tokens by source: router %v, decode %v", rs, ds)
	if ds["local_cache_hit"] <= 0 {
		t.Errorf("decode local_cache_hit = %v: want the shared system prompt found in the decode engines' cache", ds["local_cache_hit"])
	}
	if rs["external_kv_transfer"] != ds["external_kv_transfer"]+ds["local_cache_hit"] || rs["external_kv_transfer"] != float64(chat.cached) {
		t.Errorf("router external_kv_transfer %v, want decode external_kv_transfer + local_cache_hit %v = the clients' cached_tokens %d",
			rs["external_kv_transfer"], ds["external_kv_transfer"]+ds["local_cache_hit"], chat.cached)
	}
	if rs["local_compute"] != ds["local_compute"] || rs["local_cache_hit"] != 0 {
		t.Errorf("router local_compute %v (decode %v), local_cache_hit %v: want the decode instance's, and 0",
			rs["local_compute"], ds["local_compute"], rs["local_cache_hit"])
	}

	// 3. A stream the client cancels after its first content.
	cctx, cancel := context.WithCancel(ctx)
	long := params(20)
	long.MaxTokens = openai.Int(4000)
	stream := oa.Chat.Completions.NewStreaming(cctx, long, option.WithJSONSet("ignore_eos", true))
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
		stream := an.Messages.NewStreaming(ctx, msg(i))
		var m anthropic.Message
		for stream.Next() {
			if err := m.Accumulate(stream.Current()); err != nil {
				t.Fatalf("anthropic stream %d: %v", i, err)
			}
		}
		if err := stream.Err(); err != nil || m.StopReason != anthropic.StopReasonMaxTokens || m.Usage.OutputTokens != int64(6+2*i) {
			t.Fatalf("anthropic stream %d: %v, stop_reason %q, usage %+v", i, err, m.StopReason, m.Usage)
		}
		addMessage(m)
	}
	for i := range 2 {
		m, err := an.Messages.New(ctx, msg(10+i))
		if err != nil || len(m.Content) == 0 || m.StopReason != anthropic.StopReasonMaxTokens {
			t.Fatalf("anthropic message %d: %v, %+v", i, err, m)
		}
		addMessage(*m)
	}
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
		{`sum(vllm:prompt_tokens_by_source_total{path="direct",role="router",source="external_kv_transfer"})`, chat.cached + msgs.cached},
	} {
		if got := e.prom.scalar(t, c.expr, at); got != float64(c.want) {
			t.Errorf("after the Anthropic messages: %s = %v, want %d (from the clients' usage)", c.expr, got, c.want)
		}
	}
	t.Logf("[%5.1fs] done", time.Since(began).Seconds())
}
