package main

import (
	"context"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// sleeper puts an engine to sleep level 1 (vLLM's sleep mode: weights
// offloaded to host memory, KV cache discarded) once it has been idle for a
// while after serving requests, as an operator freeing the accelerator
// would, and wakes it when requests come again. Its state is
// vllm:engine_sleep_state: after a load it changes once and stays.
type sleeper struct {
	after     time.Duration // idle time before sleeping
	served    bool          // served requests since it last woke
	idleSince time.Time     // zero while busy
	state     stats.SleepState
}

// updateSleep returns the engine's sleep state at this step. A busy engine
// is awake (woken before its requests run); an engine idle for
// sleeper.after since its last request goes to sleep, which discards its
// prefix cache. Always awake without a sleeper. Going to sleep and waking
// are the API server's sleep mode operations, each as long as moving the
// weights between the accelerator and host memory
// (vllm:sleep_mode_operation_duration_seconds).
func (e *engine) updateSleep(now time.Time, busy bool) stats.SleepState {
	s := e.sleep
	switch {
	case s == nil:
		return stats.Awake
	case busy:
		if s.state != stats.Awake {
			e.rec.RecordSleepModeOperation(context.Background(), stats.SleepModeWake, weightBytes/offloadRate)
		}
		s.state, s.served, s.idleSince = stats.Awake, true, time.Time{}
	case !s.served:
	case s.idleSince.IsZero():
		s.idleSince = now
	case now.Sub(s.idleSince) >= s.after:
		s.state, s.served = stats.WeightsOffloaded, false
		clear(e.cache.entry) // the host-memory tiers keep theirs
		e.rec.RecordSleepModeOperation(context.Background(), stats.SleepModeSleep, weightBytes/offloadRate)
	}
	return s.state
}
