package instrument

import (
	"sync"
	"sync/atomic"

	"github.com/infermetrics/infermetrics/stats"
)

// measureCache holds the measures of a handle built on first use, by key
// (measureKey): attribute sets too many to build up front (an error.type
// per operation of each of 1,024 backends) but few in use. A set seen
// before is recorded without allocating: the map is read without a lock
// and replaced whole when a set is added (copy on write; the keys are
// bounded, see measureKey).
type measureCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[uint32]*measure]
}

// get returns the measure of key, built by build on its first use.
func (c *measureCache) get(key uint32, build func() measure) *measure {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[key]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[key]; ok {
			return v
		}
	}
	next := make(map[uint32]*measure, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	v := build()
	next[key] = &v
	c.m.Store(&next)
	return &v
}

func lenOf(m *map[uint32]*measure) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// Instruments of a handle's cached measures (measureKey's kind).
const (
	measureDuration uint8 = iota // the request or operation duration, with error.type
)

// measureKey packs what selects a cached measure: the instrument kind, the
// operation and the error.type (ErrorNone for none). Each is bounded, so a
// handle caches at most 5 x 15 measures of a kind.
func measureKey(kind uint8, op stats.Operation, t stats.ErrorType) uint32 {
	return uint32(kind) | uint32(op)<<8 | uint32(t)<<16
}

// errorTypeOf is the error.type a finished request is recorded with: its
// ErrorType, ErrorOther for a failure of no known cause, ErrorNone (no
// error.type) for a request that did not fail or an abort of no known
// cause.
func errorTypeOf(r stats.FinishReason, t stats.ErrorType) stats.ErrorType {
	if t == stats.ErrorNone && r == stats.FinishError {
		return stats.ErrorOther
	}
	return t
}
