package instrument

import (
	"context"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// SimpleCPUOffload says the SimpleCPUOffloadConnector's families exist from
// start-up with WithSimpleKVOffload, otherwise from the first step that
// reports one (vLLM creates them at their first observation).
const SimpleCPUOffload Feature = InvalidInput + 1

// Phases of the connector's loads, the KeyPhase values.
const (
	PhaseIssued    = "issued"
	PhaseCompleted = "completed"
)

// WithSimpleKVOffload declares a SimpleCPUOffloadConnector (vLLM's KV
// offloading to a CPU or disk pool, vllm/v1/simple_kv_offload), so that its
// counters and gauges exist at zero from start-up and
// vllm:simple_kv_offload_info carries its deployment. Steps report it in
// Scheduler.SimpleKVOffload.
func WithSimpleKVOffload(cfg stats.SimpleKVOffloadConfig) Option {
	return optionFunc(func(c *config) { c.simpleKVOffload = &cfg })
}

// saveOutcomeList lists the outcome values, for the catalog.
func saveOutcomeList() string {
	var s string
	for i, o := range stats.SaveOutcomes() {
		if i > 0 {
			s += ", "
		}
		s += o.String()
	}
	return s
}

// simpleOffloadState is an engine's SimpleCPUOffloadConnector: its counter
// and gauge values, which the callback reports, and their attribute sets.
type simpleOffloadState struct {
	on   bool        // configured: reported from start-up
	seen atomic.Bool // a step reported the connector

	saves          []atomic.Int64 // by stats.SaveOutcome
	issued, loaded atomic.Int64   // load blocks by phase
	used, pending  atomic.Int64   // gauges, last value

	byOutcome []measure
	byPhase   [2]measure // issued, completed
}

// buildSimpleOffload prepares the connector's attribute sets.
func (e *engineState) buildSimpleOffload(cfg *config) {
	s := &e.off.simple
	s.on = cfg.simpleKVOffload != nil
	s.saves = make([]atomic.Int64, len(stats.SaveOutcomes()))
	for _, o := range stats.SaveOutcomes() {
		s.byOutcome = append(s.byOutcome, e.with(attribute.String(KeyOutcome, o.String())))
	}
	s.byPhase = [2]measure{e.with(attribute.String(KeyPhase, PhaseIssued)), e.with(attribute.String(KeyPhase, PhaseCompleted))}
}

// startSimpleOffload records the connector's info series.
func (e *Engine) startSimpleOffload(ctx context.Context, cfg *config) {
	c := cfg.simpleKVOffload
	if c == nil {
		return
	}
	m := e.with(attribute.String(KeyOffloadBackend, c.Backend),
		attribute.String(KeyPageCache, strconv.FormatBool(c.PageCache)),
		attribute.String(KeyLazyOffload, strconv.FormatBool(c.LazyOffload)),
		attribute.String(KeyCapacityBlocks, strconv.FormatInt(c.CapacityBlocks, 10)))
	e.inst.simpleInfo.Record(ctx, 1, m.rec...)
}

// observeSimpleOffload reports the connector's counters and gauges,
// configured or reported by a step.
func (e *engineState) observeSimpleOffload(o metric.Observer) {
	in, s := e.inst, &e.off.simple
	if !s.on && !s.seen.Load() {
		return
	}
	for i := range s.saves {
		o.ObserveInt64(in.simpleSaves, s.saves[i].Load(), s.byOutcome[i].obs...)
	}
	o.ObserveInt64(in.simpleLoadBlocks, s.issued.Load(), s.byPhase[0].obs...)
	o.ObserveInt64(in.simpleLoadBlocks, s.loaded.Load(), s.byPhase[1].obs...)
	o.ObserveInt64(in.simpleUsed, s.used.Load(), e.plain.obs...)
	o.ObserveInt64(in.simplePending, s.pending.Load(), e.plain.obs...)
}

// recordSimpleOffload records one step of the connector.
func (e *Engine) recordSimpleOffload(k *stats.SimpleKVOffload) {
	if k == nil {
		return
	}
	s := &e.off.simple
	for _, o := range stats.SaveOutcomes() {
		addPositive(&s.saves[o], k.ByOutcome(o))
	}
	addPositive(&s.issued, k.LoadBlocksIssued)
	addPositive(&s.loaded, k.LoadBlocksCompleted)
	s.used.Store(k.UsedBlocks)
	s.pending.Store(k.PendingStoreBlocks)
	s.seen.Store(true)
}

// simpleOffload adds what a step of the connector adds to the totals.
func (in *increments) simpleOffload(k *stats.SimpleKVOffload) {
	if k == nil {
		return
	}
	for _, o := range stats.SaveOutcomes() {
		in.add(totSimpleKVOffloadSaves, k.ByOutcome(o))
	}
	in.add(totSimpleKVOffloadLoadBlocks, k.LoadBlocksIssued)
	in.add(totSimpleKVOffloadLoadBlocks, k.LoadBlocksCompleted)
}
