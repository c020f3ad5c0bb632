package stats

import "errors"

// ErrUnknownServerOperation reports a SleepOperation or WeightOperation that
// is not one of SleepOperations() or WeightOperations().
var ErrUnknownServerOperation = errors.New("unknown server operation")

// SleepOperation is an operation of vLLM's sleep mode API, timed by its API
// server: the operation label of vllm:sleep_mode_operation_duration_seconds
// (vllm/entrypoints/serve/dev/sleep/metrics.py).
type SleepOperation uint8

const (
	// SleepModeSleep: putting the engine to sleep (/sleep).
	SleepModeSleep SleepOperation = iota
	// SleepModeReleaseKVCache: releasing the KV cache memory.
	SleepModeReleaseKVCache
	// SleepModeWake: waking the engine (/wake_up).
	SleepModeWake

	numSleepOperations = iota
)

var sleepOperationLabels = [numSleepOperations]string{"sleep", "release_kv_cache_memory", "wake"}

// SleepOperations returns every SleepOperation in label order.
func SleepOperations() []SleepOperation {
	return []SleepOperation{SleepModeSleep, SleepModeReleaseKVCache, SleepModeWake}
}

// String returns the operation label value: "sleep",
// "release_kv_cache_memory" or "wake".
func (o SleepOperation) String() string {
	if int(o) < numSleepOperations {
		return sleepOperationLabels[o]
	}
	return "unknown"
}

// Validate reports ErrUnknownServerOperation for a value not in SleepOperations().
func (o SleepOperation) Validate() error {
	if int(o) >= numSleepOperations {
		return fieldErr("SleepOperation", uint8(o), ErrUnknownServerOperation)
	}
	return nil
}

// WeightOperation is an operation of vLLM's RL weight-transfer API, timed
// by its API server: the operation label of
// vllm:rl_weight_update_operation_duration_seconds
// (vllm/entrypoints/rl/online/metrics.py).
type WeightOperation uint8

const (
	// WeightInit: setting up the weight transfer engine.
	WeightInit WeightOperation = iota
	// WeightStart: starting a weight update.
	WeightStart
	// WeightStartDraft: starting a weight update of the draft model.
	WeightStartDraft
	// WeightUpdate: receiving the new weights.
	WeightUpdate
	// WeightFinish: finishing the weight update.
	WeightFinish

	numWeightOperations = iota
)

var weightOperationLabels = [numWeightOperations]string{"init", "start", "start_draft", "update", "finish"}

// WeightOperations returns every WeightOperation in label order.
func WeightOperations() []WeightOperation {
	return []WeightOperation{WeightInit, WeightStart, WeightStartDraft, WeightUpdate, WeightFinish}
}

// String returns the operation label value: "init", "start",
// "start_draft", "update" or "finish".
func (o WeightOperation) String() string {
	if int(o) < numWeightOperations {
		return weightOperationLabels[o]
	}
	return "unknown"
}

// Validate reports ErrUnknownServerOperation for a value not in WeightOperations().
func (o WeightOperation) Validate() error {
	if int(o) >= numWeightOperations {
		return fieldErr("WeightOperation", uint8(o), ErrUnknownServerOperation)
	}
	return nil
}
