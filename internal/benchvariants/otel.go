package benchvariants

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// otelInstruments are the instruments a hand-written OpenTelemetry
// instrumentation creates: the Recorder's names, units, descriptions and
// bucket boundaries, under the Recorder's scope so that views.VLLM applies
// to them as it does to the Recorder's.
type otelInstruments struct {
	running, waiting, waitingByReason, sleepState metric.Int64Gauge
	kvCacheUsage                                  metric.Float64Gauge

	prefixQueries, prefixHits, extPrefixQueries, extPrefixHits metric.Int64Counter
	mmQueries, mmHits                                          metric.Int64Counter
	preemptions, promptTokens, promptCached, generationTokens  metric.Int64Counter
	requestSuccess, corrupted                                  metric.Int64Counter

	requestPrompt, requestGeneration, iterationTokens, maxGeneration metric.Int64Histogram
	paramsN, paramsMaxTokens, prefillKVComputed, numPreemptions      metric.Int64Histogram

	ttft, itl, tpot, e2e, queueTime, inferenceTime, prefillTime, decodeTime metric.Float64Histogram
	kvLifetime, kvIdle, kvReuseGap                                          metric.Float64Histogram

	specDrafts, specDraftTokens, specAccepted, specAcceptedPerPos metric.Int64Counter

	nixlXferTime, nixlPostTime                           metric.Float64Histogram
	nixlBytes, nixlDescriptors                           metric.Int64Histogram
	nixlFailedTransfers, nixlFailedNotifs, nixlKVExpired metric.Int64Counter

	loraInfo        metric.Float64Gauge
	cacheConfigInfo metric.Int64Gauge
	schedulerPolicy metric.Int64Gauge
}

// meter returns the meter of the Recorder's scope.
func meter(mp metric.MeterProvider) metric.Meter {
	return mp.Meter(instrument.ScopeName, metric.WithInstrumentationVersion(instrument.Version))
}

