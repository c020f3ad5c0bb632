package instrument_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// A request carrying an absurd max_tokens or n (a client's 400) is recorded
// without it, and every later request is still recorded: before the bound,
// one max_tokens of 2^63-1000 filled the engine's running total and every
// later request was refused whole (stats.ErrOverflow).
func TestAbsurdCountsDoNotPoisonLaterRequests(t *testing.T) {
	for name, change := range map[string]func(*stats.ObservedRequest){
		"max_tokens": func(r *stats.ObservedRequest) { r.MaxTokens = math.MaxInt64 - 1000 },
		"n":          func(r *stats.ObservedRequest) { r.N = math.MaxInt64 - 1000 },
		"usage": func(r *stats.ObservedRequest) {
			r.PromptTokens, r.GenerationTokens, r.CachedPromptTokens = math.MaxInt64-1000, math.MaxInt64-1000, 0
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			e := h.engine(0)
			bad := observed()
			bad.Reason = stats.FinishError
			change(&bad)
			err := instrument.RecordRequestErr(e, t.Context(), &bad)
			if !errors.Is(err, stats.ErrOutOfRange) {
				t.Fatalf("RecordRequest(absurd %s) = %v, want an error matching ErrOutOfRange", name, err)
			}
			for i := range 5 {
				r := observed()
				if err := instrument.RecordRequestErr(e, t.Context(), &r); err != nil {
					t.Fatalf("request %d after the absurd one: %v", i, err)
				}
			}
			s := h.collect()
			checkCounter(t, s, 1, "vllm:request_success", engineLabels("0", "finished_reason", "error")...)
			checkCounter(t, s, 5, "vllm:request_success", engineLabels("0", "finished_reason", "stop")...)
			generation := 6 * 11.0 // the absurd request's usage is recorded
			if name == "usage" {
				generation = 5 * 11
			}
			checkCounter(t, s, generation, "vllm:generation_tokens", engineLabels("0")...)
			maxTokens := s.get(t, "vllm:request_params_max_tokens", engineLabels("0")...)
			want := 6 * 64.0
			if name == "max_tokens" {
				want = 5 * 64
			}
			if maxTokens.sum != want {
				t.Errorf("params_max_tokens sum = %v, want %v (the absurd value dropped)", maxTokens.sum, want)
			}
		})
	}
}

// A leg with absurd usage is recorded without it; later legs are recorded.
func TestBackendAbsurdUsage(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	b, err := e.Backend("decode-0", instrument.RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	bad := observed()
	bad.PromptTokens = math.MaxInt64
	if err := instrument.RecordRequestErr(b, t.Context(), &bad); !errors.Is(err, stats.ErrOutOfRange) {
		t.Fatalf("RecordRequest(absurd usage) = %v", err)
	}
	for range 3 {
		r := observed()
		if err := instrument.RecordRequestErr(b, t.Context(), &r); err != nil {
			t.Fatal(err)
		}
	}
	s := h.collect()
	labels := engineLabels("0", "backend", "decode-0", "backend.role", "decode",
		"gen_ai.operation.name", "text_completion", "gen_ai.provider.name", "self_hosted", "gen_ai.request.model", model)
	checkHistogram(t, s, 3, 300, map[int]uint64{4: 3}, instrument.NameGenAIClientTokenUsage, append(labels, "gen_ai.token.type", "input")...)
	if d := s.get(t, instrument.NameGenAIClientOperationDuration, labels...); d.count != 4 {
		t.Errorf("operation duration count = %d, want 4 (the absurd leg recorded without its usage)", d.count)
	}
}

// Backends from untrusted input (a header, a URL) keep the series bounded:
// past 1,024 backends, and for names longer than MaxModelNameLen, legs go
// to BackendOther.
func TestBackendsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	e := h.engine(0)
	seen := map[*instrument.Backend]bool{}
	for i := range 3000 {
		role := []string{"", instrument.RolePrefill, instrument.RoleDecode, fmt.Sprintf("role-%d", i)}[i%4]
		b, err := e.Backend(fmt.Sprintf("10.0.%d.%d:8000", i/256, i%256), role)
		if err != nil {
			t.Fatal(err)
		}
		seen[b] = true
	}
	if len(seen) != 1024+4 {
		t.Errorf("%d backend handles for 3000 backends, want 1024 and 4 of %s", len(seen), instrument.BackendOther)
	}
	long, err := e.Backend(strings.Repeat("h", instrument.MaxModelNameLen+1), instrument.RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	if long.Name() != instrument.BackendOther || long.Role() != instrument.RoleDecode {
		t.Errorf("a long backend name is recorded as %q/%q, want %q/decode", long.Name(), long.Role(), instrument.BackendOther)
	}
	odd, _ := e.Backend("10.0.0.0:9", "role-x")
	if odd.Name() != instrument.BackendOther || odd.Role() != instrument.BackendOther {
		t.Errorf("the 1,025th backend with an unknown role is %q/%q", odd.Name(), odd.Role())
	}
}
