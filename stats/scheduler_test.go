package stats_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// validScheduler has every optional part set and passes Validate.
func validScheduler() stats.Scheduler {
	return stats.Scheduler{
		Running:              8,
		WaitingCapacity:      3,
		WaitingDeferred:      2,
		KVCacheUsage:         0.75,
		PrefixCache:          stats.CacheQueries{Queries: 1000, Hits: 600},
		MultimodalCache:      stats.CacheQueries{Queries: 4, Hits: 4},
		SleepState:           stats.Awake,
		ConnectorPrefixCache: &stats.CacheQueries{Queries: 400, Hits: 400},
		SpecDecoding:         &stats.SpecDecoding{Drafts: 10, DraftTokens: 30, AcceptedTokens: 18, AcceptedPerPosition: []int64{9, 6, 3}},
		LoRA:                 &stats.LoRA{MaxLoRA: MaxLoRA, Running: []string{"sql-adapter"}, Waiting: []string{"chat", "sql-adapter"}},
		KVTransfer: &stats.KVTransfer{
			XferTime: []float64{0.02}, PostTime: []float64{0.001},
			BytesTransferred: []int64{1 << 20}, NumDescriptors: []int64{64},
			FailedTransfers: 1,
		},
		Evictions: []stats.KVEviction{{Lifetime: 12, IdleBeforeEvict: 3, ReuseGaps: []float64{0.5, 2}}},
	}
}

func TestSchedulerWaiting(t *testing.T) {
	s := validScheduler()
	if got := s.Waiting(); got != 5 { // 3 waiting for capacity + 2 deferred
		t.Errorf("Waiting() = %d, want 5", got)
	}
	var zero stats.Scheduler
	if zero.Waiting() != 0 {
		t.Errorf("zero Scheduler Waiting() = %d, want 0", zero.Waiting())
	}
	if err := zero.Validate(); err != nil {
		t.Errorf("zero Scheduler Validate() = %v, want nil", err)
	}
}

// MaxLoRA is validScheduler's LoRA.MaxLoRA.
const MaxLoRA = 4

// names returns n distinct adapter names.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("adapter-%d", i)
	}
	return out
}

