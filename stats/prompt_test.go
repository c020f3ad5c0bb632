package stats_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// wantErr checks that err matches sentinel and that its message names every
// string in mentions (the field and the bad value).
func wantErr(t *testing.T, err, sentinel error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error = %v, want one matching %q", err, sentinel)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func TestSplitPrompt(t *testing.T) {
	const maxInt = math.MaxInt64
	tests := []struct {
		name                           string
		prompt, local, external        int64
		want                           stats.PromptTokens
		wantTotal, wantCached          int64
		wantCompute, wantHit, wantXfer int64 // BySource
	}{
		{
			// The connector supplied the whole prompt: nothing computed here.
			name: "P/D decode node", prompt: 1000, local: 0, external: 1000,
			want:      stats.PromptTokens{Computed: 0, LocalCacheHit: 0, ExternalKVTransfer: 1000},
			wantTotal: 1000, wantCached: 1000, wantCompute: 0, wantHit: 0, wantXfer: 1000,
		},
		{
			name: "fully locally cached", prompt: 512, local: 512, external: 0,
			want:      stats.PromptTokens{Computed: 0, LocalCacheHit: 512, ExternalKVTransfer: 0},
			wantTotal: 512, wantCached: 512, wantCompute: 0, wantHit: 512, wantXfer: 0,
		},
		{
			// 1000 - 256 - 512 = 232 computed.
			name: "partial mix", prompt: 1000, local: 256, external: 512,
			want:      stats.PromptTokens{Computed: 232, LocalCacheHit: 256, ExternalKVTransfer: 512},
			wantTotal: 1000, wantCached: 768, wantCompute: 232, wantHit: 256, wantXfer: 512,
		},
		{
			name: "nothing cached", prompt: 300,
			want:      stats.PromptTokens{Computed: 300},
			wantTotal: 300, wantCached: 0, wantCompute: 300,
		},
		{
			name: "zero prompt",
			want: stats.PromptTokens{},
		},
		{
			// The largest valid split: cached sums to exactly MaxInt64.
			name: "cached is exactly MaxInt64", prompt: maxInt, local: maxInt - 1, external: 1,
			want:      stats.PromptTokens{Computed: 0, LocalCacheHit: maxInt - 1, ExternalKVTransfer: 1},
			wantTotal: maxInt, wantCached: maxInt, wantHit: maxInt - 1, wantXfer: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := stats.SplitPrompt(tt.prompt, tt.local, tt.external)
			if err != nil {
				t.Fatalf("SplitPrompt(%d, %d, %d): %v", tt.prompt, tt.local, tt.external, err)
			}
			if got != tt.want {
				t.Errorf("SplitPrompt(%d, %d, %d) = %+v, want %+v", tt.prompt, tt.local, tt.external, got, tt.want)
			}
			if got.Total() != tt.wantTotal {
				t.Errorf("Total() = %d, want %d", got.Total(), tt.wantTotal)
			}
			if got.Cached() != tt.wantCached {
				t.Errorf("Cached() = %d, want %d", got.Cached(), tt.wantCached)
			}
			for s, want := range map[stats.Source]int64{
				stats.LocalCompute:       tt.wantCompute,
				stats.LocalCacheHit:      tt.wantHit,
				stats.ExternalKVTransfer: tt.wantXfer,
			} {
				if got.BySource(s) != want {
					t.Errorf("BySource(%s) = %d, want %d", s, got.BySource(s), want)
				}
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestSplitPromptErrors(t *testing.T) {
	const maxInt = math.MaxInt64
	tests := []struct {
		name                    string
		prompt, local, external int64
		sentinel                error
		field, value            string
	}{
		{"negative prompt", -1, 0, 0, stats.ErrNegative, "prompt", "-1"},
		{"negative local", 10, -5, 0, stats.ErrNegative, "localCached", "-5"},
		{"negative external", 10, 0, -7, stats.ErrNegative, "externalCached", "-7"},
		// 60 + 50 = 110 > 100.
		{"cached exceeds prompt", 100, 60, 50, stats.ErrCachedExceedsPrompt, "localCached+externalCached", "110"},
		{"external alone exceeds prompt", 1000, 0, 1001, stats.ErrCachedExceedsPrompt, "localCached+externalCached", "1001"},
		{"local+external overflows", maxInt, maxInt, 1, stats.ErrOverflow, "externalCached", "1"},
		{"local+external overflows, both large", 10, maxInt - 1, 2, stats.ErrOverflow, "externalCached", "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := stats.SplitPrompt(tt.prompt, tt.local, tt.external)
			wantErr(t, err, tt.sentinel, tt.field, tt.value)
			if got != (stats.PromptTokens{}) {
				t.Errorf("result on error = %+v, want zero", got)
			}
			var fe *stats.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("errors.As(%v, *FieldError) = false", err)
			}
			if fe.Field != tt.field {
				t.Errorf("FieldError.Field = %q, want %q", fe.Field, tt.field)
			}
		})
	}
}

func TestFieldError(t *testing.T) {
	_, err := stats.SplitPrompt(10, -5, 0)
	var fe *stats.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("errors.As(%v, *FieldError) = false", err)
	}
	if fe.Field != "localCached" || fe.Value != int64(-5) || fe.Err != stats.ErrNegative {
		t.Errorf("FieldError = %+v, want {localCached -5 ErrNegative}", *fe)
	}
	if want := "stats: localCached = -5: must not be negative"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestPromptTokensAdd(t *testing.T) {
	const maxInt = math.MaxInt64
	tests := []struct {
		name     string
		p, q     stats.PromptTokens
		want     stats.PromptTokens // p after Add; p itself when an error is expected
		sentinel error
		field    string
	}{
		{
			name: "sums each source",
			p:    stats.PromptTokens{Computed: 100, LocalCacheHit: 20},
			q:    stats.PromptTokens{ExternalKVTransfer: 500, Computed: 1},
			want: stats.PromptTokens{Computed: 101, LocalCacheHit: 20, ExternalKVTransfer: 500},
		},
		{
			name: "zero operand",
			p:    stats.PromptTokens{Computed: 3, LocalCacheHit: 4, ExternalKVTransfer: 5},
			want: stats.PromptTokens{Computed: 3, LocalCacheHit: 4, ExternalKVTransfer: 5},
		},
		{
			name:     "one source overflows",
			p:        stats.PromptTokens{Computed: maxInt, LocalCacheHit: 7},
			q:        stats.PromptTokens{Computed: 1, LocalCacheHit: 1},
			want:     stats.PromptTokens{Computed: maxInt, LocalCacheHit: 7},
			sentinel: stats.ErrOverflow, field: "Computed",
		},
		{
			name:     "last source overflows after the others were summed",
			p:        stats.PromptTokens{Computed: 1, LocalCacheHit: 1, ExternalKVTransfer: maxInt},
			q:        stats.PromptTokens{Computed: 1, LocalCacheHit: 1, ExternalKVTransfer: 1},
			want:     stats.PromptTokens{Computed: 1, LocalCacheHit: 1, ExternalKVTransfer: maxInt},
			sentinel: stats.ErrOverflow, field: "ExternalKVTransfer",
		},
		{
			// Every source fits, but the total (maxInt - 10 + 5 + 6) does not.
			name:     "total overflows",
			p:        stats.PromptTokens{Computed: maxInt - 10},
			q:        stats.PromptTokens{LocalCacheHit: 5, ExternalKVTransfer: 6},
			want:     stats.PromptTokens{Computed: maxInt - 10},
			sentinel: stats.ErrOverflow,
		},
		{
			name:     "negative operand",
			p:        stats.PromptTokens{Computed: 10},
			q:        stats.PromptTokens{Computed: 5, LocalCacheHit: -3},
			want:     stats.PromptTokens{Computed: 10},
			sentinel: stats.ErrNegative, field: "LocalCacheHit",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			err := p.Add(tt.q)
			if tt.sentinel == nil && err != nil {
				t.Fatalf("Add: %v", err)
			}
			if tt.sentinel != nil {
				wantErr(t, err, tt.sentinel, tt.field)
			}
			if p != tt.want {
				t.Errorf("after Add: %+v, want %+v", p, tt.want)
			}
		})
	}
}

func TestPromptTokensValidate(t *testing.T) {
	const maxInt = math.MaxInt64
	tests := []struct {
		name     string
		p        stats.PromptTokens
		sentinel error
		field    string
	}{
		{"valid", stats.PromptTokens{Computed: 1, LocalCacheHit: 2, ExternalKVTransfer: 3}, nil, ""},
		{"negative Computed", stats.PromptTokens{Computed: -1}, stats.ErrNegative, "Computed = -1"},
		{"negative LocalCacheHit", stats.PromptTokens{LocalCacheHit: -2}, stats.ErrNegative, "LocalCacheHit = -2"},
		{"negative ExternalKVTransfer", stats.PromptTokens{ExternalKVTransfer: -3}, stats.ErrNegative, "ExternalKVTransfer = -3"},
		{"cached overflows", stats.PromptTokens{LocalCacheHit: maxInt, ExternalKVTransfer: 1}, stats.ErrOverflow, "ExternalKVTransfer"},
		{"total overflows", stats.PromptTokens{Computed: 1, LocalCacheHit: maxInt}, stats.ErrOverflow, "Computed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.sentinel == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			wantErr(t, err, tt.sentinel, tt.field)
		})
	}
}

