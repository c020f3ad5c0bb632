package stats_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
)

func TestTierLabels(t *testing.T) {
	var got []string
	for _, tier := range stats.Tiers() {
		got = append(got, tier.String())
		if err := tier.Validate(); err != nil {
			t.Errorf("%v.Validate() = %v", tier, err)
		}
	}
	// vLLM's CacheHitSource values (cache_hit_source.py @8548f56c).
	want := []string{"device", "host", "p2p", "disk", "external_unspecified"}
	if !slices.Equal(got, want) {
		t.Errorf("tiers = %q, want %q", got, want)
	}
	bad := stats.Tier(len(want))
	if bad.String() != "unknown" {
		t.Errorf("String() of an unknown tier = %q", bad.String())
	}
	wantErr(t, bad.Validate(), stats.ErrUnknownTier, "Tier", "5")
}

// byTier returns the counts of p over stats.Tiers().
func byTier(p stats.PromptTokens) []int64 {
	var out []int64
	for _, tier := range stats.Tiers() {
		out = append(out, p.ByTier(tier))
	}
	return out
}

func TestSplitCachedTiers(t *testing.T) {
	tests := []struct {
		name   string
		prompt int64
		c      stats.Cached
		want   []int64 // device, host, p2p, disk, external_unspecified
	}{
		// No tiers: local hits are device, every external token unspecified.
		{"zero tiers", 1000, stats.Cached{Local: 256, External: 512}, []int64{256, 0, 0, 0, 512}},
		{"P/D decode node", 3000, stats.Cached{External: 2999, ExternalTiers: stats.ExternalTiers{P2P: 2999}},
			[]int64{0, 0, 2999, 0, 0}},
		{"host and disk, part unattributed", 1000,
			stats.Cached{Local: 100, External: 800, ExternalTiers: stats.ExternalTiers{Host: 300, Disk: 200}},
			[]int64{100, 300, 0, 200, 300}},
		{"nothing cached", 10, stats.Cached{}, []int64{0, 0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := stats.SplitCached(tt.prompt, tt.c)
			if err != nil {
				t.Fatal(err)
			}
			got := byTier(p)
			if !slices.Equal(got, tt.want) {
				t.Errorf("by tier = %v, want %v", got, tt.want)
			}
			var sum int64
			for _, v := range got {
				sum += v
			}
			if sum != p.Cached() {
				t.Errorf("tiers sum to %d, Cached() = %d", sum, p.Cached())
			}
			if p.Total() != tt.prompt {
				t.Errorf("Total() = %d, want %d", p.Total(), tt.prompt)
			}
		})
	}
	if got := (stats.PromptTokens{LocalCacheHit: 5}).ByTier(stats.Tier(9)); got != 0 {
		t.Errorf("ByTier(unknown) = %d, want 0", got)
	}
}

func TestSplitCachedErrors(t *testing.T) {
	tests := []struct {
		name     string
		prompt   int64
		c        stats.Cached
		sentinel error
		mentions []string
	}{
		{"tiers exceed external", 100, stats.Cached{External: 50, ExternalTiers: stats.ExternalTiers{Host: 30, P2P: 21}},
			stats.ErrTiersExceedExternal, []string{"ExternalTiers.Host+P2P+Disk", "51"}},
		{"tiers without external", 100, stats.Cached{Local: 10, ExternalTiers: stats.ExternalTiers{Disk: 1}},
			stats.ErrTiersExceedExternal, []string{"ExternalTiers"}},
		{"negative tier", 100, stats.Cached{External: 50, ExternalTiers: stats.ExternalTiers{P2P: -1}},
			stats.ErrNegative, []string{"ExternalTiers.P2P", "-1"}},
		{"tier overflow", 100, stats.Cached{External: 50, ExternalTiers: stats.ExternalTiers{Host: math.MaxInt64, Disk: 1}},
			stats.ErrOverflow, []string{"ExternalTiers"}},
		{"cached exceeds prompt first", 10, stats.Cached{External: 50, ExternalTiers: stats.ExternalTiers{P2P: 60}},
			stats.ErrCachedExceedsPrompt, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := stats.SplitCached(tt.prompt, tt.c)
			wantErr(t, err, tt.sentinel, tt.mentions...)
		})
	}
}

func TestPromptTokensTiersAddAndValidate(t *testing.T) {
	p := stats.PromptTokens{LocalCacheHit: 10, ExternalKVTransfer: 20, ExternalTiers: stats.ExternalTiers{P2P: 15}}
	q := stats.PromptTokens{Computed: 5, ExternalKVTransfer: 8, ExternalTiers: stats.ExternalTiers{Host: 3, Disk: 4}}
	if err := p.Add(q); err != nil {
		t.Fatal(err)
	}
	if got, want := byTier(p), []int64{10, 3, 15, 4, 6}; !slices.Equal(got, want) {
		t.Errorf("after Add, by tier = %v, want %v", got, want)
	}

	bad := stats.PromptTokens{ExternalKVTransfer: 2, ExternalTiers: stats.ExternalTiers{Host: 3}}
	wantErr(t, bad.Validate(), stats.ErrTiersExceedExternal, "ExternalTiers")
	before := p
	wantErr(t, p.Add(bad), stats.ErrTiersExceedExternal)
	if p != before {
		t.Errorf("a failed Add changed p: %+v, want %+v", p, before)
	}
	over := stats.PromptTokens{ExternalKVTransfer: math.MaxInt64, ExternalTiers: stats.ExternalTiers{Host: math.MaxInt64}}
	if err := over.Add(stats.PromptTokens{ExternalKVTransfer: 1, ExternalTiers: stats.ExternalTiers{Host: 1}}); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("overflowing Add = %v, want ErrOverflow", err)
	}
}

