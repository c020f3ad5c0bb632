package benchvariants

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// observed are the instruments the prototype reports through one callback:
// every counter and every gauge but the two info gauges, whose series are
// keyed by changing values (LoRA adapters) or set once (cache config).
var observed = []string{
	instrument.NameNumRequestsRunning, instrument.NameNumRequestsWaiting, instrument.NameNumRequestsWaitingByReason,
	instrument.NameEngineSleepState, instrument.NameKVCacheUsage,
	instrument.NamePrefixCacheQueries, instrument.NamePrefixCacheHits,
	instrument.NameExternalPrefixCacheQueries, instrument.NameExternalPrefixCacheHits,
	instrument.NameMMCacheQueries, instrument.NameMMCacheHits, instrument.NameNumPreemptions,
	instrument.NamePromptTokens, instrument.NamePromptTokensCached, instrument.NameGenerationTokens,
	instrument.NameRequestSuccess, instrument.NameCorruptedRequests,
	instrument.NameSpecDecodeNumDrafts, instrument.NameSpecDecodeNumDraftTokens,
	instrument.NameSpecDecodeNumAcceptedTokens, instrument.NameSpecDecodeNumAcceptedTokensPerPos,
	instrument.NameNIXLNumFailedTransfers, instrument.NameNIXLNumFailedNotifs, instrument.NameNIXLNumKVExpiredReqs,
}

// Observable is the prototype of "counters kept in per-engine atomics and
// reported through observable instruments": Precomputed, except that every
// counter and gauge of the catalog but the info gauges is an atomic of the
// engine, reported by one callback registered for all of them. Histograms
// (OpenTelemetry has no asynchronous histogram) and the info gauges stay
// synchronous. The instruments keep the catalog's names, units and
// descriptions under the Recorder's scope, so views.VLLM applies unchanged.
type Observable struct {
	engines []*ObservableEngine
	byRank  map[int]*ObservableEngine
	reg     metric.Registration

	running, waiting, waitingBy, sleep                                     metric.Int64ObservableGauge
	kvUsage                                                                metric.Float64ObservableGauge
	prefixQ, prefixH, extQ, extH, mmQ, mmH, preempt, prompt, cached, gen   metric.Int64ObservableCounter
	success, corrupted, specDrafts, specDraftTokens, specAccepted, specPos metric.Int64ObservableCounter
	nixlFailedTransfers, nixlFailedNotifs, nixlKVExpired                   metric.Int64ObservableCounter
}

// ObservableEngine records one engine's stats.
type ObservableEngine struct {
	hist *PrecomputedEngine // histograms and info gauges, synchronous

	// Counters, cumulative since start.
	bySource                                       [3]atomic.Int64
	success                                        [5]atomic.Int64
	cached, generation, preemptions, corrupted     atomic.Int64
	prefixQ, prefixH, extQ, extH, mmQ, mmH         atomic.Int64
	specDrafts, specDraftTokens, specAccepted      atomic.Int64
	specPos                                        [SpecTokens]atomic.Int64
	nixlFailedTransfers, nixlFailedNotifs, nixlExp atomic.Int64
	// Gauges, last value.
	running, waiting atomic.Int64
	waitingBy        [2]atomic.Int64
	sleepState       atomic.Int64
	kvUsage          atomic.Uint64 // float64 bits

	plain                   []metric.ObserveOption
	bySourceObs, successObs [][]metric.ObserveOption
	waitingObs, sleepObs    [][]metric.ObserveOption
	posObs                  [][]metric.ObserveOption
}

