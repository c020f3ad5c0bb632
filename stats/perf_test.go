package stats_test

import (
	"math"
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

func TestPerfEstimateValidate(t *testing.T) {
	good := []stats.PerfEstimate{{}, {FLOPs: 2 * 8e9 * 4096, ReadBytes: 16e9, WriteBytes: 5e8},
		{FLOPs: stats.MaxPerfEstimate, ReadBytes: stats.MaxPerfEstimate, WriteBytes: stats.MaxPerfEstimate}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v.Validate() = %v", p, err)
		}
	}
	tests := []struct {
		p        stats.PerfEstimate
		sentinel error
		field    string
	}{
		{stats.PerfEstimate{FLOPs: math.NaN()}, stats.ErrNotFinite, "FLOPs"},
		{stats.PerfEstimate{ReadBytes: math.Inf(1)}, stats.ErrNotFinite, "ReadBytes"},
		{stats.PerfEstimate{WriteBytes: -1}, stats.ErrNegative, "WriteBytes"},
		{stats.PerfEstimate{FLOPs: 2 * stats.MaxPerfEstimate}, stats.ErrOutOfRange, "FLOPs"},
	}
	for _, tt := range tests {
		wantErr(t, tt.p.Validate(), tt.sentinel, tt.field)
		s := stats.Scheduler{Perf: &tt.p}
		wantErr(t, s.Validate(), tt.sentinel, "Perf."+tt.field)
	}
}

func TestKVFetchValidate(t *testing.T) {
	var labels []string
	for _, s := range stats.FetchStages() {
		labels = append(labels, s.String())
	}
	if want := []string{"waiting_to_start", "in_progress", "completed_waiting"}; !slices.Equal(labels, want) {
		t.Errorf("stages = %q, want %q", labels, want)
	}
	k := stats.KVFetch{WaitingToStart: 1, InProgress: 2, CompletedWaiting: 3}
	for i, s := range stats.FetchStages() {
		if got := k.ByStage(s); got != int64(i+1) {
			t.Errorf("ByStage(%v) = %d, want %d", s, got, i+1)
		}
	}
	if err := k.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	// More fetching requests than waiting ones is not refused: vLLM does not
	// guarantee a relation we could check.
	s := stats.Scheduler{KVFetch: &stats.KVFetch{InProgress: 5}}
	if err := s.Validate(); err != nil {
		t.Errorf("Scheduler.Validate() = %v", err)
	}
	s.KVFetch.CompletedWaiting = -1
	wantErr(t, s.Validate(), stats.ErrNegative, "KVFetch.CompletedWaiting")
}

func TestKVTransferNotificationsAfterExpiry(t *testing.T) {
	s := stats.Scheduler{KVTransfer: &stats.KVTransfer{NotificationsAfterExpiry: -2}}
	wantErr(t, s.Validate(), stats.ErrNegative, "KVTransfer.NotificationsAfterExpiry", "-2")
}
