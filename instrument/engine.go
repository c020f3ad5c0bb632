package instrument

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// maxSpecPositions bounds the draft positions given attribute sets.
const maxSpecPositions = 64

// measure holds one attribute set as the option slices the API takes, built
// once so that recording allocates nothing.
type measure struct {
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

func newMeasure(kv ...attribute.KeyValue) measure { return measureOf(attribute.NewSet(kv...)) }

func measureOf(set attribute.Set) measure {
	opt := metric.WithAttributeSet(set)
	return measure{rec: []metric.RecordOption{opt}, obs: []metric.ObserveOption{opt}}
}

// cells are an engine's counter and gauge values, which the Recorder's
// callback reports through the observable instruments. Counters are
// cumulative since construction; the totals (see total) keep them from
// wrapping around.
type cells struct {
	bySource                                     [3]atomic.Int64 // prompt tokens
	success                                      [5]atomic.Int64 // by finish reason
	generation, preemptions, corrupted           atomic.Int64
	recomputed                                   atomic.Int64 // requests that computed one prompt token
	prefixQ, prefixH, mmQ, mmH, extQ, extH       atomic.Int64
	specDrafts, specDraftTokens, specAccepted    atomic.Int64
	specPos                                      [maxSpecPositions]atomic.Int64
	nixlFailedTransfers, nixlFailedNotifs, nixlX atomic.Int64

	running, waiting, sleepState atomic.Int64 // gauges, last value
	waitingBy                    [2]atomic.Int64
	kvUsage                      atomic.Uint64 // float64 bits

	cachedByTier    [5]atomic.Int64  // prompt tokens cached, by stats.Tier
	perf            [3]atomic.Uint64 // MFU estimates (float64 bits): FLOPs, read bytes, write bytes
	kvFetch         [3]atomic.Int64  // gauge, by stats.FetchStage
	kvFetchReported atomic.Bool      // a step reported KV fetch stages
	nixlAfterExpiry atomic.Int64

	// invalid counts refused input by kind (NameInvalidEvents).
	invalid [numRefusals]atomic.Int64

	// inFlight is the front end's in-flight requests (RequestStarted,
	// RequestEnded), reported with running: see RequestStarted.
	inFlight atomic.Int64
}

// Engine records the stats of one data-parallel engine. Get it from
// Recorder.Engine once and keep it: its methods do no lookup. It is safe for
// concurrent use.
type Engine struct {
	*engineState
	life *lifetime // shared with the Recorder: Close

	totalsMu sync.Mutex
	totals   [numTotals]int64 // see total

	backends  backends        // the client metrics' handles, see Backend
	http      httpSeries      // the HTTP server families' attribute sets, see RecordHTTPRequest
	events    *Events         // the engine's steps without a scheduler, see Events
	synthetic *Synthetic      // chosen values, see Synthetic
	admission *admissionState // the Recorder's, see RecordAdmissionRejection

	usage usageSeries // the usage families' attribute sets, see WithAttribution

	warned [numFeatures]atomic.Bool // feature data reported without its option, see unconfigured

	// provider keeps the MeterProvider, whose address identifies the
	// engine's series claims, from being freed and reused while they hold.
	provider metric.MeterProvider
}

// engineState is what the Recorder's callback reads of an engine. The
// engine's series claims hold it weakly: they last while it is reported,
// until Close or until the MeterProvider holding the callback is garbage.
type engineState struct {
	inst  *instruments
	rank  int
	base  []attribute.KeyValue // model_name, engine, constant attributes
	plain measure

	bySource  [3]measure
	byReason  [5]measure // finished_reason
	waitingBy [2]measure // capacity, deferred
	sleep     [3]measure
	byTier    [5]measure           // source label of the cached prompt tokens, by stats.Tier
	byStage   [3]measure           // KV fetch stage
	byKind    [numRefusals]measure // kind of refused input
	server    serverMeasures       // the GenAI server metrics, see WithGenAISemconv

	// respModels are the gen_ai.response.model values recorded, shared by
	// the server and the client metrics.
	respModels responseModels

	positions atomic.Pointer[[]measure] // spec decode positions, grown on demand
	growMu    sync.Mutex

	lora loraHistory // the kept LoRA states, see WithLoRAHistory

	// kvConnector and specPositions are the optional families configured:
	// their series exist from construction; otherwise from their first
	// non-zero value.
	kvConnector   bool
	kvConsumer    bool
	kvResidency   bool
	corruption    bool
	specPositions int

	c cells

	// modelName and the GenAI attributes, for the client metrics' handles.
	modelName, genAIOperation, genAIProvider string

	prio priorityState // priority scheduling, see priority.go
	off  offloadState  // KV offloading, see offload.go
}

// genAIKV returns the GenAI attributes of an operation: its
// gen_ai.operation.name, the configured one for stats.OperationDefault.
// op must be valid.
func (e *engineState) genAIKV(op stats.Operation) []attribute.KeyValue {
	name := op.String()
	if op == stats.OperationDefault {
		name = e.genAIOperation
	}
	return []attribute.KeyValue{
		attribute.String(KeyGenAIOperationName, name),
		attribute.String(KeyGenAIProviderName, e.genAIProvider),
		attribute.String(KeyGenAIRequestModel, e.modelName),
	}
}

func newEngine(inst *instruments, life *lifetime, lora *loraStates, cfg *config, rank int) *Engine {
	e := &Engine{life: life, provider: cfg.meterProvider, engineState: &engineState{inst: inst, rank: rank,
		kvConnector: cfg.kvConnector, kvConsumer: cfg.kvConsumer, corruption: cfg.corruption, kvResidency: cfg.kvResidency,
		specPositions: cfg.specPositions, modelName: cfg.modelName, genAIOperation: cfg.genAIOperation,
		genAIProvider: cfg.genAIProvider}}
	e.base = append([]attribute.KeyValue{
		attribute.String(KeyModelName, cfg.modelName),
		attribute.String(KeyEngine, engineLabel(rank)),
	}, cfg.attributes...)
	e.plain = e.with()
	for _, s := range stats.Sources() {
		e.bySource[s] = e.with(attribute.String(KeySource, s.String()))
	}
	for _, r := range stats.FinishReasons() {
		e.byReason[r] = e.with(attribute.String(KeyFinishedReason, r.String()))
	}
	e.waitingBy[0] = e.with(attribute.String(KeyWaitingReason, WaitingCapacity))
	e.waitingBy[1] = e.with(attribute.String(KeyWaitingReason, WaitingDeferred))
	for _, s := range stats.SleepStates() {
		e.sleep[s] = e.with(attribute.String(KeySleepState, s.String()))
	}
	for _, t := range stats.Tiers() {
		e.byTier[t] = e.with(attribute.String(KeySource, t.String()))
	}
	for _, s := range stats.FetchStages() {
		e.byStage[s] = e.with(attribute.String(KeyStage, s.String()))
	}
	for k := range e.byKind {
		e.byKind[k] = e.with(attribute.String(KeyKind, refusal(k).String()))
	}
	empty := []measure{}
	e.positions.Store(&empty)
	e.positionMeasures(cfg.specPositions)
	e.lora.k, e.lora.shared = cfg.loraHistory, lora
	e.buildPriority(cfg)
	e.buildServer(cfg)
	e.buildOffload(cfg)
	e.events = newEvents(e, cfg.eventWindow)
	e.synthetic = newSynthetic(e, cfg)
	e.buildUsage(cfg)
	return e
}

// with returns the measure of the engine's base attributes plus kv.
func (e *engineState) with(kv ...attribute.KeyValue) measure {
	return newMeasure(append(e.base[:len(e.base):len(e.base)], kv...)...)
}

// usable reports a nil or zero Engine (ErrUnknownEngine), one of a closed
// Recorder (ErrClosed) and nil stats (ErrNilStats).
func (e *Engine) usable(nilStats bool) error {
	if e == nil || e.engineState == nil {
		return fmt.Errorf("%w: a nil or zero Engine (get one from Recorder.Engine)", ErrUnknownEngine)
	}
	if e.life.closed.Load() {
		return fmt.Errorf("%w: engine %d", ErrClosed, e.rank)
	}
	if nilStats {
		return fmt.Errorf("%w: pass the step's or request's stats", ErrNilStats)
	}
	return nil
}

// Rank returns the engine's data-parallel rank; -1 for a nil or zero Engine.
func (e *Engine) Rank() int {
	if e == nil || e.engineState == nil {
		return -1
	}
	return e.rank
}

// start records the engine's cache configuration info series. Its counter
// and gauge series exist at zero from the first collection, as in vLLM
// (vllm/v1/metrics/loggers.py pre-creates and seeds them): the callback
// reports them (see observe).
func (e *Engine) start(ctx context.Context, cfg *config) {
	if cfg.cacheConfig != nil {
		kv := []attribute.KeyValue{attribute.String(KeyEngine, engineLabel(e.rank))}
		for _, k := range cfg.cacheConfig.Keys() {
			kv = append(kv, attribute.String(k, cfg.cacheConfig[k]))
		}
		e.inst.cacheConfigInfo.Record(ctx, 1, newMeasure(kv...).rec...)
	}
	e.startSimpleOffload(ctx, cfg)
}

// observe reports the engine's counters and gauges but
// vllm:lora_requests_info (see loraStates.observe). Always-on series are
// reported from construction; an optional family's (KV connector,
// speculative decoding) from construction when configured, otherwise, like
// the corrupted requests counter, from its first non-zero value; the KV
// fetch stages gauge from construction with WithKVConsumer, otherwise from
// the first step that reports it.
func (e *engineState) observe(o metric.Observer) {
	in, c, plain := e.inst, &e.c, e.plain.obs
	for s := range c.bySource {
		o.ObserveInt64(in.promptTokens, c.bySource[s].Load(), e.bySource[s].obs...)
	}
	for r := range c.success {
		if !e.prio.priority { // else by priority too, see observePriority
			o.ObserveInt64(in.requestSuccess, c.success[r].Load(), e.byReason[r].obs...)
		}
	}
	for t := range c.cachedByTier {
		o.ObserveInt64(in.promptCached, c.cachedByTier[t].Load(), e.byTier[t].obs...)
	}
	o.ObserveInt64(in.generationTokens, c.generation.Load(), plain...)
	o.ObserveInt64(in.promptRecomputed, c.recomputed.Load(), plain...)
	o.ObserveInt64(in.preemptions, c.preemptions.Load(), plain...)
	o.ObserveInt64(in.prefixQueries, c.prefixQ.Load(), plain...)
	o.ObserveInt64(in.prefixHits, c.prefixH.Load(), plain...)
	o.ObserveInt64(in.mmQueries, c.mmQ.Load(), plain...)
	o.ObserveInt64(in.mmHits, c.mmH.Load(), plain...)
	observeSome(o, in.corrupted, &c.corrupted, e.corruption, plain)
	// Always present, as in vLLM, whose vllm/v1/metrics/loggers.py
	// registers them with or without a connector.
	o.ObserveInt64(in.extPrefixQueries, c.extQ.Load(), plain...)
	o.ObserveInt64(in.extPrefixHits, c.extH.Load(), plain...)
	observeSome(o, in.nixlFailedTransfers, &c.nixlFailedTransfers, e.kvConnector, plain)
	observeSome(o, in.nixlFailedNotifs, &c.nixlFailedNotifs, e.kvConnector, plain)
	observeSome(o, in.nixlKVExpired, &c.nixlX, e.kvConnector, plain)
	observeSome(o, in.nixlNotifsAfterExpiry, &c.nixlAfterExpiry, e.kvConnector, plain)
	for i, inst := range [...]metric.Float64ObservableCounter{in.estFlops, in.estReadB, in.estWriteB} {
		o.ObserveFloat64(inst, math.Float64frombits(c.perf[i].Load()), plain...)
	}
	if e.kvConsumer || c.kvFetchReported.Load() {
		for s := range c.kvFetch {
			o.ObserveInt64(in.kvFetchByStage, c.kvFetch[s].Load(), e.byStage[s].obs...)
		}
	}
	spec := e.specPositions > 0
	observeSome(o, in.specDrafts, &c.specDrafts, spec, plain)
	observeSome(o, in.specDraftTokens, &c.specDraftTokens, spec, plain)
	observeSome(o, in.specAccepted, &c.specAccepted, spec, plain)
	for i, m := range *e.positions.Load() {
		observeSome(o, in.specAcceptedPerPos, &c.specPos[i], i < e.specPositions, m.obs)
	}

	o.ObserveInt64(in.running, c.running.Load()+c.inFlight.Load(), plain...)
	o.ObserveInt64(in.waiting, c.waiting.Load(), plain...)
	o.ObserveInt64(in.waitingByReason, c.waitingBy[0].Load(), e.waitingBy[0].obs...)
	o.ObserveInt64(in.waitingByReason, c.waitingBy[1].Load(), e.waitingBy[1].obs...)
	o.ObserveFloat64(in.kvCacheUsage, math.Float64frombits(c.kvUsage.Load()), plain...)
	state := c.sleepState.Load()
	for s := range e.sleep {
		var v int64
		if int64(s) == state {
			v = 1
		}
		o.ObserveInt64(in.sleepState, v, e.sleep[s].obs...)
	}
	for k := range c.invalid {
		observeSome(o, in.invalidEvents, &c.invalid[k], false, e.byKind[k].obs)
	}
	e.observePriority(o)
	e.observeOffload(o)
}

// observeSome reports a counter that is configured or above zero.
func observeSome(o metric.Observer, inst metric.Int64ObservableCounter, a *atomic.Int64, always bool, opts []metric.ObserveOption) {
	if v := a.Load(); always || v > 0 {
		o.ObserveInt64(inst, v, opts...)
	}
}

// RecordIteration records one step's outputs: prompt tokens by source, cached
// and generation tokens, preemptions, one iteration-tokens observation of
// it.TokensDone(), the TTFT and ITL values and every finished request. Values
// of a request with a context (stats.Request.Context) are recorded with it,
// so that their exemplars name the request's span; the others with ctx.
//
// The events the step and its Timelines refused (it.Refused) are counted and
// reported here, once. An invalid iteration (see stats.Iteration.Validate),
// or one recorded before and not Reset since (ErrRecordedTwice), is refused:
// nothing of it is recorded, and the refusal is counted on
// NameInvalidEvents and reported to the error handler (WithErrorHandler).
func (e *Engine) RecordIteration(ctx context.Context, it *stats.Iteration) {
	if err := e.recordIteration(ctx, it); err != nil {
		k := refusedIteration
		if errors.Is(err, ErrRecordedTwice) {
			k = refusedTwice
		}
		e.refuse(k, "RecordIteration", err)
	}
}

// recordIteration is RecordIteration, returning its refusal; the step's
// refused events are reported.
func (e *Engine) recordIteration(ctx context.Context, it *stats.Iteration) error {
	later, err := e.recordStep(ctx, it, false)
	e.report(later)
	return err
}

// recordStep records a step, or a window of Events, which observes iteration
// tokens only when a request produced tokens in it. It returns its refusal,
// and the errors it counted for the error handler (the step's refused
// events, a feature without its option), which the caller reports once it
// holds no lock: Events records a window under one.
func (e *Engine) recordStep(ctx context.Context, it *stats.Iteration, window bool) (later reports, err error) {
	if err := e.usable(it == nil); err != nil {
		return later, err
	}
	if it.Recorded() {
		return later, fmt.Errorf("%w: call Reset after RecordIteration, before the step's first event", ErrRecordedTwice)
	}
	if r := it.Refused(); r.Total() > 0 {
		later[0] = e.eventsRefused(r)
	}
	if err := it.Validate(); err != nil {
		return later, err
	}
	var inc increments
	inc.iteration(it)
	if err := e.reserve(&inc); err != nil {
		return later, err
	}
	it.MarkRecorded()
	if it.CorruptedRequests > 0 && !e.corruption {
		later[1] = e.unconfigured(featCorruption)
	}
	in, c := e.inst, &e.c
	c.addPrompt(it.PromptTokens)
	addPositive(&c.generation, it.GenerationTokens)
	addPositive(&c.preemptions, it.Preemptions)
	addPositive(&c.corrupted, it.CorruptedRequests)
	if !window || it.GenerationTokens > 0 {
		in.iterationTokens.Record(ctx, it.TokensDone(), e.plain.rec...)
	}
	if !e.prio.priority { // else TTFT is observed at the finish, see WithPriorityScheduling
		for i, v := range it.TTFT {
			in.ttft.Record(requestContext(ctx, it.TTFTContexts, i), v, e.plain.rec...)
		}
	}
	if e.server.on { // the GenAI TTFT at the first token, under priority scheduling too
		for i, v := range it.TTFT {
			e.recordServerTTFT(requestContext(ctx, it.TTFTContexts, i), stats.OperationDefault, 0, v)
		}
	}
	for i, v := range it.ITL {
		in.itl.Record(requestContext(ctx, it.ITLContexts, i), v, e.plain.rec...)
	}
	for i := range it.Finished {
		e.recordFinished(ctx, &it.Finished[i])
	}
	return later, nil
}

// RecordFinished records one finished request: its finish reason, token
// counts, parameters and latencies. An invalid request is refused: nothing
// of it is recorded, and the refusal is counted and reported (see
// RecordIteration).
func (e *Engine) RecordFinished(ctx context.Context, f *stats.FinishedRequest) {
	if err := e.recordFinishedRequest(ctx, f); err != nil {
		e.refuse(refusedFinished, "RecordFinished", err)
	}
}

// recordFinishedRequest is RecordFinished, returning its refusal.
func (e *Engine) recordFinishedRequest(ctx context.Context, f *stats.FinishedRequest) error {
	if err := e.usable(f == nil); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	var inc increments
	inc.finished(f)
	if err := e.reserve(&inc); err != nil {
		return err
	}
	e.recordFinished(ctx, f)
	return nil
}

// requestContext returns the context of the i-th value of a step's TTFT or
// ITL list: its request's (stats.Iteration.TTFTContexts, ITLContexts) when
// there is one, else the step's.
func requestContext(step context.Context, ctxs []context.Context, i int) context.Context {
	if i < len(ctxs) && ctxs[i] != nil {
		return ctxs[i]
	}
	return step
}

// recordFinished records f with its request's context when it has one
// (stats.FinishedRequest.Context), so that exemplars name the request.
func (e *Engine) recordFinished(ctx context.Context, f *stats.FinishedRequest) {
	if f.Context != nil {
		ctx = f.Context
	}
	fm := e.finishedOf(f) // with the priority label under priority scheduling
	in, rec := e.inst, fm.plain.rec
	e.countSuccess(f)
	if f.PromptTokens > 0 { // else it ended before its prompt length was known
		in.requestPrompt.Record(ctx, f.PromptTokens, rec...)
		in.prefillKVComputed.Record(ctx, f.PrefillComputedTokens, rec...)
		if f.PrefillComputedTokens == 1 { // bounded by the requests' total
			e.c.recomputed.Add(1)
		}
	}
	in.requestGeneration.Record(ctx, f.GenerationTokens, rec...)
	if f.MaxTokens > 0 {
		in.paramsMaxTokens.Record(ctx, f.MaxTokens, rec...)
	}
	// Once per parent: n (1 when N is 0) and the most tokens a child
	// generated, unless another child of the parent will report them.
	if n, maxGen, observe := f.Parent(); observe {
		in.paramsN.Record(ctx, n, e.plain.rec...)
		in.maxGeneration.Record(ctx, maxGen, e.plain.rec...)
	}
	in.e2e.Record(ctx, f.E2ELatency, rec...)
	in.tpot.Record(ctx, f.TimePerOutputToken, rec...)
	e.recordServerFinished(ctx, stats.OperationDefault, f.Reason, stats.ErrorNone, 0, f.E2ELatency, f.TimePerOutputToken, f.GenerationTokens > 1)
	in.queueTime.Record(ctx, f.QueueTime, rec...)
	in.inferenceTime.Record(ctx, f.InferenceTime, rec...)
	in.prefillTime.Record(ctx, f.PrefillTime, rec...)
	in.decodeTime.Record(ctx, f.DecodeTime, rec...)
	in.requestNumPreemptions.Record(ctx, f.Preemptions, rec...)
	e.recordPriority(ctx, f, fm)
}

// RecordScheduler records one scheduler step: the gauges (running, waiting,
// KV cache usage, sleep state), this step's cache lookups, and the optional
// speculative decoding, LoRA, KV connector, KV residency, KV offloading, MFU
// estimate and KV fetch stage data when present.
// An invalid step, or one with more than 64 speculative decoding positions,
// is refused: nothing of it is recorded, and the refusal is counted and
// reported (see RecordIteration). Feature data on a Recorder without the
// feature's option (Scheduler.SpecDecoding without WithSpecDecoding, ...) is
// recorded and reported once per engine (ErrFeatureNotConfigured). It sets
// every gauge from s: an engine without a step sets each when it changes
// instead (SetRunning, SetWaiting, SetKVCacheUsage, SetSleepState) and adds
// its counts with AddPrefixCache and RecordSchedulerCounts.
func (e *Engine) RecordScheduler(ctx context.Context, s *stats.Scheduler) {
	if err := e.recordSchedulerStep(ctx, s); err != nil {
		e.refuse(refusedScheduler, "RecordScheduler", err)
	}
}

// recordSchedulerStep is RecordScheduler, returning its refusal.
func (e *Engine) recordSchedulerStep(ctx context.Context, s *stats.Scheduler) error {
	return e.recordSchedulerParts(ctx, s, allGauges|schedulerCounts)
}

// The parts of a Scheduler that recordSchedulerParts records: each gauge
// that every step sets, and the rest (counts and optional parts).
type schedulerParts uint8

const (
	gaugeRunning schedulerParts = 1 << iota
	gaugeWaiting
	gaugeKVCacheUsage
	gaugeSleepState
	schedulerCounts

	allGauges = gaugeRunning | gaugeWaiting | gaugeKVCacheUsage | gaugeSleepState
)

// recordSchedulerParts validates the whole of s and records its parts.
func (e *Engine) recordSchedulerParts(ctx context.Context, s *stats.Scheduler, parts schedulerParts) error {
	if err := e.usable(s == nil); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if sd := s.SpecDecoding; sd != nil && len(sd.AcceptedPerPosition) > maxSpecPositions {
		return fmt.Errorf("instrument: %d speculative decoding positions, at most %d: %w",
			len(sd.AcceptedPerPosition), maxSpecPositions, stats.ErrOutOfRange)
	}
	if parts&schedulerCounts != 0 {
		var inc increments
		inc.scheduler(s)
		if err := e.reserve(&inc); err != nil {
			return err
		}
	}
	c := &e.c
	if parts&gaugeRunning != 0 {
		c.running.Store(s.Running)
	}
	if parts&gaugeWaiting != 0 {
		c.waiting.Store(s.Waiting())
		c.waitingBy[0].Store(s.WaitingCapacity)
		c.waitingBy[1].Store(s.WaitingDeferred)
	}
	if parts&gaugeKVCacheUsage != 0 {
		c.kvUsage.Store(math.Float64bits(s.KVCacheUsage))
	}
	if parts&gaugeSleepState != 0 {
		c.sleepState.Store(int64(s.SleepState))
	}
	if parts&schedulerCounts != 0 {
		e.recordSchedulerCounts(ctx, s)
		e.checkFeatures(s)
	}
	return nil
}

// recordSchedulerCounts records what s adds, and its optional states.
func (e *Engine) recordSchedulerCounts(ctx context.Context, s *stats.Scheduler) {
	in, rec, c := e.inst, e.plain.rec, &e.c
	addPositive(&c.prefixQ, s.PrefixCache.Queries)
	addPositive(&c.prefixH, s.PrefixCache.Hits)
	addPositive(&c.mmQ, s.MultimodalCache.Queries)
	addPositive(&c.mmH, s.MultimodalCache.Hits)
	if cp := s.ConnectorPrefixCache; cp != nil {
		addPositive(&c.extQ, cp.Queries)
		addPositive(&c.extH, cp.Hits)
	}
	if sd := s.SpecDecoding; sd != nil {
		addPositive(&c.specDrafts, sd.Drafts)
		addPositive(&c.specDraftTokens, sd.DraftTokens)
		addPositive(&c.specAccepted, sd.AcceptedTokens)
		// RecordScheduler checked the length. The callback reports a
		// position it has options for, so build them before adding.
		e.positionMeasures(len(sd.AcceptedPerPosition))
		for i, v := range sd.AcceptedPerPosition {
			addPositive(&c.specPos[i], v)
		}
	}
	if s.LoRA != nil {
		e.setLoRANow(s.LoRA)
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
		addPositive(&c.nixlFailedTransfers, k.FailedTransfers)
		addPositive(&c.nixlFailedNotifs, k.FailedNotifications)
		addPositive(&c.nixlX, k.ExpiredRequests)
		addPositive(&c.nixlAfterExpiry, k.NotificationsAfterExpiry)
	}
	if p := s.Perf; p != nil {
		addFloat(&c.perf[0], p.FLOPs)
		addFloat(&c.perf[1], p.ReadBytes)
		addFloat(&c.perf[2], p.WriteBytes)
	}
	if k := s.KVFetch; k != nil {
		for _, st := range stats.FetchStages() {
			c.kvFetch[st].Store(k.ByStage(st))
		}
		c.kvFetchReported.Store(true)
	}
	for i := range s.Evictions {
		ev := &s.Evictions[i]
		in.kvLifetime.Record(ctx, ev.Lifetime, rec...)
		in.kvIdle.Record(ctx, ev.IdleBeforeEvict, rec...)
		for _, g := range ev.ReuseGaps {
			in.kvReuseGap.Record(ctx, g, rec...)
		}
	}
	e.recordOffloads(ctx, s)
}

// positionMeasures returns the measures of draft positions 0..n-1 (at most
// maxSpecPositions), building missing ones once.
func (e *engineState) positionMeasures(n int) []measure {
	n = min(n, maxSpecPositions)
	if ps := *e.positions.Load(); len(ps) >= n {
		return ps
	}
	e.growMu.Lock()
	defer e.growMu.Unlock()
	ps := *e.positions.Load()
	if len(ps) >= n {
		return ps
	}
	grown := append(ps[:len(ps):len(ps)], make([]measure, n-len(ps))...)
	for i := len(ps); i < n; i++ {
		grown[i] = e.with(attribute.String(KeyPosition, strconv.Itoa(i)))
	}
	e.positions.Store(&grown)
	return grown
}

// addPrompt adds prompt tokens to the cells by source and, for the cached
// ones, by tier.
func (c *cells) addPrompt(p stats.PromptTokens) {
	for _, s := range stats.Sources() {
		addPositive(&c.bySource[s], p.BySource(s))
	}
	for _, t := range stats.Tiers() {
		addPositive(&c.cachedByTier[t], p.ByTier(t))
	}
}

// addPositive adds v to a counter's cell when it is above zero (a value the
// totals reserved, so the cell cannot wrap around).
func addPositive(a *atomic.Int64, v int64) {
	if v > 0 {
		a.Add(v)
	}
}

// addFloat adds v to a float64 counter's cell (float64 bits) when it is
// above zero. Values are validated (at most stats.MaxPerfEstimate or
// stats.MaxSeconds), so the sum stays finite.
func addFloat(a *atomic.Uint64, v float64) {
	if v <= 0 {
		return
	}
	for {
		old := a.Load()
		if a.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}