func TestSource(t *testing.T) {
	want := []string{"local_compute", "local_cache_hit", "external_kv_transfer"}
	got := stats.Sources()
	if len(got) != 3 {
		t.Fatalf("len(Sources()) = %d, want 3", len(got))
	}
	for i, s := range got {
		if s.String() != want[i] {
			t.Errorf("Sources()[%d].String() = %q, want %q", i, s.String(), want[i])
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s.Validate() = %v", s, err)
		}
	}
	if stats.LocalCompute.String() != "local_compute" ||
		stats.LocalCacheHit.String() != "local_cache_hit" ||
		stats.ExternalKVTransfer.String() != "external_kv_transfer" {
		t.Errorf("constants' labels = %s, %s, %s", stats.LocalCompute, stats.LocalCacheHit, stats.ExternalKVTransfer)
	}

	bad := stats.Source(7)
	wantErr(t, bad.Validate(), stats.ErrUnknownSource, "Source", "7")
	if bad.String() != "unknown" {
		t.Errorf("Source(7).String() = %q, want unknown", bad.String())
	}
	if n := (stats.PromptTokens{Computed: 1, LocalCacheHit: 2, ExternalKVTransfer: 3}).BySource(bad); n != 0 {
		t.Errorf("BySource(Source(7)) = %d, want 0", n)
	}
}
