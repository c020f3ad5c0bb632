package stats_test

import (
	"math"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

func TestFinishReason(t *testing.T) {
	want := []string{"stop", "length", "abort", "error", "repetition"}
	got := stats.FinishReasons()
	if len(got) != len(want) {
		t.Fatalf("len(FinishReasons()) = %d, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.String() != want[i] {
			t.Errorf("FinishReasons()[%d] = %q, want %q", i, r, want[i])
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s.Validate() = %v", r, err)
		}
	}
	consts := []stats.FinishReason{stats.FinishStop, stats.FinishLength, stats.FinishAbort, stats.FinishError, stats.FinishRepetition}
	for i, r := range consts {
		if r.String() != want[i] {
			t.Errorf("constant %d String() = %q, want %q", i, r, want[i])
		}
	}
	bad := stats.FinishReason(99)
	if bad.String() != "unknown" {
		t.Errorf("FinishReason(99).String() = %q, want unknown", bad)
	}
	wantErr(t, bad.Validate(), stats.ErrUnknownFinishReason, "Reason", "99")
}

func TestFinishedRequestValidate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name     string
		mutate   func(f *stats.FinishedRequest)
		sentinel error
		mention  string
	}{
		{"valid", func(*stats.FinishedRequest) {}, nil, ""},
		{"valid child that did not complete its parent", func(f *stats.FinishedRequest) { f.N, f.MaxGenerationTokens = 0, 0 }, nil, ""},
		{"valid abort before any output", func(f *stats.FinishedRequest) {
			*f = stats.FinishedRequest{Reason: stats.FinishAbort, PromptTokens: 10, N: 1, E2ELatency: 3}
		}, nil, ""},
		{"unknown reason", func(f *stats.FinishedRequest) { f.Reason = 5 }, stats.ErrUnknownFinishReason, "Reason = 5"},
		{"negative prompt", func(f *stats.FinishedRequest) { f.PromptTokens = -1 }, stats.ErrNegative, "PromptTokens = -1"},
		{"negative generation", func(f *stats.FinishedRequest) { f.GenerationTokens = -1 }, stats.ErrNegative, "GenerationTokens = -1"},
		{"negative prefill computed", func(f *stats.FinishedRequest) { f.PrefillComputedTokens = -1 }, stats.ErrNegative, "PrefillComputedTokens = -1"},
		{"negative max tokens", func(f *stats.FinishedRequest) { f.MaxTokens = -1 }, stats.ErrNegative, "MaxTokens = -1"},
		{"negative n", func(f *stats.FinishedRequest) { f.N = -1 }, stats.ErrNegative, "N = -1"},
		{"negative max generation", func(f *stats.FinishedRequest) { f.MaxGenerationTokens = -1 }, stats.ErrNegative, "MaxGenerationTokens = -1"},
		{"prefill computed exceeds prompt", func(f *stats.FinishedRequest) { f.PrefillComputedTokens = 101 }, stats.ErrOutOfRange, "PrefillComputedTokens = 101"},
		{"max generation below own generation", func(f *stats.FinishedRequest) { f.MaxGenerationTokens = 3 }, stats.ErrOutOfRange, "MaxGenerationTokens = 3"},
		{"max generation without n", func(f *stats.FinishedRequest) { f.N = 0 }, stats.ErrOutOfRange, "MaxGenerationTokens = 4"},
		{"E2E NaN", func(f *stats.FinishedRequest) { f.E2ELatency = nan }, stats.ErrNotFinite, "E2ELatency = NaN"},
		{"queue time +Inf", func(f *stats.FinishedRequest) { f.QueueTime = inf }, stats.ErrNotFinite, "QueueTime = +Inf"},
		{"prefill time -Inf", func(f *stats.FinishedRequest) { f.PrefillTime = -inf }, stats.ErrNotFinite, "PrefillTime = -Inf"},
		{"inference time negative", func(f *stats.FinishedRequest) { f.InferenceTime = -0.5 }, stats.ErrNegative, "InferenceTime = -0.5"},
		{"decode time negative", func(f *stats.FinishedRequest) { f.DecodeTime = -1 }, stats.ErrNegative, "DecodeTime = -1"},
		{"TPOT NaN", func(f *stats.FinishedRequest) { f.TimePerOutputToken = nan }, stats.ErrNotFinite, "TimePerOutputToken = NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := validFinished()
			tt.mutate(&f)
			err := f.Validate()
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			wantErr(t, err, tt.sentinel, tt.mention)
		})
	}
}
