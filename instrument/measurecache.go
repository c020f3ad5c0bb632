package instrument

import (
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"

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
	next := map[uint32]*measure{}
	if old != nil {
		next = maps.Clone(*old)
	}
	v := build()
	next[key] = &v
	c.m.Store(&next)
	return &v
}

// Attribute sets of a handle's cached measures (measureKey's kind): the
// handle's GenAI attributes, with gen_ai.token.type input or output for
// the token usage.
const (
	measureGenAI uint8 = iota
	measureInput
	measureOutput
)

// measureKey packs what selects a cached measure: the instrument kind, the
// operation, the error.type (ErrorNone for none) and the response model's
// index (see responseModels; 0 for none). Each is bounded, so a handle
// caches at most 5 x 15 x 10 measures of a kind.
func measureKey(kind uint8, op stats.Operation, t stats.ErrorType, model int) uint32 {
	return uint32(kind) | uint32(op)<<8 | uint32(t)<<16 | uint32(model)<<24
}

// MaxResponseModels bounds the values of gen_ai.response.model an Engine
// records: the first 8 models its front end's responses name; later ones
// are ResponseModelOther. A response model is usually the requested one or
// a dated snapshot of it, a few per Engine, each one more series of every
// GenAI histogram that carries it.
const MaxResponseModels = 8

// ResponseModelOther is the gen_ai.response.model of responses naming a
// model past an Engine's first MaxResponseModels.
const ResponseModelOther = "_OTHER"

// responseModels are the gen_ai.response.model values an Engine has seen,
// by index (1 to MaxResponseModels; MaxResponseModels+1 is
// ResponseModelOther, 0 none), read without a lock.
type responseModels struct {
	mu    sync.Mutex
	names atomic.Pointer[[]string]
}

// index returns the index of a response model, adding it while there is
// room; it allocates only the first time a model is seen.
func (m *responseModels) index(name string) int {
	if name == "" {
		return 0
	}
	if i, ok := m.find(name); ok {
		return i
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if i, ok := m.find(name); ok {
		return i
	}
	var names []string
	if p := m.names.Load(); p != nil {
		names = *p
	}
	if len(names) == MaxResponseModels {
		return MaxResponseModels + 1
	}
	next := append(names[:len(names):len(names)], name)
	m.names.Store(&next)
	return len(next)
}

func (m *responseModels) find(name string) (int, bool) {
	if p := m.names.Load(); p != nil {
		for i, n := range *p {
			if n == name {
				return i + 1, true
			}
		}
	}
	return 0, false
}

// name returns the gen_ai.response.model of an index other than 0.
func (m *responseModels) name(i int) string {
	if p := m.names.Load(); p != nil && i <= len(*p) {
		return (*p)[i-1]
	}
	return ResponseModelOther
}

// extraKV returns the attributes a cached measure adds: error.type when
// t is not ErrorNone, gen_ai.response.model when model is not 0.
func (m *responseModels) extraKV(kv []attribute.KeyValue, t stats.ErrorType, model int) []attribute.KeyValue {
	if t != stats.ErrorNone {
		kv = append(kv, attribute.String(KeyErrorType, t.String()))
	}
	if model != 0 {
		kv = append(kv, attribute.String(KeyGenAIResponseModel, m.name(model)))
	}
	return kv
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