// NewObservable creates the instruments on mp, registers the callback and
// creates the series of every engine at zero.
func NewObservable(mp metric.MeterProvider, ranks ...int) (*Observable, error) {
	m := meter(mp)
	in, err := newOTelInstruments(m, observed...)
	if err != nil {
		return nil, err
	}
	o := &Observable{byRank: map[int]*ObservableEngine{}}
	desc := map[string]instrument.Descriptor{}
	for _, d := range instrument.Descriptors() {
		desc[d.Name] = d
	}
	var errs []error
	counter := func(name string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(desc[name].Unit), metric.WithDescription(desc[name].Description))
		errs = append(errs, err)
		return c
	}
	gauge := func(name string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(desc[name].Unit), metric.WithDescription(desc[name].Description))
		errs = append(errs, err)
		return g
	}
	o.running = gauge(instrument.NameNumRequestsRunning)
	o.waiting = gauge(instrument.NameNumRequestsWaiting)
	o.waitingBy = gauge(instrument.NameNumRequestsWaitingByReason)
	o.sleep = gauge(instrument.NameEngineSleepState)
	o.kvUsage, err = m.Float64ObservableGauge(instrument.NameKVCacheUsage,
		metric.WithUnit(desc[instrument.NameKVCacheUsage].Unit), metric.WithDescription(desc[instrument.NameKVCacheUsage].Description))
	errs = append(errs, err)
	o.prefixQ = counter(instrument.NamePrefixCacheQueries)
	o.prefixH = counter(instrument.NamePrefixCacheHits)
	o.extQ = counter(instrument.NameExternalPrefixCacheQueries)
	o.extH = counter(instrument.NameExternalPrefixCacheHits)
	o.mmQ = counter(instrument.NameMMCacheQueries)
	o.mmH = counter(instrument.NameMMCacheHits)
	o.preempt = counter(instrument.NameNumPreemptions)
	o.prompt = counter(instrument.NamePromptTokens)
	o.cached = counter(instrument.NamePromptTokensCached)
	o.gen = counter(instrument.NameGenerationTokens)
	o.success = counter(instrument.NameRequestSuccess)
	o.corrupted = counter(instrument.NameCorruptedRequests)
	o.specDrafts = counter(instrument.NameSpecDecodeNumDrafts)
	o.specDraftTokens = counter(instrument.NameSpecDecodeNumDraftTokens)
	o.specAccepted = counter(instrument.NameSpecDecodeNumAcceptedTokens)
	o.specPos = counter(instrument.NameSpecDecodeNumAcceptedTokensPerPos)
	o.nixlFailedTransfers = counter(instrument.NameNIXLNumFailedTransfers)
	o.nixlFailedNotifs = counter(instrument.NameNIXLNumFailedNotifs)
	o.nixlKVExpired = counter(instrument.NameNIXLNumKVExpiredReqs)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}

	for _, rank := range ranks {
		e := &ObservableEngine{hist: newPrecomputedEngineNoStart(in, rank)}
		observeOpts := func(kv ...attribute.KeyValue) []metric.ObserveOption {
			base := []attribute.KeyValue{attribute.String(instrument.KeyModelName, Model),
				attribute.String(instrument.KeyEngine, engineLabel(rank))}
			return []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(append(base, kv...)...))}
		}
		e.plain = observeOpts()
		for _, s := range stats.Sources() {
			e.bySourceObs = append(e.bySourceObs, observeOpts(attribute.String(instrument.KeySource, s.String())))
		}
		for _, r := range stats.FinishReasons() {
			e.successObs = append(e.successObs, observeOpts(attribute.String(instrument.KeyFinishedReason, r.String())))
		}
		e.waitingObs = [][]metric.ObserveOption{
			observeOpts(attribute.String(instrument.KeyWaitingReason, instrument.WaitingCapacity)),
			observeOpts(attribute.String(instrument.KeyWaitingReason, instrument.WaitingDeferred)),
		}
		for _, s := range stats.SleepStates() {
			e.sleepObs = append(e.sleepObs, observeOpts(attribute.String(instrument.KeySleepState, s.String())))
		}
		for i := range SpecTokens {
			e.posObs = append(e.posObs, observeOpts(attribute.String(instrument.KeyPosition, strconv.Itoa(i))))
		}
		in.cacheConfigInfo.Record(context.Background(), 1, newOpts(cacheConfigAttrs(rank)...).rec...)
		o.engines = append(o.engines, e)
		o.byRank[rank] = e
	}
	o.reg, err = m.RegisterCallback(o.observe,
		o.running, o.waiting, o.waitingBy, o.sleep, o.kvUsage,
		o.prefixQ, o.prefixH, o.extQ, o.extH, o.mmQ, o.mmH, o.preempt, o.prompt, o.cached, o.gen,
		o.success, o.corrupted, o.specDrafts, o.specDraftTokens, o.specAccepted, o.specPos,
		o.nixlFailedTransfers, o.nixlFailedNotifs, o.nixlKVExpired)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// newPrecomputedEngineNoStart is a PrecomputedEngine for the histograms
