package instrument

import (
	"context"
	"fmt"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// An engine without a scheduler step (see Events) changes its gauges and
// counters when they change, rather than sending a whole stats.Scheduler
// each step: RecordScheduler sets every gauge from its argument, so a
// Scheduler sent to change one would zero the others. Each method below
// sets or adds one part, validated by the rules of stats.Scheduler.Validate
// and counted against the same totals as RecordScheduler; the series exist
// at zero from start-up all the same. A refused value records nothing and
// is counted (kind scheduler) and reported. They are safe for concurrent
// use; a gauge keeps the last value set.

// SetRunning sets vllm:num_requests_running: the requests the engine is
// running (its own count, not a change of it).
func (e *Engine) SetRunning(n int64) {
	e.setSchedulerPart("SetRunning", &stats.Scheduler{Running: n}, gaugeRunning)
}

// SetWaiting sets vllm:num_requests_waiting to capacity + deferred, and
// vllm:num_requests_waiting_by_reason: requests waiting for room, and
// requests deferred (for example waiting for remote KV).
func (e *Engine) SetWaiting(capacity, deferred int64) {
	e.setSchedulerPart("SetWaiting", &stats.Scheduler{WaitingCapacity: capacity, WaitingDeferred: deferred}, gaugeWaiting)
}

// SetKVCacheUsage sets vllm:kv_cache_usage_perc: the fraction of KV cache
// blocks in use, 0 to 1.
func (e *Engine) SetKVCacheUsage(fraction float64) {
	e.setSchedulerPart("SetKVCacheUsage", &stats.Scheduler{KVCacheUsage: fraction}, gaugeKVCacheUsage)
}

// SetSleepState sets vllm:engine_sleep_state.
func (e *Engine) SetSleepState(s stats.SleepState) {
	e.setSchedulerPart("SetSleepState", &stats.Scheduler{SleepState: s}, gaugeSleepState)
}

// SetLoRA sets vllm:lora_requests_info: the adapters with running requests,
// those with waiting requests (names in any order: they are sorted, so the
// same adapters are the same state) and MaxLoRA, valued at the time of this
// call. The engine reports its current state. Setting the state it has allocates nothing. An invalid
// state (see stats.LoRA.Validate) is refused, counted and reported.
func (e *Engine) SetLoRA(l stats.LoRA) {
	if err := e.setLoRAAt(&l, time.Now()); err != nil {
		e.refuse(refusedScheduler, "SetLoRA", err)
	}
}

// AddPrefixCache adds one lookup in the local prefix cache, typically a
// request's at its scheduling (a preempted request's re-scheduling is not
// counted, as in vLLM): vllm:prefix_cache_queries and vllm:prefix_cache_hits.
func (e *Engine) AddPrefixCache(c stats.CacheQueries) {
	e.setSchedulerPart("AddPrefixCache", &stats.Scheduler{PrefixCache: c}, schedulerCounts)
}

// RecordSchedulerCounts records what s adds, as RecordScheduler does (cache
// lookups through the local prefix cache, the KV connector and the
// multimodal cache, speculative decoding, KV transfers and evictions, KV
// offloading, MFU estimates), and sets its optional states present (LoRA,
// KV fetch stages), leaving the gauges every step sets as they are: a
// Scheduler with Running, WaitingCapacity, WaitingDeferred, KVCacheUsage or
// SleepState set is refused, with the method that sets it. SetLoRA is the
// LoRA state's setter; Scheduler.LoRA here sets it all the same.
func (e *Engine) RecordSchedulerCounts(ctx context.Context, s *stats.Scheduler) {
	if err := e.recordCounts(ctx, s); err != nil {
		e.refuse(refusedScheduler, "RecordSchedulerCounts", err)
	}
}

// recordCounts is RecordSchedulerCounts, returning its refusal.
func (e *Engine) recordCounts(ctx context.Context, s *stats.Scheduler) error {
	if s != nil {
		for _, g := range [...]struct {
			field, method string
			set           bool
		}{
			{"Running", "SetRunning", s.Running != 0},
			{"WaitingCapacity", "SetWaiting", s.WaitingCapacity != 0},
			{"WaitingDeferred", "SetWaiting", s.WaitingDeferred != 0},
			{"KVCacheUsage", "SetKVCacheUsage", s.KVCacheUsage != 0},
			{"SleepState", "SetSleepState", s.SleepState != stats.Awake},
		} {
			if g.set {
				return fmt.Errorf("instrument: Scheduler.%s is a gauge, which RecordSchedulerCounts leaves as it is: set it with %s: %w",
					g.field, g.method, stats.ErrOutOfRange)
			}
		}
	}
	return e.recordSchedulerParts(ctx, s, schedulerCounts)
}

// setSchedulerPart records one part of a Scheduler, or counts and reports
// its refusal.
func (e *Engine) setSchedulerPart(method string, s *stats.Scheduler, part schedulerParts) {
	if err := e.recordSchedulerParts(context.Background(), s, part); err != nil {
		e.refuse(refusedScheduler, method, err)
	}
}
