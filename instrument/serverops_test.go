package instrument_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// The API server's operations are recorded by operation only, without
// model_name, engine or constant attributes, as vLLM's API server has
// them, with vLLM's buckets; bad input is refused and counted.
func TestServerOperations(t *testing.T) {
	r, errs, rec := decodeRecorder(t, 0, 1)
	defer rec.Close()
	e0, _ := rec.Engine(0)
	e1, _ := rec.Engine(1)
	e0.RecordSleepModeOperation(t.Context(), stats.SleepModeSleep, 4)
	e1.RecordSleepModeOperation(t.Context(), stats.SleepModeSleep, 20)
	e0.RecordSleepModeOperation(t.Context(), stats.SleepModeWake, 0.5)
	e0.RecordWeightUpdateOperation(t.Context(), stats.WeightUpdate, 45)
	want := []float64{0.01, 0.1, 1, 10, 30, 60, 120, 300, 600}
	for _, c := range []struct {
		family, op string
		count      uint64
		sum        float64
	}{
		{"vllm:sleep_mode_operation_duration_seconds", "sleep", 2, 24},
		{"vllm:sleep_mode_operation_duration_seconds", "wake", 1, 0.5},
		{"vllm:rl_weight_update_operation_duration_seconds", "update", 1, 45},
	} {
		h := r.Histogram(c.family, "operation", c.op)
		if h.Count != c.count || h.Sum != c.sum || !slices.Equal(h.Bounds, want) {
			t.Errorf("%s{operation=%q}: count %d, sum %v, bounds %v; want %d, %v, %v", c.family, c.op, h.Count, h.Sum, h.Bounds, c.count, c.sum, want)
		}
	}
	e0.RecordSleepModeOperation(t.Context(), stats.SleepOperation(9), 1)
	e0.RecordWeightUpdateOperation(t.Context(), stats.WeightFinish, math.NaN())
	e0.RecordWeightUpdateOperation(t.Context(), stats.WeightFinish, -1)
	got := errs.Take()
	if len(got) != 3 || !errors.Is(got[0], stats.ErrUnknownServerOperation) || !errors.Is(got[1], stats.ErrNotFinite) ||
		!errors.Is(got[2], stats.ErrNegative) {
		t.Errorf("reports %v, want an unknown operation, a NaN and a negative duration", got)
	}
	if v := r.Value("infermetrics.invalid_events_total", append(engineLabels("0"), "role", "decode", "kind", "server_operation")...); v != 3 {
		t.Errorf("invalid events of kind server_operation = %v, want 3", v)
	}
	var nilEngine *instrument.Engine
	nilEngine.RecordSleepModeOperation(t.Context(), stats.SleepModeWake, 1) // no panic
	nilEngine.RecordWeightUpdateOperation(t.Context(), stats.WeightInit, 1)
}
