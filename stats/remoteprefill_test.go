package stats_test

import (
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// A decode instance counts its own prefix-cache hits, the transferred rest
// of the prompt but its last token (p2p), and that token computed.
func TestRemotePrefillCached(t *testing.T) {
	tests := []struct {
		name          string
		prompt, local int64
		want          stats.Cached
	}{
		{"all transferred", 1000, 0, stats.Cached{External: 999, ExternalTiers: stats.ExternalTiers{P2P: 999}}},
		{"shared prefix cached here", 1000, 256, stats.Cached{Local: 256, External: 743, ExternalTiers: stats.ExternalTiers{P2P: 743}}},
		{"whole prompt cached here", 1000, 1000, stats.Cached{Local: 999}},
		{"one-token prompt", 1, 0, stats.Cached{}},
		{"empty prompt", 0, 0, stats.Cached{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := stats.RemotePrefillCached(tt.prompt, tt.local)
			if err != nil {
				t.Fatalf("RemotePrefillCached(%d, %d): %v", tt.prompt, tt.local, err)
			}
			if got != tt.want {
				t.Errorf("RemotePrefillCached(%d, %d) = %+v, want %+v", tt.prompt, tt.local, got, tt.want)
			}
		})
	}
}

// For every prompt and local hit count the split is valid, sums to the
// prompt and computes exactly the last token.
func TestRemotePrefillCachedComputesTheLastToken(t *testing.T) {
	for prompt := int64(1); prompt <= 40; prompt++ {
		for local := int64(0); local <= prompt; local++ {
			c, err := stats.RemotePrefillCached(prompt, local)
			if err != nil {
				t.Fatalf("RemotePrefillCached(%d, %d): %v", prompt, local, err)
			}
			p, err := stats.SplitCached(prompt, c)
			if err != nil {
				t.Fatalf("SplitCached(%d, %+v): %v", prompt, c, err)
			}
			if p.Computed != 1 || p.Total() != prompt || p.ByTier(stats.TierP2P) != p.ExternalKVTransfer {
				t.Fatalf("RemotePrefillCached(%d, %d) splits as %+v: want 1 computed, the rest cached, the external p2p", prompt, local, p)
			}
		}
	}
}

func TestRemotePrefillCachedErrors(t *testing.T) {
	tests := []struct {
		name          string
		prompt, local int64
		sentinel      error
		field, value  string
	}{
		{"negative prompt", -1, 0, stats.ErrNegative, "prompt", "-1"},
		{"negative local", 10, -3, stats.ErrNegative, "localCached", "-3"},
		{"local exceeds prompt", 10, 11, stats.ErrCachedExceedsPrompt, "localCached", "11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := stats.RemotePrefillCached(tt.prompt, tt.local)
			wantErr(t, err, tt.sentinel, tt.field, tt.value)
			if got != (stats.Cached{}) {
				t.Errorf("result on error = %+v, want zero", got)
			}
		})
	}
}

// Through a Timeline: the decode instance's first output counts the split,
// and its step did the last prompt token and the generated one.
func TestRemotePrefillCachedTimeline(t *testing.T) {
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tl := stats.NewTimeline(stats.Request{Arrival: at, PromptTokens: 512})
	c, err := stats.RemotePrefillCached(512, 128)
	if err != nil {
		t.Fatal(err)
	}
	tl.ScheduledWith(at.Add(time.Millisecond), c)
	var step stats.Iteration
	step.Output(tl, at.Add(20*time.Millisecond), 1)
	if err := step.Refused().Err(); err != nil {
		t.Fatal(err)
	}
	want := stats.PromptTokens{Computed: 1, LocalCacheHit: 128, ExternalKVTransfer: 383, ExternalTiers: stats.ExternalTiers{P2P: 383}}
	if step.PromptTokens != want || step.TokensDone() != 2 {
		t.Errorf("step prompt tokens %+v, tokens done %d; want %+v and 2", step.PromptTokens, step.TokensDone(), want)
	}
}
