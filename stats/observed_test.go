package stats_test

import (
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
