package instrument

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// Bounds of WithLoRAHistory.
const (
	// DefaultLoRAHistory is the LoRA states an engine reports without
	// WithLoRAHistory: its current one.
	DefaultLoRAHistory = 1
	// MaxLoRAHistory is the most LoRA states WithLoRAHistory keeps per
	// engine.
	MaxLoRAHistory = 64
)

// WithLoRAHistory keeps the last k distinct LoRA states of each engine in
// vllm:lora_requests_info, one series each, valued at the Unix time the state
// was last set, as vLLM keeps a series for every state it reported
// (vllm/v1/metrics/loggers.py sets gauge_lora_info.labels(...) to the current
// time and never removes one). A state set again becomes the newest and keeps
// its one series; a (k+1)th distinct state drops the oldest, whose series
// leaves the next collection. The series have no engine label: a state
// several engines keep is one series, valued at the latest time any of them
// set it, so the newest state has the largest value whichever engine set
// it. k is 1 (DefaultLoRAHistory, the current state only) to MaxLoRAHistory; NewRecorder returns ErrConfig outside. The default
// stays one series because vLLM's history has no bound: every combination of
// running and waiting adapters adds a series (on an OpenTelemetry gauge,
// past the cardinality limit, an overflow series without adapter labels).
// Keep more only for a consumer that reads the history: llm-d's router and
// a PromQL topk(1, vllm:lora_requests_info) take the series with the
// largest value, which is the newest state either way.
func WithLoRAHistory(k int) Option {
	return optionFunc(func(c *config) { c.loraHistory = k })
}

// loraHistory is an engine's kept LoRA states, which the Recorder's callback
// reports through its loraStates. Its slices are reused: a new state costs
// its attribute set, an unchanged one nothing.
type loraHistory struct {
	mu      sync.Mutex
	k       int         // the most states kept (WithLoRAHistory)
	kept    []loraState // oldest set first; cap k once a state is set
	scratch [2][]string // running and waiting names, sorted in place
	shared  *loraStates // the Recorder's, shared by its engines
}

// loraState is one kept state, its names sorted.
type loraState struct {
	maxLoRA          int64
	running, waiting []string
	set              attribute.Set // max_lora, waiting_lora_adapters, running_lora_adapters
	m                measure       // of set
	at               float64       // Unix seconds it was last set
}

// is reports whether s is the state of maxLoRA and the sorted lists.
func (s *loraState) is(maxLoRA int64, running, waiting []string) bool {
	return s.maxLoRA == maxLoRA && slices.Equal(s.running, running) && slices.Equal(s.waiting, waiting)
}

// set makes l (valid) the newest state, set at at. Names are sorted, so the
// same adapters in another order are the same state. Unless exact, the value
// is raised just above that of every state an engine of the Recorder set
// before when it is not after them (a wall clock stepped back, or two
// updates within its resolution), so that the newest state has the largest
// value, which consumers take.
func (h *loraHistory) set(l *stats.LoRA, at float64, exact bool) {
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
		s.set = attribute.NewSet(
			attribute.String(KeyMaxLoRA, strconv.FormatInt(l.MaxLoRA, 10)),
			attribute.String(KeyWaitingLoRA, strings.Join(waiting, ",")),
			attribute.String(KeyRunningLoRA, strings.Join(running, ",")),
		)
		s.m = measureOf(s.set)
	}
	s.at = h.shared.stamp(at, exact)
	h.kept = append(h.kept, s)
}

// loraStates is what a Recorder's engines share of vllm:lora_requests_info,
// which has no engine label: one set of series for all of them.
type loraStates struct {
	newest atomic.Uint64 // float64 bits: the largest time a state was set at

	mu    sync.Mutex // guards the callback's scratch below
	index map[attribute.Distinct]int
	seen  []loraSeen
}

// loraSeen is a state as the callback reports it.
type loraSeen struct {
	at  float64
	obs []metric.ObserveOption
}

// stamp returns the value of a state set at at: at itself if exact or
// after every state set before, otherwise just above the newest of them.
func (ls *loraStates) stamp(at float64, exact bool) float64 {
	for {
		old := ls.newest.Load()
		newest := math.Float64frombits(old)
		v := at
		if !exact && v <= newest {
			v = math.Nextafter(newest, math.Inf(1))
		}
		if v <= newest || ls.newest.CompareAndSwap(old, math.Float64bits(v)) {
			return v
		}
	}
}

// observe reports every engine's kept states, a state kept by several
// engines once, valued at the latest time any of them set it: the SDK keeps
// one value per series, the one observed last, which would otherwise be an
// older time of the same state when another engine set it later.
func (ls *loraStates) observe(o metric.Observer, inst metric.Float64ObservableGauge, engines []*engineState) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.index == nil {
		ls.index = map[attribute.Distinct]int{}
	}
	clear(ls.index)
	ls.seen = ls.seen[:0]
	for _, e := range engines {
		h := &e.lora
		h.mu.Lock()
		for i := range h.kept {
			s := &h.kept[i]
			if j, ok := ls.index[s.set.Equivalent()]; ok {
				ls.seen[j].at = max(ls.seen[j].at, s.at)
				continue
			}
			ls.index[s.set.Equivalent()] = len(ls.seen)
			ls.seen = append(ls.seen, loraSeen{at: s.at, obs: s.m.obs})
		}
		h.mu.Unlock()
	}
	for _, s := range ls.seen {
		o.ObserveFloat64(inst, s.at, s.obs...)
	}
}

// setLoRANow makes l (valid) the engine's newest LoRA state, set now.
func (e *Engine) setLoRANow(l *stats.LoRA) {
	e.lora.set(l, unixSeconds(time.Now()), false)
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
func (e *Engine) setLoRAAt(l *stats.LoRA, at time.Time) error { return e.setLoRA(l, at, true) }

// setLoRA is setLoRAAt, valuing the state just above the other kept ones
// unless exact (see loraHistory.set).
func (e *Engine) setLoRA(l *stats.LoRA, at time.Time, exact bool) error {
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
	e.lora.set(l, unixSeconds(at), exact)
	return nil
}

// unixSeconds is t as the Unix time in seconds, vllm:lora_requests_info's
// value.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
