package stats

import (
	"errors"
	"math"
	"testing"
)

func TestTokensByKind(t *testing.T) {
	r := ObservedRequest{Reason: FinishStop, UsageKnown: true, PromptTokens: 1000, CachedPromptTokens: 600, GenerationTokens: 300}
	r.Details.Set(TokenCacheRead, 600)
	r.Details.Set(TokenCacheWrite, 100)
	r.Details.Set(TokenReasoning, 200)
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	u := r.Tokens()
	want := map[TokenKind]int64{TokenInput: 300, TokenCacheRead: 600, TokenCacheWrite: 100, TokenOutput: 300, TokenReasoning: 200}
	for _, k := range TokenKinds() {
		n, ok := u.Get(k)
		w, wok := want[k]
		if ok != wok || n != w {
			t.Errorf("%s = %d, %v; want %d, %v", k, n, ok, w, wok)
		}
	}
	if got := (ObservedRequest{}).Tokens(); got.Known != 0 {
		t.Errorf("no usage: %+v, want nothing known", got)
	}
}

func TestDetailsRefusedOrDropped(t *testing.T) {
	base := ObservedRequest{Reason: FinishStop, UsageKnown: true, PromptTokens: 100, CachedPromptTokens: 40, GenerationTokens: 10}
	refused := map[string]func(*ObservedRequest){
		"input set":          func(r *ObservedRequest) { r.Details.Set(TokenInput, 1) },
		"negative":           func(r *ObservedRequest) { r.Details.Set(TokenReasoning, -1) },
		"without usage":      func(r *ObservedRequest) { *r = ObservedRequest{}; r.Details.Set(TokenReasoning, 1) },
		"cache read differs": func(r *ObservedRequest) { r.Details.Set(TokenCacheRead, 41) },
		"count not known":    func(r *ObservedRequest) { r.Details.Tokens[TokenReasoning] = 3 },
		"error type on stop": func(r *ObservedRequest) { r.ErrorType = ErrorRateLimited },
		"unknown error type": func(r *ObservedRequest) { r.Reason, r.ErrorType = FinishError, numErrorTypes },
		"cost NaN":           func(r *ObservedRequest) { r.Cost = Cost{Known: true, Charged: math.NaN()} },
		"cost not known":     func(r *ObservedRequest) { r.Cost = Cost{Charged: 1} },
		"cost too high":      func(r *ObservedRequest) { r.Cost = Cost{Known: true, Uncached: 2e6} },
	}
	for name, f := range refused {
		r := base
		f(&r)
		if err := r.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	dropped := map[string]struct {
		f    func(*ObservedRequest)
		kind TokenKind
	}{
		"reasoning above output":     {func(r *ObservedRequest) { r.Details.Set(TokenReasoning, 11) }, TokenReasoning},
		"cache write above uncached": {func(r *ObservedRequest) { r.Details.Set(TokenCacheWrite, 61) }, TokenCacheWrite},
		"image above prompt less audio": {func(r *ObservedRequest) {
			r.Details.Set(TokenInputAudio, 90)
			r.Details.Set(TokenInputImage, 11)
		}, TokenInputImage},
		"output audio above output": {func(r *ObservedRequest) { r.Details.Set(TokenOutputAudio, 11) }, TokenOutputAudio},
	}
	for name, d := range dropped {
		r := base
		d.f(&r)
		if err := r.Validate(); err != nil {
			t.Errorf("%s: refused: %v", name, err)
			continue
		}
		b, err := r.Bounded()
		if !errors.Is(err, ErrDetailExceedsTotal) || b.Details.Has(d.kind) {
			t.Errorf("%s: Bounded = %v, %v; want %s dropped with ErrDetailExceedsTotal", name, b.Details, err, d.kind)
		}
	}
	r := base
	r.Details.Set(TokenCacheRead, 40)
	r.CachedPromptTokens, r.Details.Tokens[TokenCacheRead] = 140, 140
	b, err := r.Bounded()
	if !errors.Is(err, ErrCachedExceedsPrompt) || b.Details.Has(TokenCacheRead) {
		t.Errorf("cached above prompt: %+v, %v; want the cache read dropped", b.Details, err)
	}
	r = base
	r.ResponseModel = "\xff"
	if b, err := r.Bounded(); !errors.Is(err, ErrInvalidLabel) || b.ResponseModel != "" {
		t.Errorf("response model not UTF-8: %q, %v; want dropped", b.ResponseModel, err)
	}
}

func TestErrorTypeNames(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range ErrorTypes() {
		s := e.String()
		if s == "" || seen[s] {
			t.Errorf("%d: %q empty or repeated", e, s)
		}
		seen[s] = true
	}
	if ErrorOther.String() != "_OTHER" || ErrorNone.String() != "" {
		t.Errorf("ErrorOther %q, ErrorNone %q", ErrorOther, ErrorNone)
	}
}
