package instrument

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// loraHistory is an engine's kept LoRA states, which the Recorder's callback
// reports (see observe). Its slices are reused: a new state costs its
// attribute set, an unchanged one nothing.
type loraHistory struct {
	mu      sync.Mutex
	k       int         // the most states kept
	kept    []loraState // oldest set first; cap k once a state is set
	scratch [2][]string // running and waiting names, sorted in place
}

// loraState is one kept state, its names sorted.
type loraState struct {
	maxLoRA          int64
	running, waiting []string
	m                measure // max_lora, waiting_lora_adapters, running_lora_adapters
	at               float64 // Unix seconds it was last set
}

// is reports whether s is the state of maxLoRA and the sorted lists.
func (s *loraState) is(maxLoRA int64, running, waiting []string) bool {
	return s.maxLoRA == maxLoRA && slices.Equal(s.running, running) && slices.Equal(s.waiting, waiting)
}

// set makes l (valid) the newest state, set at at. Names are sorted, so the
// same adapters in another order are the same state.
func (h *loraHistory) set(l *stats.LoRA, at float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	running := append(h.scratch[0][:0], l.Running...)
	waiting := append(h.scratch[1][:0], l.Waiting...)
	slices.Sort(running)
	slices.Sort(waiting)
	h.scratch = [2][]string{running, waiting}
	n := len(h.kept)
	i := n - 1 // the newest first: a step mostly repeats the state before
	for ; i >= 0 && !h.kept[i].is(l.MaxLoRA, running, waiting); i-- {
	}
	var s loraState
	switch {
	case i >= 0: // a kept state: it moves to the newest
		s = h.kept[i]
		copy(h.kept[i:], h.kept[i+1:])
		h.kept = h.kept[:n-1]
	case n == h.k: // the oldest leaves; its slices hold the new state
		s = h.kept[0]
		copy(h.kept, h.kept[1:])
		h.kept = h.kept[:n-1]
		fallthrough
	default:
		if h.kept == nil {
			h.kept = make([]loraState, 0, h.k)
		}
		s.maxLoRA = l.MaxLoRA
		s.running = append(s.running[:0], running...)
		s.waiting = append(s.waiting[:0], waiting...)
		s.m = newMeasure(
			attribute.String(KeyMaxLoRA, strconv.FormatInt(l.MaxLoRA, 10)),
			attribute.String(KeyWaitingLoRA, strings.Join(waiting, ",")),
			attribute.String(KeyRunningLoRA, strings.Join(running, ",")),
		)
	}
	s.at = at
	h.kept = append(h.kept, s)
}

// observe reports every kept state.
func (h *loraHistory) observe(o metric.Observer, inst metric.Float64ObservableGauge) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.kept {
		o.ObserveFloat64(inst, h.kept[i].at, h.kept[i].m.obs...)
	}
}

// setLoRANow makes l (valid) the engine's newest LoRA state, set now.
func (e *Engine) setLoRANow(l *stats.LoRA) {
	e.lora.set(l, unixSeconds(time.Now()))
}

// The times setLoRAAt accepts: those whose Unix nanoseconds an int64 holds,
// from the Unix epoch.
var (
	minLoRATime = time.Unix(0, 0)
	maxLoRATime = time.Unix(0, math.MaxInt64)
)

// setLoRAAt makes l the engine's newest LoRA state, valued at exactly at (a
// simulator's chosen time), and returns its refusal (nil l, an invalid state
// by stats.LoRA.Validate, a time before the Unix epoch or past 2262, a closed
// Recorder) instead of reporting it.
func (e *Engine) setLoRAAt(l *stats.LoRA, at time.Time) error {
	if err := e.usable(l == nil); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	if at.Before(minLoRATime) || at.After(maxLoRATime) {
		return fmt.Errorf("instrument: LoRA state time %v must be %v to %v: %w",
			at, minLoRATime.UTC(), maxLoRATime.UTC(), stats.ErrOutOfRange)
	}
	e.lora.set(l, unixSeconds(at))
	return nil
}

// unixSeconds is t as the Unix time in seconds, vllm:lora_requests_info's
// value.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
