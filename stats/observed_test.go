package stats_test

import (
	"errors"
	"math"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

func TestObservedRequest(t *testing.T) {
	r := stats.ObservedRequest{E2ELatency: 2, FirstToken: true, TimeToFirstToken: 0.5, TimeToLastToken: 1.5,
		UsageKnown: true, PromptTokens: 10, GenerationTokens: 5, CachedPromptTokens: 4}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := r.Prompt(); p.Computed != 6 || p.LocalCacheHit != 4 || p.ExternalKVTransfer != 0 {
		t.Errorf("Prompt() = %+v", p)
	}
	r.CachedByKVTransfer = true
	if p := r.Prompt(); p.LocalCacheHit != 0 || p.ExternalKVTransfer != 4 || p.Total() != 10 {
		t.Errorf("Prompt() by KV transfer = %+v", p)
	}
	if v, ok := r.TimePerOutputToken(); !ok || v != 0.25 {
		t.Errorf("TimePerOutputToken() = %v, %v; want 0.25", v, ok)
	}
	r.GenerationTokens = 1
	if v, ok := r.TimePerOutputToken(); !ok || v != 0 {
		t.Errorf("TimePerOutputToken() with one token = %v, %v", v, ok)
	}
	r.UsageKnown, r.PromptTokens, r.GenerationTokens, r.CachedPromptTokens = false, 0, 0, 0
	if _, ok := r.TimePerOutputToken(); ok {
		t.Error("TimePerOutputToken known without usage")
	}
	if p := r.Prompt(); p.Total() != 0 {
		t.Errorf("Prompt() without usage = %+v", p)
	}
}

func TestPDLegsValidate(t *testing.T) {
	ok := stats.PDLegs{PrefillLatency: 0.2, Handoff: true, DecodeFirstToken: true, DecodeTimeToFirstToken: 0.01}
	if err := ok.Validate(); err != nil {
		t.Fatal(err) // a zero gap is a handoff with no wait
	}
	for _, c := range []struct {
		l    stats.PDLegs
		want error
	}{
		{stats.PDLegs{PrefillLatency: -0.1}, stats.ErrNegative},
		{stats.PDLegs{HandoffGap: 0.1}, stats.ErrOutOfRange},
		{stats.PDLegs{DecodeTimeToFirstToken: 0.1}, stats.ErrOutOfRange},
		{stats.PDLegs{Handoff: true, HandoffGap: math.NaN()}, stats.ErrNotFinite},
	} {
		if err := c.l.Validate(); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.l, err, c.want)
		}
	}
}

func TestOperation(t *testing.T) {
	for _, op := range stats.Operations() {
		r := stats.ObservedRequest{Operation: op}
		if err := r.Validate(); err != nil {
			t.Errorf("Operation %d (%q): %v", op, op, err)
		}
	}
	if got := stats.OperationChat.String() + " " + stats.OperationTextCompletion.String(); got != "chat text_completion" {
		t.Errorf("operation names %q", got)
	}
	if n := len(stats.Operations()); n != stats.NumOperations {
		t.Errorf("%d operations, NumOperations %d", n, stats.NumOperations)
	}
	bad := stats.ObservedRequest{Operation: stats.Operation(stats.NumOperations)}
	if err := bad.Validate(); !errors.Is(err, stats.ErrUnknownOperation) {
		t.Errorf("Validate(unknown operation) = %v", err)
	}
}

// Cached tokens above the prompt (a provider whose prompt_tokens leaves the
// cached part out: 10 prompt, 161 cached) are a split no prompt has: Valid,
// and Bounded keeps the prompt and generation tokens, drops the cached
// count (the prompt all computed) and says so. Before, Validate refused the
// request whole, its generation tokens with it.
func TestObservedCachedAbovePrompt(t *testing.T) {
	r := stats.ObservedRequest{E2ELatency: 1, UsageKnown: true, PromptTokens: 10, GenerationTokens: 213, CachedPromptTokens: 161}
	if err := r.Validate(); err != nil {
		t.Fatalf("Validate = %v, want nil", err)
	}
	if p := r.Prompt(); p.Computed != 10 || p.LocalCacheHit != 0 || p.Total() != 10 {
		t.Errorf("Prompt() = %+v, want all 10 computed", p)
	}
	b, err := r.Bounded()
	var fe *stats.FieldError
	if !errors.Is(err, stats.ErrCachedExceedsPrompt) || !errors.As(err, &fe) || fe.Field != "CachedPromptTokens" {
		t.Fatalf("Bounded error %v, want CachedPromptTokens matching ErrCachedExceedsPrompt", err)
	}
	if !b.UsageKnown || b.PromptTokens != 10 || b.GenerationTokens != 213 || b.CachedPromptTokens != 0 {
		t.Errorf("Bounded = %+v, want usage 10 prompt, 213 generation, 0 cached", b)
	}
	r.CachedPromptTokens = 10 // all cached: a split, kept
	if b, err := r.Bounded(); err != nil || b.CachedPromptTokens != 10 {
		t.Errorf("Bounded with cached = prompt: %+v, %v", b, err)
	}
}
