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