func TestSchedulerValidate(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name     string
		mutate   func(s *stats.Scheduler)
		sentinel error
		mention  string
	}{
		{"valid", func(*stats.Scheduler) {}, nil, ""},
		{"KV usage exactly 1", func(s *stats.Scheduler) { s.KVCacheUsage = 1 }, nil, ""},
		{"KV usage 1.5", func(s *stats.Scheduler) { s.KVCacheUsage = 1.5 }, stats.ErrOutOfRange, "KVCacheUsage = 1.5"},
		{"KV usage NaN", func(s *stats.Scheduler) { s.KVCacheUsage = nan }, stats.ErrNotFinite, "KVCacheUsage = NaN"},
		{"KV usage +Inf", func(s *stats.Scheduler) { s.KVCacheUsage = math.Inf(1) }, stats.ErrNotFinite, "KVCacheUsage = +Inf"},
		{"KV usage negative", func(s *stats.Scheduler) { s.KVCacheUsage = -0.1 }, stats.ErrNegative, "KVCacheUsage = -0.1"},
		{"negative running", func(s *stats.Scheduler) { s.Running = -1 }, stats.ErrNegative, "Running = -1"},
		{"negative waiting", func(s *stats.Scheduler) { s.WaitingCapacity = -2 }, stats.ErrNegative, "WaitingCapacity = -2"},
		{"negative deferred", func(s *stats.Scheduler) { s.WaitingDeferred = -3 }, stats.ErrNegative, "WaitingDeferred = -3"},
		{"waiting overflows", func(s *stats.Scheduler) { s.WaitingCapacity, s.WaitingDeferred = math.MaxInt64, 1 }, stats.ErrOverflow, "WaitingDeferred"},
		{"prefix hits > queries", func(s *stats.Scheduler) { s.PrefixCache = stats.CacheQueries{Queries: 10, Hits: 11} }, stats.ErrOutOfRange, "PrefixCache.Hits = 11"},
		{"prefix negative queries", func(s *stats.Scheduler) { s.PrefixCache.Queries = -1 }, stats.ErrNegative, "PrefixCache.Queries = -1"},
		{"multimodal hits > queries", func(s *stats.Scheduler) { s.MultimodalCache.Hits = 5 }, stats.ErrOutOfRange, "MultimodalCache.Hits = 5"},
		{"connector hits > queries", func(s *stats.Scheduler) { s.ConnectorPrefixCache.Hits = 401 }, stats.ErrOutOfRange, "ConnectorPrefixCache.Hits = 401"},
		{"connector negative hits", func(s *stats.Scheduler) { s.ConnectorPrefixCache.Hits = -1 }, stats.ErrNegative, "ConnectorPrefixCache.Hits = -1"},
		{"unknown sleep state", func(s *stats.Scheduler) { s.SleepState = 3 }, stats.ErrUnknownSleepState, "SleepState = 3"},
		{"spec decoding negative drafts", func(s *stats.Scheduler) { s.SpecDecoding.Drafts = -1 }, stats.ErrNegative, "SpecDecoding.Drafts = -1"},
		{"spec decoding negative per position", func(s *stats.Scheduler) { s.SpecDecoding.AcceptedPerPosition[1] = -6 }, stats.ErrNegative, "SpecDecoding.AcceptedPerPosition[1] = -6"},
		{"spec decoding all drafts accepted", func(s *stats.Scheduler) {
			*s.SpecDecoding = stats.SpecDecoding{Drafts: 10, DraftTokens: 30, AcceptedTokens: 30, AcceptedPerPosition: []int64{10, 10, 10}}
		}, nil, ""},
		{"spec decoding without positions", func(s *stats.Scheduler) { s.SpecDecoding.AcceptedPerPosition = nil }, nil, ""},
		{"spec decoding accepted > drafted", func(s *stats.Scheduler) { s.SpecDecoding.AcceptedTokens = 31 }, stats.ErrOutOfRange, "SpecDecoding.AcceptedTokens = 31"},
		{"spec decoding position above drafts", func(s *stats.Scheduler) {
			s.SpecDecoding.AcceptedPerPosition = []int64{11, 4, 3}
		}, stats.ErrOutOfRange, "SpecDecoding.AcceptedPerPosition[0] = 11"},
		{"spec decoding positions do not sum to accepted", func(s *stats.Scheduler) {
			s.SpecDecoding.AcceptedPerPosition = []int64{9, 6, 2}
		}, stats.ErrOutOfRange, "SpecDecoding.AcceptedPerPosition sum = 17"},
		{"LoRA negative max", func(s *stats.Scheduler) { s.LoRA.MaxLoRA = -1 }, stats.ErrNegative, "LoRA.MaxLoRA = -1"},
		{"LoRA invalid UTF-8 name", func(s *stats.Scheduler) { s.LoRA.Running[0] = "\xff" }, stats.ErrInvalidLabel, "LoRA.Running[0]"},
		{"LoRA name with a comma", func(s *stats.Scheduler) { s.LoRA.Waiting = []string{"a", "b,c"} }, stats.ErrInvalidLabel, "LoRA.Waiting[1]"},
		{"LoRA empty name", func(s *stats.Scheduler) { s.LoRA.Waiting[1] = "" }, stats.ErrInvalidLabel, "LoRA.Waiting[1]"},
		{"LoRA duplicate running name", func(s *stats.Scheduler) { s.LoRA.Running = []string{"a", "b", "a"} }, stats.ErrInvalidLabel, "LoRA.Running[2] = a"},
		{"LoRA duplicate waiting name", func(s *stats.Scheduler) { s.LoRA.Waiting = []string{"chat", "chat"} }, stats.ErrInvalidLabel, "LoRA.Waiting[1] = chat"},
		{"LoRA running exactly MaxLoRA", func(s *stats.Scheduler) { s.LoRA.Running = []string{"a", "b", "c", "d"} }, nil, ""},
		{"LoRA running above MaxLoRA", func(s *stats.Scheduler) { s.LoRA.Running = []string{"a", "b", "c", "d", "e"} }, stats.ErrOutOfRange, "LoRA.Running = 5 adapters, MaxLoRA 4"},
		{"LoRA running without MaxLoRA", func(s *stats.Scheduler) { s.LoRA.MaxLoRA, s.LoRA.Running = 0, names(MaxLoRA+5) }, nil, ""},
		{"LoRA list of MaxLoRAAdapters", func(s *stats.Scheduler) { s.LoRA.Waiting = names(stats.MaxLoRAAdapters) }, nil, ""},
		{"LoRA list above MaxLoRAAdapters", func(s *stats.Scheduler) { s.LoRA.Waiting = names(stats.MaxLoRAAdapters + 1) }, stats.ErrOutOfRange, "LoRA.Waiting = 257 names, at most 256"},
		{"LoRA 10,000 names", func(s *stats.Scheduler) { s.LoRA.Waiting = names(10000) }, stats.ErrOutOfRange, "LoRA.Waiting = 10000 names"},
		{"LoRA label of MaxLoRALabelBytes", func(s *stats.Scheduler) {
			s.LoRA.Waiting = []string{strings.Repeat("x", stats.MaxLoRALabelBytes-2), "y"} // plus one comma
		}, nil, ""},
		{"LoRA label above MaxLoRALabelBytes", func(s *stats.Scheduler) {
			s.LoRA.Waiting = []string{strings.Repeat("x", stats.MaxLoRALabelBytes-1), "y"}
		}, stats.ErrInvalidLabel, "LoRA.Waiting = 8193 bytes joined, at most 8192"},
		{"KV transfer negative bytes", func(s *stats.Scheduler) { s.KVTransfer.BytesTransferred[0] = -1 }, stats.ErrNegative, "KVTransfer.BytesTransferred[0] = -1"},
		{"KV transfer negative descriptors", func(s *stats.Scheduler) { s.KVTransfer.NumDescriptors[0] = -64 }, stats.ErrNegative, "KVTransfer.NumDescriptors[0] = -64"},
		{"KV transfer NaN time", func(s *stats.Scheduler) { s.KVTransfer.XferTime[0] = nan }, stats.ErrNotFinite, "KVTransfer.XferTime[0] = NaN"},
		{"KV transfer negative post time", func(s *stats.Scheduler) { s.KVTransfer.PostTime[0] = -0.001 }, stats.ErrNegative, "KVTransfer.PostTime[0] = -0.001"},
		{"KV transfer negative failures", func(s *stats.Scheduler) { s.KVTransfer.FailedNotifications = -1 }, stats.ErrNegative, "KVTransfer.FailedNotifications = -1"},
		{"KV transfer negative expired", func(s *stats.Scheduler) { s.KVTransfer.ExpiredRequests = -1 }, stats.ErrNegative, "KVTransfer.ExpiredRequests = -1"},
		{"eviction NaN lifetime", func(s *stats.Scheduler) { s.Evictions[0].Lifetime = nan }, stats.ErrNotFinite, "Evictions[0].Lifetime = NaN"},
		{"eviction negative idle", func(s *stats.Scheduler) { s.Evictions[0].IdleBeforeEvict = -3 }, stats.ErrNegative, "Evictions[0].IdleBeforeEvict = -3"},
		{"eviction idle equal to lifetime", func(s *stats.Scheduler) { s.Evictions[0].IdleBeforeEvict = 12 }, nil, ""},
		{"eviction idle above lifetime", func(s *stats.Scheduler) { s.Evictions[0].IdleBeforeEvict = 12.5 }, stats.ErrOutOfRange, "Evictions[0].IdleBeforeEvict = 12.5"},
		{"eviction reuse gap above lifetime", func(s *stats.Scheduler) { s.Evictions[0].ReuseGaps[1] = 13 }, stats.ErrOutOfRange, "Evictions[0].ReuseGaps[1] = 13"},
		{"eviction absurd lifetime", func(s *stats.Scheduler) { s.Evictions[0].Lifetime = 1e308 }, stats.ErrOutOfRange, "Evictions[0].Lifetime = 1e+308"},
		{"KV transfer absurd time", func(s *stats.Scheduler) { s.KVTransfer.XferTime[0] = 2e9 }, stats.ErrOutOfRange, "KVTransfer.XferTime[0] = 2e+09"},
		{"eviction infinite reuse gap", func(s *stats.Scheduler) { s.Evictions[0].ReuseGaps[1] = math.Inf(-1) }, stats.ErrNotFinite, "Evictions[0].ReuseGaps[1] = -Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validScheduler()
			tt.mutate(&s)
			err := s.Validate()
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

func TestSleepState(t *testing.T) {
	want := []string{"awake", "weights_offloaded", "discard_all"}
	got := stats.SleepStates()
	if len(got) != len(want) {
		t.Fatalf("len(SleepStates()) = %d, want %d", len(got), len(want))
	}
	for i, s := range got {
		if s.String() != want[i] {
			t.Errorf("SleepStates()[%d] = %q, want %q", i, s, want[i])
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s.Validate() = %v", s, err)
		}
	}
	if stats.Awake.String() != "awake" || stats.WeightsOffloaded.String() != "weights_offloaded" || stats.DiscardAll.String() != "discard_all" {
		t.Errorf("constants' labels = %s, %s, %s", stats.Awake, stats.WeightsOffloaded, stats.DiscardAll)
	}
	var zero stats.SleepState
	if zero != stats.Awake {
		t.Errorf("zero SleepState = %s, want awake", zero)
	}
	if s := stats.SleepState(9); s.String() != "unknown" {
		t.Errorf("SleepState(9).String() = %q, want unknown", s)
	}
	wantErr(t, stats.SleepState(9).Validate(), stats.ErrUnknownSleepState, "SleepState = 9")
}

func TestCacheConfig(t *testing.T) {
	good := stats.CacheConfig{"num_gpu_blocks": "2048", "block_size": "16", "_x": "", "A1": "on"}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}
	if got, want := good.Keys(), []string{"A1", "_x", "block_size", "num_gpu_blocks"}; !slices.Equal(got, want) {
		t.Errorf("Keys() = %q, want %q", got, want)
	}

	for _, tt := range []struct {
		name    string
		c       stats.CacheConfig
		mention string
	}{
		{"engine is added by the gauge", stats.CacheConfig{"block_size": "16", "engine": "0"}, "engine"},
		{"starts with a digit", stats.CacheConfig{"9x": "1"}, "9x"},
		{"reserved __ prefix", stats.CacheConfig{"__x": "1"}, "__x"},
		{"dash", stats.CacheConfig{"a-b": "1"}, "a-b"},
		{"empty key", stats.CacheConfig{"": "1"}, "CacheConfig key"},
		{"non-ASCII key", stats.CacheConfig{"größe": "1"}, "größe"},
		{"invalid UTF-8 value", stats.CacheConfig{"block_size": "\xff"}, "CacheConfig[block_size]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, tt.c.Validate(), stats.ErrInvalidLabel, tt.mention)
		})
	}
}