// and the LoRA gauge only: no start-up series are recorded, the callback
// reports the counters and gauges from the first collection.
func newPrecomputedEngineNoStart(in *otelInstruments, rank int) *PrecomputedEngine {
	e := buildPrecomputedOpts(rank)
	e.in = in
	return e
}

// Engine returns the engine of a rank (nil if unknown).
func (o *Observable) Engine(rank int) *ObservableEngine { return o.byRank[rank] }

// Unregister removes the callback.
func (o *Observable) Unregister() error { return o.reg.Unregister() }

// observe reports every engine's counters and gauges.
func (o *Observable) observe(_ context.Context, obs metric.Observer) error {
	for _, e := range o.engines {
		for s := range e.bySource {
			obs.ObserveInt64(o.prompt, e.bySource[s].Load(), e.bySourceObs[s]...)
		}
		for r := range e.success {
			obs.ObserveInt64(o.success, e.success[r].Load(), e.successObs[r]...)
		}
		for _, c := range []struct {
			inst metric.Int64ObservableCounter
			v    *atomic.Int64
		}{
			{o.cached, &e.cached}, {o.gen, &e.generation}, {o.preempt, &e.preemptions},
			{o.prefixQ, &e.prefixQ}, {o.prefixH, &e.prefixH}, {o.mmQ, &e.mmQ}, {o.mmH, &e.mmH},
			{o.extQ, &e.extQ}, {o.extH, &e.extH},
			{o.specDrafts, &e.specDrafts}, {o.specDraftTokens, &e.specDraftTokens}, {o.specAccepted, &e.specAccepted},
			{o.nixlFailedTransfers, &e.nixlFailedTransfers}, {o.nixlFailedNotifs, &e.nixlFailedNotifs},
			{o.nixlKVExpired, &e.nixlExp},
		} {
			obs.ObserveInt64(c.inst, c.v.Load(), e.plain...)
		}
		if v := e.corrupted.Load(); v > 0 { // a series from the first report, as the Recorder does
			obs.ObserveInt64(o.corrupted, v, e.plain...)
		}
		for i := range e.specPos {
			obs.ObserveInt64(o.specPos, e.specPos[i].Load(), e.posObs[i]...)
		}
		obs.ObserveInt64(o.running, e.running.Load(), e.plain...)
		obs.ObserveInt64(o.waiting, e.waiting.Load(), e.plain...)
		obs.ObserveInt64(o.waitingBy, e.waitingBy[0].Load(), e.waitingObs[0]...)
		obs.ObserveInt64(o.waitingBy, e.waitingBy[1].Load(), e.waitingObs[1]...)
		state := e.sleepState.Load()
		for s := range e.sleepObs {
			var v int64
			if int64(s) == state {
				v = 1
			}
			obs.ObserveInt64(o.sleep, v, e.sleepObs[s]...)
		}
		obs.ObserveFloat64(o.kvUsage, math.Float64frombits(e.kvUsage.Load()), e.plain...)
	}
	return nil
}

func addAtomic(a *atomic.Int64, v int64) {
	if v > 0 {
		a.Add(v)
	}
}

// RecordIteration records one step's outputs and its finished requests.
func (e *ObservableEngine) RecordIteration(ctx context.Context, it *stats.Iteration) {
	p := &it.PromptTokens
	addAtomic(&e.bySource[stats.LocalCompute], p.Computed)
	addAtomic(&e.bySource[stats.LocalCacheHit], p.LocalCacheHit)
	addAtomic(&e.bySource[stats.ExternalKVTransfer], p.ExternalKVTransfer)
	addAtomic(&e.cached, p.LocalCacheHit+p.ExternalKVTransfer)
	addAtomic(&e.generation, it.GenerationTokens)
	addAtomic(&e.preemptions, it.Preemptions)
	addAtomic(&e.corrupted, it.CorruptedRequests)
	h := e.hist
	h.in.iterationTokens.Record(ctx, p.Computed+it.GenerationTokens, h.plain.rec...)
	for _, v := range it.TTFT {
		h.in.ttft.Record(ctx, v, h.ttft.rec...)
	}
	for _, v := range it.ITL {
		h.in.itl.Record(ctx, v, h.plain.rec...)
	}
	for i := range it.Finished {
		e.RecordFinished(ctx, &it.Finished[i])
	}
}