// newOTelInstruments creates every instrument of the catalog but those in
// skip, which the caller creates itself.
func newOTelInstruments(m metric.Meter, skip ...string) (*otelInstruments, error) {
	var errs []error
	byName := map[string]any{}
	for _, d := range instrument.Descriptors() {
		if slices.Contains(skip, d.Name) {
			continue
		}
		bounds := d.Buckets
		if d.LengthBuckets {
			bounds = instrument.LengthBuckets(MaxModelLen)
		}
		var inst any
		var err error
		switch {
		case d.Kind == instrument.Counter && d.Integer:
			inst, err = m.Int64Counter(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		case d.Kind == instrument.Counter:
			inst, err = m.Float64Counter(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		case d.Kind == instrument.Gauge && d.Integer:
			inst, err = m.Int64Gauge(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		case d.Kind == instrument.Gauge:
			inst, err = m.Float64Gauge(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		case d.Kind == instrument.Histogram && d.Integer:
			inst, err = m.Int64Histogram(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description),
				metric.WithExplicitBucketBoundaries(bounds...))
		case d.Kind == instrument.Histogram:
			inst, err = m.Float64Histogram(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description),
				metric.WithExplicitBucketBoundaries(bounds...))
		default:
			err = fmt.Errorf("no instrument for %s %s", d.Kind, d.Name)
		}
		errs = append(errs, err)
		byName[d.Name] = inst
	}
	in := &otelInstruments{}
	set := func(dst any, name string) {
		v, ok := byName[name]
		if !ok {
			return // skipped
		}
		switch p := dst.(type) {
		case *metric.Int64Counter:
			*p = v.(metric.Int64Counter)
		case *metric.Int64Gauge:
			*p = v.(metric.Int64Gauge)
		case *metric.Float64Gauge:
			*p = v.(metric.Float64Gauge)
		case *metric.Int64Histogram:
			*p = v.(metric.Int64Histogram)
		case *metric.Float64Histogram:
			*p = v.(metric.Float64Histogram)
		}
	}
	for _, f := range []struct {
		dst  any
		name string
	}{
		{&in.running, instrument.NameNumRequestsRunning},
		{&in.waiting, instrument.NameNumRequestsWaiting},
		{&in.waitingByReason, instrument.NameNumRequestsWaitingByReason},
		{&in.sleepState, instrument.NameEngineSleepState},
		{&in.kvCacheUsage, instrument.NameKVCacheUsage},
		{&in.prefixQueries, instrument.NamePrefixCacheQueries},
		{&in.prefixHits, instrument.NamePrefixCacheHits},
		{&in.extPrefixQueries, instrument.NameExternalPrefixCacheQueries},
		{&in.extPrefixHits, instrument.NameExternalPrefixCacheHits},
		{&in.mmQueries, instrument.NameMMCacheQueries},
		{&in.mmHits, instrument.NameMMCacheHits},
		{&in.preemptions, instrument.NameNumPreemptions},
		{&in.promptTokens, instrument.NamePromptTokens},
		{&in.promptCached, instrument.NamePromptTokensCached},
		{&in.generationTokens, instrument.NameGenerationTokens},
		{&in.requestSuccess, instrument.NameRequestSuccess},
		{&in.corrupted, instrument.NameCorruptedRequests},
		{&in.requestPrompt, instrument.NameRequestPromptTokens},
		{&in.requestGeneration, instrument.NameRequestGenerationTokens},
		{&in.iterationTokens, instrument.NameIterationTokens},
		{&in.maxGeneration, instrument.NameRequestMaxNumGenerationTokens},
		{&in.paramsN, instrument.NameRequestParamsN},
		{&in.paramsMaxTokens, instrument.NameRequestParamsMaxTokens},
		{&in.prefillKVComputed, instrument.NameRequestPrefillKVComputedTokens},
		{&in.numPreemptions, instrument.NameRequestNumPreemptions},
		{&in.ttft, instrument.NameTimeToFirstToken},
		{&in.itl, instrument.NameInterTokenLatency},
		{&in.tpot, instrument.NameRequestTimePerOutputToken},
		{&in.e2e, instrument.NameE2ERequestLatency},
		{&in.queueTime, instrument.NameRequestQueueTime},
		{&in.inferenceTime, instrument.NameRequestInferenceTime},
		{&in.prefillTime, instrument.NameRequestPrefillTime},
		{&in.decodeTime, instrument.NameRequestDecodeTime},
		{&in.kvLifetime, instrument.NameKVBlockLifetime},
		{&in.kvIdle, instrument.NameKVBlockIdleBeforeEvict},
		{&in.kvReuseGap, instrument.NameKVBlockReuseGap},
		{&in.specDrafts, instrument.NameSpecDecodeNumDrafts},
		{&in.specDraftTokens, instrument.NameSpecDecodeNumDraftTokens},
		{&in.specAccepted, instrument.NameSpecDecodeNumAcceptedTokens},
		{&in.specAcceptedPerPos, instrument.NameSpecDecodeNumAcceptedTokensPerPos},
		{&in.nixlXferTime, instrument.NameNIXLXferTime},
		{&in.nixlPostTime, instrument.NameNIXLPostTime},
		{&in.nixlBytes, instrument.NameNIXLBytesTransferred},
		{&in.nixlDescriptors, instrument.NameNIXLNumDescriptors},
		{&in.nixlFailedTransfers, instrument.NameNIXLNumFailedTransfers},
		{&in.nixlFailedNotifs, instrument.NameNIXLNumFailedNotifs},
		{&in.nixlKVExpired, instrument.NameNIXLNumKVExpiredReqs},
		{&in.loraInfo, instrument.NameLoRARequestsInfo},
		{&in.cacheConfigInfo, instrument.NameCacheConfigInfo},
		{&in.schedulerPolicy, instrument.NameSchedulerPolicyInfo},
	} {
		if _, known := byName[f.name]; !known && !slices.Contains(skip, f.name) {
			errs = append(errs, fmt.Errorf("catalog has no instrument %s", f.name))
		}
		set(f.dst, f.name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("benchvariants: %w", err)
	}
	return in, nil
}

// engineLabel is the engine attribute of a rank, as the Recorder writes it.
func engineLabel(rank int) string { return strconv.Itoa(rank) }

// cacheConfigAttrs are the attributes of vllm:cache_config_info.
func cacheConfigAttrs(rank int) []attribute.KeyValue {
	kv := []attribute.KeyValue{attribute.String(instrument.KeyEngine, engineLabel(rank))}
	cfg := CacheConfig()
	for _, k := range cfg.Keys() {
		kv = append(kv, attribute.String(k, cfg[k]))
	}
	return kv
}

// recordPolicy sets vllm:scheduler_policy_info of an engine: fcfs active.
func recordPolicy(ctx context.Context, in *otelInstruments, rank int) {
	for _, p := range []struct {
		policy string
		v      int64
	}{{instrument.PolicyFCFS, 1}, {instrument.PolicyPriority, 0}} {
		in.schedulerPolicy.Record(ctx, p.v, metric.WithAttributes(attribute.String(instrument.KeyModelName, Model),
			attribute.String(instrument.KeyEngine, engineLabel(rank)), attribute.String(instrument.KeyPolicy, p.policy)))
	}
}

// loraLabels returns the three label values of a LoRA state.
func loraLabels(l *stats.LoRA) (maxLoRA, waiting, running string) {
	return strconv.FormatInt(l.MaxLoRA, 10), strings.Join(l.Waiting, ","), strings.Join(l.Running, ",")
}

// unixNow is the value of vllm:lora_requests_info.
func unixNow() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// ---------------------------------------------------------------------------
// Precomputed: the best hand-written OpenTelemetry code.

// opts is one attribute set as the option slices the API takes.
type opts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newOpts(kv ...attribute.KeyValue) opts {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return opts{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// Precomputed is hand-written OpenTelemetry instrumentation with every
// attribute set and option slice built once per engine.
type Precomputed struct {
	engines map[int]*PrecomputedEngine
}

// PrecomputedEngine records one engine's stats.
type PrecomputedEngine struct {
	in        *otelInstruments
	plain     opts
	bySource  [3]opts
	byReason  [5]opts
	waitingBy [2]opts
	sleep     [3]opts
	positions []opts

	loraMu   sync.Mutex
	loraLast stats.LoRA
	lora     opts
	loraSet  bool
}

// NewPrecomputed creates the instruments on mp and the series of every
// engine at zero (as the Recorder and vLLM do).
func NewPrecomputed(mp metric.MeterProvider, ranks ...int) (*Precomputed, error) {
	in, err := newOTelInstruments(meter(mp))
	if err != nil {
		return nil, err
	}
	p := &Precomputed{engines: map[int]*PrecomputedEngine{}}
	for _, rank := range ranks {
		p.engines[rank] = newPrecomputedEngine(in, rank)
	}
	return p, nil
}

// Engine returns the engine of a rank (nil if unknown).
func (p *Precomputed) Engine(rank int) *PrecomputedEngine { return p.engines[rank] }

func newPrecomputedEngine(in *otelInstruments, rank int) *PrecomputedEngine {
	e := buildPrecomputedOpts(rank)
	e.in = in

	// Start-up series at zero.
	ctx := context.Background()
	for _, c := range []metric.Int64Counter{in.prefixQueries, in.prefixHits, in.mmQueries, in.mmHits,
		in.preemptions, in.promptCached, in.generationTokens, in.extPrefixQueries, in.extPrefixHits,
		in.nixlFailedTransfers, in.nixlFailedNotifs, in.nixlKVExpired, in.specDrafts, in.specDraftTokens, in.specAccepted} {
		c.Add(ctx, 0, e.plain.add...)
	}
	for _, o := range e.bySource {
		in.promptTokens.Add(ctx, 0, o.add...)
	}
	for _, o := range e.byReason {
		in.requestSuccess.Add(ctx, 0, o.add...)
	}
	for _, o := range e.positions {
		in.specAcceptedPerPos.Add(ctx, 0, o.add...)
	}
	e.RecordScheduler(ctx, &stats.Scheduler{})
	in.cacheConfigInfo.Record(ctx, 1, newOpts(cacheConfigAttrs(rank)...).rec...)
	recordPolicy(ctx, in, rank)
	return e
}

// buildPrecomputedOpts builds the option slices of an engine.
func buildPrecomputedOpts(rank int) *PrecomputedEngine {
	model := attribute.String(instrument.KeyModelName, Model)
	engine := attribute.String(instrument.KeyEngine, engineLabel(rank))
	with := func(kv ...attribute.KeyValue) opts {
		return newOpts(append([]attribute.KeyValue{model, engine}, kv...)...)
	}
	e := &PrecomputedEngine{plain: with()}
	for _, s := range stats.Sources() {
		e.bySource[s] = with(attribute.String(instrument.KeySource, s.String()))
	}
	for _, r := range stats.FinishReasons() {
		e.byReason[r] = with(attribute.String(instrument.KeyFinishedReason, r.String()))
	}
	e.waitingBy[0] = with(attribute.String(instrument.KeyWaitingReason, instrument.WaitingCapacity))
	e.waitingBy[1] = with(attribute.String(instrument.KeyWaitingReason, instrument.WaitingDeferred))
	for _, s := range stats.SleepStates() {
		e.sleep[s] = with(attribute.String(instrument.KeySleepState, s.String()))
	}
	for i := range SpecTokens {
		e.positions = append(e.positions, with(attribute.String(instrument.KeyPosition, strconv.Itoa(i))))
	}
	return e
}

func addIf(ctx context.Context, c metric.Int64Counter, v int64, o opts) {
	if v > 0 {
		c.Add(ctx, v, o.add...)
	}
}

// RecordIteration records one step's outputs and its finished requests.
func (e *PrecomputedEngine) RecordIteration(ctx context.Context, it *stats.Iteration) {
	in := e.in
	addIf(ctx, in.promptTokens, it.PromptTokens.Computed, e.bySource[stats.LocalCompute])
	addIf(ctx, in.promptTokens, it.PromptTokens.LocalCacheHit, e.bySource[stats.LocalCacheHit])
	addIf(ctx, in.promptTokens, it.PromptTokens.ExternalKVTransfer, e.bySource[stats.ExternalKVTransfer])
	addIf(ctx, in.promptCached, it.PromptTokens.LocalCacheHit+it.PromptTokens.ExternalKVTransfer, e.plain)
	addIf(ctx, in.generationTokens, it.GenerationTokens, e.plain)
	addIf(ctx, in.preemptions, it.Preemptions, e.plain)
	addIf(ctx, in.corrupted, it.CorruptedRequests, e.plain)
	in.iterationTokens.Record(ctx, it.PromptTokens.Computed+it.GenerationTokens, e.plain.rec...)
	for _, v := range it.TTFT {
		in.ttft.Record(ctx, v, e.plain.rec...)
	}
	for _, v := range it.ITL {
		in.itl.Record(ctx, v, e.plain.rec...)
	}
	for i := range it.Finished {
		e.RecordFinished(ctx, &it.Finished[i])
	}
}

// RecordFinished records one finished request.
func (e *PrecomputedEngine) RecordFinished(ctx context.Context, f *stats.FinishedRequest) {
	in, rec := e.in, e.plain.rec
	in.requestSuccess.Add(ctx, 1, e.byReason[f.Reason].add...)
	in.requestPrompt.Record(ctx, f.PromptTokens, rec...)
	in.requestGeneration.Record(ctx, f.GenerationTokens, rec...)
	in.prefillKVComputed.Record(ctx, f.PrefillComputedTokens, rec...)
	in.numPreemptions.Record(ctx, f.Preemptions, rec...)
	if f.MaxTokens > 0 {
		in.paramsMaxTokens.Record(ctx, f.MaxTokens, rec...)
	}
	if f.N > 0 {
		in.paramsN.Record(ctx, f.N, rec...)
		in.maxGeneration.Record(ctx, f.MaxGenerationTokens, rec...)
	}
	in.e2e.Record(ctx, f.E2ELatency, rec...)
	in.tpot.Record(ctx, f.TimePerOutputToken, rec...)
	in.queueTime.Record(ctx, f.QueueTime, rec...)
	in.inferenceTime.Record(ctx, f.InferenceTime, rec...)
	in.prefillTime.Record(ctx, f.PrefillTime, rec...)
	in.decodeTime.Record(ctx, f.DecodeTime, rec...)
}

// RecordScheduler records one scheduler step.
func (e *PrecomputedEngine) RecordScheduler(ctx context.Context, s *stats.Scheduler) {
	in, rec := e.in, e.plain.rec
	in.running.Record(ctx, s.Running, rec...)
	in.waiting.Record(ctx, s.WaitingCapacity+s.WaitingDeferred, rec...)
	in.waitingByReason.Record(ctx, s.WaitingCapacity, e.waitingBy[0].rec...)
	in.waitingByReason.Record(ctx, s.WaitingDeferred, e.waitingBy[1].rec...)
	in.kvCacheUsage.Record(ctx, s.KVCacheUsage, rec...)
	for st := range e.sleep {
		var v int64
		if stats.SleepState(st) == s.SleepState {
			v = 1
		}
		in.sleepState.Record(ctx, v, e.sleep[st].rec...)
	}
	addIf(ctx, in.prefixQueries, s.PrefixCache.Queries, e.plain)
	addIf(ctx, in.prefixHits, s.PrefixCache.Hits, e.plain)
	addIf(ctx, in.mmQueries, s.MultimodalCache.Queries, e.plain)
	addIf(ctx, in.mmHits, s.MultimodalCache.Hits, e.plain)
	if c := s.ConnectorPrefixCache; c != nil {
		addIf(ctx, in.extPrefixQueries, c.Queries, e.plain)
		addIf(ctx, in.extPrefixHits, c.Hits, e.plain)
	}
	if sd := s.SpecDecoding; sd != nil {
		addIf(ctx, in.specDrafts, sd.Drafts, e.plain)
		addIf(ctx, in.specDraftTokens, sd.DraftTokens, e.plain)
		addIf(ctx, in.specAccepted, sd.AcceptedTokens, e.plain)
		for i, v := range sd.AcceptedPerPosition {
			if i < len(e.positions) {
				addIf(ctx, in.specAcceptedPerPos, v, e.positions[i])
			}
		}
	}
	if s.LoRA != nil {
		in.loraInfo.Record(ctx, unixNow(), e.loraOpts(s.LoRA).rec...)
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
		addIf(ctx, in.nixlFailedTransfers, k.FailedTransfers, e.plain)
		addIf(ctx, in.nixlFailedNotifs, k.FailedNotifications, e.plain)
		addIf(ctx, in.nixlKVExpired, k.ExpiredRequests, e.plain)
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

// loraOpts returns the attribute set of a LoRA state, rebuilt only when the
// adapters change.
func (e *PrecomputedEngine) loraOpts(l *stats.LoRA) opts {
	e.loraMu.Lock()
	defer e.loraMu.Unlock()
	if e.loraSet && e.loraLast.MaxLoRA == l.MaxLoRA &&
		slices.Equal(e.loraLast.Running, l.Running) && slices.Equal(e.loraLast.Waiting, l.Waiting) {
		return e.lora
	}
	maxLoRA, waiting, running := loraLabels(l)
	e.lora = newOpts(attribute.String(instrument.KeyMaxLoRA, maxLoRA),
		attribute.String(instrument.KeyWaitingLoRA, waiting), attribute.String(instrument.KeyRunningLoRA, running))
	e.loraLast = stats.LoRA{MaxLoRA: l.MaxLoRA, Running: slices.Clone(l.Running), Waiting: slices.Clone(l.Waiting)}
	e.loraSet = true
	return e.lora
}

// ---------------------------------------------------------------------------
// Naive: attributes built on every call.

// Naive is hand-written OpenTelemetry instrumentation that builds its
// attributes on every call with metric.WithAttributes, as most
// instrumentations do. It keeps the label values as strings.
type Naive struct {
	engines map[int]*NaiveEngine
}

// NaiveEngine records one engine's stats.
type NaiveEngine struct {
	in     *otelInstruments
	model  string
	engine string
}

// NewNaive creates the instruments on mp and the series of every engine at
// zero.
func NewNaive(mp metric.MeterProvider, ranks ...int) (*Naive, error) {
	in, err := newOTelInstruments(meter(mp))
	if err != nil {
		return nil, err
	}
	n := &Naive{engines: map[int]*NaiveEngine{}}
	ctx := context.Background()
	for _, rank := range ranks {
		e := &NaiveEngine{in: in, model: Model, engine: engineLabel(rank)}
		for _, c := range []metric.Int64Counter{in.prefixQueries, in.prefixHits, in.mmQueries, in.mmHits,
			in.preemptions, in.promptCached, in.generationTokens, in.extPrefixQueries, in.extPrefixHits,
			in.nixlFailedTransfers, in.nixlFailedNotifs, in.nixlKVExpired, in.specDrafts, in.specDraftTokens, in.specAccepted} {
			c.Add(ctx, 0, e.attrs())
		}
		for _, s := range stats.Sources() {
			in.promptTokens.Add(ctx, 0, e.attrs(attribute.String(instrument.KeySource, s.String())))
		}
		for _, r := range stats.FinishReasons() {
			in.requestSuccess.Add(ctx, 0, e.attrs(attribute.String(instrument.KeyFinishedReason, r.String())))
		}
		for i := range SpecTokens {
			in.specAcceptedPerPos.Add(ctx, 0, e.attrs(attribute.String(instrument.KeyPosition, strconv.Itoa(i))))
		}
		e.RecordScheduler(ctx, &stats.Scheduler{})
		in.cacheConfigInfo.Record(ctx, 1, metric.WithAttributes(cacheConfigAttrs(rank)...))
		recordPolicy(ctx, in, rank)
		n.engines[rank] = e
	}
	return n, nil
}

// Engine returns the engine of a rank (nil if unknown).
func (n *Naive) Engine(rank int) *NaiveEngine { return n.engines[rank] }

// attrs builds the engine's attributes plus extra ones, as an option.
func (e *NaiveEngine) attrs(extra ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append([]attribute.KeyValue{
		attribute.String(instrument.KeyModelName, e.model),
		attribute.String(instrument.KeyEngine, e.engine),
	}, extra...)...)
}

func (e *NaiveEngine) add(ctx context.Context, c metric.Int64Counter, v int64, extra ...attribute.KeyValue) {
	if v > 0 {
		c.Add(ctx, v, e.attrs(extra...))
	}
}

// RecordIteration records one step's outputs and its finished requests.
func (e *NaiveEngine) RecordIteration(ctx context.Context, it *stats.Iteration) {
	in := e.in
	e.add(ctx, in.promptTokens, it.PromptTokens.Computed, attribute.String(instrument.KeySource, stats.LocalCompute.String()))
	e.add(ctx, in.promptTokens, it.PromptTokens.LocalCacheHit, attribute.String(instrument.KeySource, stats.LocalCacheHit.String()))
	e.add(ctx, in.promptTokens, it.PromptTokens.ExternalKVTransfer, attribute.String(instrument.KeySource, stats.ExternalKVTransfer.String()))
	e.add(ctx, in.promptCached, it.PromptTokens.LocalCacheHit+it.PromptTokens.ExternalKVTransfer)
	e.add(ctx, in.generationTokens, it.GenerationTokens)
	e.add(ctx, in.preemptions, it.Preemptions)
	e.add(ctx, in.corrupted, it.CorruptedRequests)
	in.iterationTokens.Record(ctx, it.PromptTokens.Computed+it.GenerationTokens, e.attrs())
	for _, v := range it.TTFT {
		in.ttft.Record(ctx, v, e.attrs())
	}
	for _, v := range it.ITL {
		in.itl.Record(ctx, v, e.attrs())
	}
	for i := range it.Finished {
		e.RecordFinished(ctx, &it.Finished[i])
	}
}

// RecordFinished records one finished request.
func (e *NaiveEngine) RecordFinished(ctx context.Context, f *stats.FinishedRequest) {
	in := e.in
	in.requestSuccess.Add(ctx, 1, e.attrs(attribute.String(instrument.KeyFinishedReason, f.Reason.String())))
	in.requestPrompt.Record(ctx, f.PromptTokens, e.attrs())
	in.requestGeneration.Record(ctx, f.GenerationTokens, e.attrs())
	in.prefillKVComputed.Record(ctx, f.PrefillComputedTokens, e.attrs())
	in.numPreemptions.Record(ctx, f.Preemptions, e.attrs())
	if f.MaxTokens > 0 {
		in.paramsMaxTokens.Record(ctx, f.MaxTokens, e.attrs())
	}
	if f.N > 0 {
		in.paramsN.Record(ctx, f.N, e.attrs())
		in.maxGeneration.Record(ctx, f.MaxGenerationTokens, e.attrs())
	}
	in.e2e.Record(ctx, f.E2ELatency, e.attrs())
	in.tpot.Record(ctx, f.TimePerOutputToken, e.attrs())
	in.queueTime.Record(ctx, f.QueueTime, e.attrs())
	in.inferenceTime.Record(ctx, f.InferenceTime, e.attrs())
	in.prefillTime.Record(ctx, f.PrefillTime, e.attrs())
	in.decodeTime.Record(ctx, f.DecodeTime, e.attrs())
}

// RecordScheduler records one scheduler step.
func (e *NaiveEngine) RecordScheduler(ctx context.Context, s *stats.Scheduler) {
	in := e.in
	in.running.Record(ctx, s.Running, e.attrs())
	in.waiting.Record(ctx, s.WaitingCapacity+s.WaitingDeferred, e.attrs())
	in.waitingByReason.Record(ctx, s.WaitingCapacity, e.attrs(attribute.String(instrument.KeyWaitingReason, instrument.WaitingCapacity)))
	in.waitingByReason.Record(ctx, s.WaitingDeferred, e.attrs(attribute.String(instrument.KeyWaitingReason, instrument.WaitingDeferred)))
	in.kvCacheUsage.Record(ctx, s.KVCacheUsage, e.attrs())
	for _, st := range stats.SleepStates() {
		var v int64
		if st == s.SleepState {
			v = 1
		}
		in.sleepState.Record(ctx, v, e.attrs(attribute.String(instrument.KeySleepState, st.String())))
	}
	e.add(ctx, in.prefixQueries, s.PrefixCache.Queries)
	e.add(ctx, in.prefixHits, s.PrefixCache.Hits)
	e.add(ctx, in.mmQueries, s.MultimodalCache.Queries)
	e.add(ctx, in.mmHits, s.MultimodalCache.Hits)
	if c := s.ConnectorPrefixCache; c != nil {
		e.add(ctx, in.extPrefixQueries, c.Queries)
		e.add(ctx, in.extPrefixHits, c.Hits)
	}
	if sd := s.SpecDecoding; sd != nil {
		e.add(ctx, in.specDrafts, sd.Drafts)
		e.add(ctx, in.specDraftTokens, sd.DraftTokens)
		e.add(ctx, in.specAccepted, sd.AcceptedTokens)
		for i, v := range sd.AcceptedPerPosition {
			if i < SpecTokens {
				e.add(ctx, in.specAcceptedPerPos, v, attribute.String(instrument.KeyPosition, strconv.Itoa(i)))
			}
		}
	}
	if l := s.LoRA; l != nil {
		maxLoRA, waiting, running := loraLabels(l)
		in.loraInfo.Record(ctx, unixNow(), metric.WithAttributes(attribute.String(instrument.KeyMaxLoRA, maxLoRA),
			attribute.String(instrument.KeyWaitingLoRA, waiting), attribute.String(instrument.KeyRunningLoRA, running)))
	}
	if k := s.KVTransfer; k != nil {
		for _, v := range k.XferTime {
			in.nixlXferTime.Record(ctx, v, e.attrs())
		}
		for _, v := range k.PostTime {
			in.nixlPostTime.Record(ctx, v, e.attrs())
		}
		for _, v := range k.BytesTransferred {
			in.nixlBytes.Record(ctx, v, e.attrs())
		}
		for _, v := range k.NumDescriptors {
			in.nixlDescriptors.Record(ctx, v, e.attrs())
		}
		e.add(ctx, in.nixlFailedTransfers, k.FailedTransfers)
		e.add(ctx, in.nixlFailedNotifs, k.FailedNotifications)
		e.add(ctx, in.nixlKVExpired, k.ExpiredRequests)
	}
	for i := range s.Evictions {
		ev := &s.Evictions[i]
		in.kvLifetime.Record(ctx, ev.Lifetime, e.attrs())
		in.kvIdle.Record(ctx, ev.IdleBeforeEvict, e.attrs())
		for _, g := range ev.ReuseGaps {
			in.kvReuseGap.Record(ctx, g, e.attrs())
		}
	}
}
