package main

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// weightUpdater simulates a reinforcement learning trainer pushing new
// weights to the decode instance's API server while it generates: the
// transfer engine set up once, then every interval a start, the update and
// a finish, timed as an NCCL transfer of the model's weights would take
// (vllm:rl_weight_update_operation_duration_seconds).
type weightUpdater struct {
	rng   *rand.Rand
	every time.Duration
	next  time.Time // zero until the setup
}

func newWeightUpdater(every time.Duration, seed uint64) *weightUpdater {
	return &weightUpdater{rng: rand.New(rand.NewPCG(seed, 0x3e16)), every: every}
}

// updateWeights runs the trainer's operations due at now, on a busy step.
func (e *engine) updateWeights(ctx context.Context, now time.Time) {
	w := e.weights
	if w == nil || now.Before(w.next) {
		return
	}
	jitter := func(s float64) float64 { return s * (0.8 + 0.4*w.rng.Float64()) }
	if w.next.IsZero() {
		e.rec.RecordWeightUpdateOperation(ctx, stats.WeightInit, jitter(0.15))
	} else {
		e.rec.RecordWeightUpdateOperation(ctx, stats.WeightStart, jitter(0.004))
		e.rec.RecordWeightUpdateOperation(ctx, stats.WeightUpdate, jitter(weightBytes/transferRate))
		e.rec.RecordWeightUpdateOperation(ctx, stats.WeightFinish, jitter(0.02))
	}
	w.next = now.Add(w.every)
}
