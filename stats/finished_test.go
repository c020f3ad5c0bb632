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
		{"valid child that did not complete its parent", func(f *stats.FinishedRequest) {
			f.N, f.MaxGenerationTokens, f.ParentPending = 2, 0, true
		}, nil, ""},
		{"valid n = 1 request with zero N and MaxGenerationTokens", func(f *stats.FinishedRequest) { f.N, f.MaxGenerationTokens = 0, 0 }, nil, ""},
		{"valid n = 1 request with zero N", func(f *stats.FinishedRequest) { f.N = 0 }, nil, ""},
		{"valid duration of MaxSeconds", func(f *stats.FinishedRequest) { f.E2ELatency = stats.MaxSeconds }, nil, ""},
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
		{"max generation of an n = 1 request above its own", func(f *stats.FinishedRequest) { f.N, f.MaxGenerationTokens = 0, 5 }, stats.ErrOutOfRange, "MaxGenerationTokens = 5"},
		{"parent pending on an n = 1 request", func(f *stats.FinishedRequest) { f.N, f.MaxGenerationTokens, f.ParentPending = 0, 0, true }, stats.ErrOutOfRange, "N = 0"},
		{"parent pending with the parent's max", func(f *stats.FinishedRequest) { f.N, f.ParentPending = 2, true }, stats.ErrOutOfRange, "MaxGenerationTokens = 4"},
		{"absurd E2E", func(f *stats.FinishedRequest) { f.E2ELatency = 1e308 }, stats.ErrOutOfRange, "E2ELatency = 1e+308"},
		{"decode time above MaxSeconds", func(f *stats.FinishedRequest) { f.DecodeTime = stats.MaxSeconds * 1.0000001 }, stats.ErrOutOfRange, "DecodeTime"},
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

// TestFinishedRequestParent: the zero values are right for an n = 1 request
// (n 1, its own generation tokens, observed); a pending child observes
// nothing; the last child of n > 1 observes its parent's values.
func TestFinishedRequestParent(t *testing.T) {
	tests := []struct {
		name       string
		f          stats.FinishedRequest
		n, maxGen  int64
		wantObserv bool
	}{
		{"zero value", stats.FinishedRequest{}, 1, 0, true},
		{"n = 1 with zero N and max", stats.FinishedRequest{GenerationTokens: 7}, 1, 7, true},
		{"n = 1 filled in", stats.FinishedRequest{GenerationTokens: 7, N: 1, MaxGenerationTokens: 7}, 1, 7, true},
		{"last child of n = 3", stats.FinishedRequest{GenerationTokens: 7, N: 3, MaxGenerationTokens: 9}, 3, 9, true},
		{"pending child", stats.FinishedRequest{GenerationTokens: 7, N: 3, ParentPending: true}, 0, 0, false},
	}
	for _, tt := range tests {
		n, maxGen, ok := tt.f.Parent()
		if n != tt.n || maxGen != tt.maxGen || ok != tt.wantObserv {
			t.Errorf("%s: Parent() = %d, %d, %v; want %d, %d, %v", tt.name, n, maxGen, ok, tt.n, tt.maxGen, tt.wantObserv)
		}
		if err := tt.f.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", tt.name, err)
		}
	}
}