// RecordFinished records one finished request.
func (e *ObservableEngine) RecordFinished(ctx context.Context, f *stats.FinishedRequest) {
	e.success[f.Reason].Add(1)
	h := e.hist
	in, rec := h.in, h.plain.rec
	in.requestPrompt.Record(ctx, f.PromptTokens, rec...)
	in.requestGeneration.Record(ctx, f.GenerationTokens, rec...)
	in.prefillKVComputed.Record(ctx, f.PrefillComputedTokens, rec...)
	if f.MaxTokens > 0 {
		in.paramsMaxTokens.Record(ctx, f.MaxTokens, rec...)
	}
	if f.N > 0 {
		in.paramsN.Record(ctx, f.N, rec...)
		in.maxGeneration.Record(ctx, f.MaxGenerationTokens, rec...)
	}
	latency := h.latency[f.Reason].rec
	in.e2e.Record(ctx, f.E2ELatency, latency...)
	in.tpot.Record(ctx, f.TimePerOutputToken, latency...)
	in.queueTime.Record(ctx, f.QueueTime, rec...)
	in.inferenceTime.Record(ctx, f.InferenceTime, rec...)
	in.prefillTime.Record(ctx, f.PrefillTime, rec...)
	in.decodeTime.Record(ctx, f.DecodeTime, rec...)
}

// RecordScheduler records one scheduler step.
func (e *ObservableEngine) RecordScheduler(ctx context.Context, s *stats.Scheduler) {
	e.running.Store(s.Running)
	e.waiting.Store(s.WaitingCapacity + s.WaitingDeferred)
	e.waitingBy[0].Store(s.WaitingCapacity)
	e.waitingBy[1].Store(s.WaitingDeferred)
	e.kvUsage.Store(math.Float64bits(s.KVCacheUsage))
	e.sleepState.Store(int64(s.SleepState))
	addAtomic(&e.prefixQ, s.PrefixCache.Queries)
	addAtomic(&e.prefixH, s.PrefixCache.Hits)
	addAtomic(&e.mmQ, s.MultimodalCache.Queries)
	addAtomic(&e.mmH, s.MultimodalCache.Hits)
	if c := s.ConnectorPrefixCache; c != nil {
		addAtomic(&e.extQ, c.Queries)
		addAtomic(&e.extH, c.Hits)
	}
	if sd := s.SpecDecoding; sd != nil {
		addAtomic(&e.specDrafts, sd.Drafts)
		addAtomic(&e.specDraftTokens, sd.DraftTokens)
		addAtomic(&e.specAccepted, sd.AcceptedTokens)
		for i, v := range sd.AcceptedPerPosition {
			if i < len(e.specPos) {
				addAtomic(&e.specPos[i], v)
			}
		}
	}
	h := e.hist
	in, rec := h.in, h.plain.rec
	if s.LoRA != nil {
		in.loraInfo.Record(ctx, unixNow(), h.loraOpts(s.LoRA).rec...)
	}
	if k := s.KVTransfer; k != nil {
		for _, v := range k.XferTime {
			in.nixlXferTime.Record(ctx, v, rec...)
		}
		for _, v := range k.PostTime {
			in.nixlPostTime.Record(ctx, v, rec...)
		}
		for _, v := range k.BytesTransferred {
			in.nixlBytes.Record(ctx, v, rec...)
		}
		for _, v := range k.NumDescriptors {
			in.nixlDescriptors.Record(ctx, v, rec...)
		}
		addAtomic(&e.nixlFailedTransfers, k.FailedTransfers)
		addAtomic(&e.nixlFailedNotifs, k.FailedNotifications)
		addAtomic(&e.nixlExp, k.ExpiredRequests)
	}
	for i := range s.Evictions {
		ev := &s.Evictions[i]
		in.kvLifetime.Record(ctx, ev.Lifetime, rec...)
		in.kvIdle.Record(ctx, ev.IdleBeforeEvict, rec...)
		for _, g := range ev.ReuseGaps {
			in.kvReuseGap.Record(ctx, g, rec...)
		}
	}
}
