package main

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// stream carries one API request's outputs from its engine to the HTTP
// handler waiting for them. The engine never waits on it: outputs add up
// until the handler takes them, so a slow client gets several tokens in one
// chunk. A client that goes away marks the stream gone, and the engine
// aborts the job at its next step.
type stream struct {
	// remoteDecode marks the prefill leg of a P/D request: the prefill
	// node keeps its KV for the decode node (kv_transfer_params).
	remoteDecode bool
	ready        chan struct{} // holds one signal when there is news
	gone         atomic.Bool

	mu    sync.Mutex
	state streamState
}

// streamState is what the engine has reported of a request so far.
type streamState struct {
	tokens    int64 // output tokens not yet taken by the handler
	cached    int64 // prompt tokens found cached (local or by KV transfer) at the first scheduling
	scheduled bool
	done      bool
	reason    stats.FinishReason
	generated int64 // output tokens in all, once done
}

func newStream(remoteDecode bool) *stream {
	return &stream{remoteDecode: remoteDecode, ready: make(chan struct{}, 1)}
}

// signal wakes the handler without ever blocking the engine.
func (s *stream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// scheduled records the cached prompt tokens of the first scheduling, as
// vLLM sets num_cached_tokens once (vllm/v1/core/sched/scheduler.py:
// "if request.num_cached_tokens < 0"). No-op on a nil stream.
func (s *stream) scheduled(cached int64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if !s.state.scheduled {
		s.state.scheduled, s.state.cached = true, cached
	}
	s.mu.Unlock()
}

// emit passes on a step's output tokens. No-op on a nil stream.
func (s *stream) emit(tokens int64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.state.tokens += tokens
	s.mu.Unlock()
	s.signal()
}

// finish passes on the end of the request. No-op on a nil stream.
func (s *stream) finish(reason stats.FinishReason, generated int64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.state.done, s.state.reason, s.state.generated = true, reason, generated
	s.mu.Unlock()
	s.signal()
}

// take returns the state and marks its tokens taken.
func (s *stream) take() streamState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state
	s.state.tokens = 0
	return st
}

// leave marks the client gone: the engine aborts the job.
func (s *stream) leave() { s.gone.Store(true) }

// isGone reports whether the client went away; false on a nil stream.
func (s *stream) isGone() bool { return s != nil && s.gone.Load() }

// handsOff reports whether j, finished at its length limit on a prefill
// engine, leaves its KV for the decode node: every generated request, and
// an API request that asked for it (do_remote_decode).
func (j *job) handsOff(e *engine) bool {
	if j.stream == nil {
		return e.handoff != nil
	}
	return j.stream.remoteDecode
}

// abortGone finishes, with finish reason abort, every job whose client went
// away, wherever it is (waiting for its KV, waiting, running), as vLLM
// aborts a request whose HTTP client disconnects.
func (e *engine) abortGone(now time.Time, it *stats.Iteration) {
	e.deferred = e.reap(now, e.deferred, it)
	e.waiting = e.reap(now, e.waiting, it)
	e.running = e.reap(now, e.running, it)
}

// reap returns q without its jobs whose client went away, finishing those.
func (e *engine) reap(now time.Time, q []*job, it *stats.Iteration) []*job {
	kept := q[:0]
	for _, j := range q {
		if j.stream.isGone() {
			e.finish(now, j, stats.FinishAbort, it)
			continue
		}
		kept = append(kept, j)
	}
	clear(q[len(kept):]) // no finished job stays reachable
	return kept
}
