package instrument_test

import (
	"errors"
	"math"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// RecordPDLegs records each leg family once with the engine's labels,
// skips the handoff and decode TTFT when unknown, refuses bad legs
// recording nothing, and allocates nothing.
func TestRecordPDLegs(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	ctx := t.Context()
	e.RecordPDLegs(ctx, &stats.PDLegs{PrefillLatency: 0.3, Handoff: true, HandoffGap: 0.002,
		DecodeFirstToken: true, DecodeTimeToFirstToken: 0.05})
	e.RecordPDLegs(ctx, &stats.PDLegs{PrefillLatency: 0.7}) // both at once, not streamed
	for _, bad := range []*stats.PDLegs{
		nil,
		{PrefillLatency: -1},
		{PrefillLatency: math.NaN()},
		{PrefillLatency: 0.1, HandoffGap: 0.1}, // a gap without Handoff
		{PrefillLatency: 0.1, DecodeTimeToFirstToken: 0.1},                        // a TTFT without DecodeFirstToken
		{PrefillLatency: 0.1, Handoff: true, HandoffGap: math.Inf(1)},             // infinite
		{PrefillLatency: 0.1, DecodeFirstToken: true, DecodeTimeToFirstToken: -2}, // negative
	} {
		if err := instrument.RecordPDLegsErr(e, ctx, bad); err == nil {
			t.Errorf("RecordPDLegs(%+v) = nil, want an error", bad)
		}
	}
	if err := instrument.RecordPDLegsErr(e, ctx, nil); !errors.Is(err, instrument.ErrNilStats) {
		t.Errorf("nil legs: %v", err)
	}
	var zero instrument.Engine
	if err := instrument.RecordPDLegsErr(&zero, ctx, &stats.PDLegs{}); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("zero Engine: %v", err)
	}
	s := h.collect()
	l := engineLabels("0")
	for name, want := range map[string]struct {
		count uint64
		sum   float64
	}{
		instrument.NamePDPrefillLegDuration:        {2, 1.0},
		instrument.NamePDHandoffDuration:           {1, 0.002},
		instrument.NamePDDecodeLegTimeToFirstChunk: {1, 0.05},
	} {
		if p := s.get(t, name, l...); p.count != want.count || !approx(p.sum, want.sum) {
			t.Errorf("%s count %d sum %v, want %d %v", name, p.count, p.sum, want.count, want.sum)
		}
	}

	legs := stats.PDLegs{PrefillLatency: 0.3, Handoff: true, HandoffGap: 0.002, DecodeFirstToken: true, DecodeTimeToFirstToken: 0.05}
	var err error
	if allocs := testing.AllocsPerRun(100, func() { e.RecordPDLegs(ctx, &legs); err = h.refused() }); allocs != 0 || err != nil {
		t.Errorf("RecordPDLegs allocates %v times per call (err %v), want 0", allocs, err)
	}
}

// RecordAttempts records a count of 1 to MaxAttempts on
// infermetrics.gateway.request.attempts; 0, a negative count or one above
// MaxAttempts is refused and records nothing.
func TestRecordAttempts(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	for _, n := range []int64{1, 3, instrument.MaxAttempts} {
		e.RecordAttempts(t.Context(), n)
	}
	for _, n := range []int64{0, -1, instrument.MaxAttempts + 1} {
		if err := instrument.RecordAttemptsErr(e, t.Context(), n); !errors.Is(err, stats.ErrOutOfRange) {
			t.Errorf("RecordAttempts(%d) = %v, want ErrOutOfRange", n, err)
		}
	}
	checkHistogram(t, h.collect(), 3, 4+instrument.MaxAttempts, map[int]uint64{0: 1, 2: 1, 6: 1}, instrument.NameGatewayRequestAttempts, engineLabels("0")...)
}
