package stats_test

import (
	"errors"
	"math"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// With n > 1 choices the time per output token is the token-weighted mean
// of the choices' own: sum of their decode times / (tokens - choices).
func TestObservedRequestPerChoiceTPOT(t *testing.T) {
	r := stats.ObservedRequest{E2ELatency: 1, FirstToken: true, TimeToFirstToken: 0.010, TimeToLastToken: 0.072,
		DecodeChoices: 2, ChoicesDecodeTime: 0.120, UsageKnown: true, PromptTokens: 5, GenerationTokens: 6}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if v, ok := r.TimePerOutputToken(); !ok || math.Abs(v-0.030) > 1e-12 {
		t.Errorf("TimePerOutputToken() = %v, %v; want 0.030", v, ok)
	}
	r.GenerationTokens = 2 // one token per choice: no decode
	if v, ok := r.TimePerOutputToken(); !ok || v != 0 {
		t.Errorf("TimePerOutputToken() with a token per choice = %v, %v", v, ok)
	}
}

// Per-choice and server-reported times are refused without their flag, or
// when not a valid duration.
func TestObservedRequestServerTimesValidate(t *testing.T) {
	ok := stats.ObservedRequest{E2ELatency: 1, ServerTimes: true, PrefillTime: 0.05, DecodeTime: 0.3}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]stats.ObservedRequest{
		"prefill without ServerTimes": {E2ELatency: 1, PrefillTime: 0.05},
		"decode without ServerTimes":  {E2ELatency: 1, DecodeTime: 0.3},
		"negative decode":             {E2ELatency: 1, ServerTimes: true, DecodeTime: -1},
		"NaN prefill":                 {E2ELatency: 1, ServerTimes: true, PrefillTime: math.NaN()},
		"choices without FirstToken":  {E2ELatency: 1, DecodeChoices: 2, ChoicesDecodeTime: 0.1},
		"choice time with one choice": {E2ELatency: 1, FirstToken: true, DecodeChoices: 1, ChoicesDecodeTime: 0.1},
		"negative choices":            {E2ELatency: 1, FirstToken: true, DecodeChoices: -2},
	} {
		err := r.Validate()
		if !errors.Is(err, stats.ErrOutOfRange) && !errors.Is(err, stats.ErrNegative) && !errors.Is(err, stats.ErrNotFinite) {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
}
