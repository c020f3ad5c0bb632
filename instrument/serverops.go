package instrument

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// ServerOperations says the API server's operation histograms appear with
// its first operation of each kind, as in vLLM, whose API server creates
// them then (vllm/entrypoints/serve/dev/sleep/metrics.py and
// vllm/entrypoints/rl/online/metrics.py).
const ServerOperations Feature = KVOffloadStoreThreshold + 1

// serverOperationBuckets are vLLM's buckets of both operation histograms.
var serverOperationBuckets = []float64{0.01, 0.1, 1, 10, 30, 60, 120, 300, 600}

const (
	perSleepOperation  = "each sleep mode operation of the API server (Engine.RecordSleepModeOperation)"
	perWeightOperation = "each weight-transfer operation of the API server (Engine.RecordWeightUpdateOperation)"
)

// The attribute sets of the operation histograms: the operation only, as
// vLLM's API server has them (no model_name, engine or constant
// attribute), by operation.
var (
	sleepOperationMeasures  = operationMeasures(stats.SleepOperations())
	weightOperationMeasures = operationMeasures(stats.WeightOperations())
)

func operationMeasures[O fmt.Stringer](ops []O) []measure {
	out := make([]measure, len(ops))
	for i, op := range ops {
		out[i] = newMeasure(attribute.String(KeyOperation, op.String()))
	}
	return out
}

// RecordSleepModeOperation records one operation of a sleep mode API (vLLM's
// /sleep and /wake_up), timed from its request to its end, in
// vllm:sleep_mode_operation_duration_seconds by operation. The engine's sleep
// state is Scheduler.SleepState. An unknown operation or a bad duration is
// refused: nothing is recorded, and the refusal is counted and reported
// (see RecordIteration).
func (e *Engine) RecordSleepModeOperation(ctx context.Context, op stats.SleepOperation, seconds float64) {
	if err := e.recordServerOperation(ctx, op.Validate(), func(in *instruments) metric.Float64Histogram { return in.sleepOperation },
		sleepOperationMeasures, int(op), seconds); err != nil {
		e.refuse(refusedServerOperation, "RecordSleepModeOperation", err)
	}
}

// RecordWeightUpdateOperation records one operation of a weight-transfer API
// (vLLM's reinforcement learning endpoints: init_weight_transfer_engine,
// start_weight_update, update_weights, finish_weight_update), timed from its
// request to its end, in vllm:rl_weight_update_operation_duration_seconds by
// operation. It refuses input as RecordSleepModeOperation does.
func (e *Engine) RecordWeightUpdateOperation(ctx context.Context, op stats.WeightOperation, seconds float64) {
	if err := e.recordServerOperation(ctx, op.Validate(), func(in *instruments) metric.Float64Histogram { return in.weightOperation },
		weightOperationMeasures, int(op), seconds); err != nil {
		e.refuse(refusedServerOperation, "RecordWeightUpdateOperation", err)
	}
}

// recordServerOperation records one operation, or returns its refusal.
func (e *Engine) recordServerOperation(ctx context.Context, invalid error, histogram func(*instruments) metric.Float64Histogram,
	measures []measure, op int, seconds float64) error {
	if err := e.usable(false); err != nil {
		return err
	}
	if invalid != nil {
		return invalid
	}
	if err := stats.CheckSeconds("seconds", seconds); err != nil {
		return err
	}
	histogram(e.inst).Record(ctx, seconds, measures[op].rec...)
	return nil
}