// The tiers of the scheduling snapshot reach the first output; Scheduled
// (without tiers) leaves the external tokens unspecified; a re-scheduling
// before the first output keeps the first snapshot's tiers.
func TestTimelineScheduledWithTiers(t *testing.T) {
	tests := []struct {
		name     string
		schedule func(tl *stats.Timeline) error
		want     []int64
	}{
		{"Scheduled", func(tl *stats.Timeline) error {
			return eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(10), 64, 900) })
		},
			[]int64{64, 0, 0, 0, 900}},
		{"ScheduledWith", func(tl *stats.Timeline) error {
			return eventtest.Err(tl.Refused, func() {
				tl.ScheduledWith(ms(10), stats.Cached{Local: 64, External: 900,
					ExternalTiers: stats.ExternalTiers{Host: 100, P2P: 700}})
			})
		}, []int64{64, 100, 700, 0, 100}},
		{"preempted before the first output", func(tl *stats.Timeline) error {
			if err := eventtest.Err(tl.Refused, func() {
				tl.ScheduledWith(ms(10), stats.Cached{External: 900, ExternalTiers: stats.ExternalTiers{P2P: 900}})
			}); err != nil {
				return err
			}
			if err := tl.Preempted(ms(20)); err != nil {
				return err
			}
			return eventtest.Err(tl.Refused, func() {
				tl.ScheduledWith(ms(30), stats.Cached{Local: 512, External: 200, ExternalTiers: stats.ExternalTiers{Disk: 200}})
			})
		}, []int64{0, 0, 900, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 1000})
			if err := tl.Err(); err != nil {
				t.Fatal(err)
			}
			if err := eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }); err != nil {
				t.Fatal(err)
			}
			if err := tt.schedule(tl); err != nil {
				t.Fatal(err)
			}
			o, err := tl.Output(ms(100), 1)
			if err != nil {
				t.Fatal(err)
			}
			var it stats.Iteration
			if err := it.AddOutput(o); err != nil {
				t.Fatal(err)
			}
			if got := byTier(it.PromptTokens); !slices.Equal(got, tt.want) {
				t.Errorf("iteration by tier = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTimelineScheduledWithBadTiers(t *testing.T) {
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 100})
	if err := tl.Err(); err != nil {
		t.Fatal(err)
	}
	if err := eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }); err != nil {
		t.Fatal(err)
	}
	err := eventtest.Err(tl.Refused, func() {
		tl.ScheduledWith(ms(2), stats.Cached{External: 10, ExternalTiers: stats.ExternalTiers{P2P: 11}})
	})
	wantErr(t, err, stats.ErrTiersExceedExternal)
	// The Timeline is unchanged: it is still queued and takes a good scheduling.
	if _, err := tl.Output(ms(3), 1); !errors.Is(err, stats.ErrOutOfOrder) {
		t.Errorf("Output after a refused scheduling = %v, want ErrOutOfOrder", err)
	}
	if err := eventtest.Err(tl.Refused, func() {
		tl.ScheduledWith(ms(2), stats.Cached{External: 10, ExternalTiers: stats.ExternalTiers{P2P: 10}})
	}); err != nil {
		t.Errorf("good scheduling after a refused one: %v", err)
	}
}

// Every finished request reports its preemptions, 0 included; an abort
// while queued too.
func TestTimelinePreemptionCount(t *testing.T) {
	tests := []struct {
		name   string
		events []event
		want   int64
	}{
		{"never preempted", []event{queued(1), scheduled(2, 0, 0), output(3, 1), finish(4, stats.FinishStop)}, 0},
		{"aborted while queued", []event{queued(1), finish(4, stats.FinishAbort)}, 0},
		{"preempted twice", []event{queued(1), scheduled(2, 0, 0), preempted(3), scheduled(4, 0, 0),
			output(5, 1), preempted(6), scheduled(7, 0, 0), output(8, 1), finish(9, stats.FinishStop)}, 2},
		{"aborted while preempted", []event{queued(1), scheduled(2, 0, 0), preempted(3), finish(4, stats.FinishAbort)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
			if err := tl.Err(); err != nil {
				t.Fatal(err)
			}
			_, f := run(t, tl, tt.events)
			if f.Preemptions != tt.want {
				t.Errorf("Preemptions = %d, want %d", f.Preemptions, tt.want)
			}
		})
	}
	wantErr(t, stats.FinishedRequest{Preemptions: -1}.Validate(), stats.ErrNegative, "Preemptions")
}
