package instrument

import (
	"context"
	"fmt"
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

// maxSpecPositions bounds the draft positions given attribute sets.
const maxSpecPositions = 64

// errorTypeOther is the error.type value of requests that finished with an error.
const errorTypeOther = "_OTHER"

// measure holds one attribute set as the option slices the API takes, built
// once so that recording allocates nothing.
type measure struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newMeasure(kv ...attribute.KeyValue) measure {
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	return measure{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
}

// Engine records the stats of one data-parallel engine. Get it from
// Recorder.Engine once and keep it: its methods do no lookup. It is safe for
// concurrent use.
type Engine struct {
	inst  *instruments
	rank  int
	base  []attribute.KeyValue // model_name, engine, constant attributes
	plain measure

	bySource      [3]measure
	byReason      [5]measure // finished_reason
	latencyReason [5]measure // gen_ai attributes and error.type by finish reason
	ttft          measure    // gen_ai attributes
	waitingBy     [2]measure // capacity, deferred
	sleep         [3]measure

	positions atomic.Pointer[[]measure] // spec decode positions, grown on demand
	growMu    sync.Mutex

	loraMu   sync.Mutex
	loraLast *stats.LoRA
	lora     measure

	totalsMu sync.Mutex
	totals   [numTotals]int64 // see total

	// provider keeps the MeterProvider, whose address identifies the
	// engine's series claims, from being freed and reused while they hold.
	provider metric.MeterProvider
}

func newEngine(inst *instruments, cfg *config, rank int) *Engine {
	e := &Engine{inst: inst, rank: rank, provider: cfg.meterProvider}
	e.base = append([]attribute.KeyValue{
		attribute.String(KeyModelName, cfg.modelName),
		attribute.String(KeyEngine, engineLabel(rank)),
	}, cfg.attributes...)
	e.plain = e.with()
	for _, s := range stats.Sources() {
		e.bySource[s] = e.with(attribute.String(KeySource, s.String()))
	}
	genAI := []attribute.KeyValue{
		attribute.String(KeyGenAIOperationName, cfg.genAIOperation),
		attribute.String(KeyGenAIProviderName, cfg.genAIProvider),
		attribute.String(KeyGenAIRequestModel, cfg.modelName),
	}
	e.ttft = e.with(genAI...)
	for _, r := range stats.FinishReasons() {
		e.byReason[r] = e.with(attribute.String(KeyFinishedReason, r.String()))
		if r == stats.FinishError {
			e.latencyReason[r] = e.with(append(genAI[:3:3], attribute.String(KeyErrorType, errorTypeOther))...)
		} else {
			e.latencyReason[r] = e.ttft
		}
	}
	e.waitingBy[0] = e.with(attribute.String(KeyWaitingReason, WaitingCapacity))
	e.waitingBy[1] = e.with(attribute.String(KeyWaitingReason, WaitingDeferred))
	for _, s := range stats.SleepStates() {
		e.sleep[s] = e.with(attribute.String(KeySleepState, s.String()))
	}
	empty := []measure{}
	e.positions.Store(&empty)
	return e
}

// with returns the measure of the engine's base attributes plus kv.
func (e *Engine) with(kv ...attribute.KeyValue) measure {
	return newMeasure(append(e.base[:len(e.base):len(e.base)], kv...)...)
}

// usable reports a nil or zero Engine (ErrUnknownEngine) and nil stats
// (ErrNilStats).
func (e *Engine) usable(nilStats bool) error {
	if e == nil || e.inst == nil {
		return fmt.Errorf("%w: a nil or zero Engine (get one from Recorder.Engine)", ErrUnknownEngine)
	}
	if nilStats {
		return ErrNilStats
	}
	return nil
}

// Rank returns the engine's data-parallel rank.
func (e *Engine) Rank() int { return e.rank }

// start creates the engine's counter and gauge series at zero, as vLLM does.
func (e *Engine) start(ctx context.Context, cfg *config) {
	in := e.inst
	for _, c := range []metric.Int64Counter{in.prefixQueries, in.prefixHits, in.mmQueries, in.mmHits,
		in.preemptions, in.promptCached, in.generationTokens} {
		c.Add(ctx, 0, e.plain.add...)
	}
	for _, m := range e.bySource {
		in.promptTokens.Add(ctx, 0, m.add...)
	}
	for _, m := range e.byReason {
		in.requestSuccess.Add(ctx, 0, m.add...)
	}
	e.recordScheduler(ctx, &stats.Scheduler{})
	if cfg.kvConnector {
		for _, c := range []metric.Int64Counter{in.extPrefixQueries, in.extPrefixHits,
			in.nixlFailedTransfers, in.nixlFailedNotifs, in.nixlKVExpired} {
			c.Add(ctx, 0, e.plain.add...)
		}
	}
	if cfg.specPositions > 0 {
		for _, c := range []metric.Int64Counter{in.specDrafts, in.specDraftTokens, in.specAccepted} {
			c.Add(ctx, 0, e.plain.add...)
		}
		for _, m := range e.positionMeasures(cfg.specPositions) {
			in.specAcceptedPerPos.Add(ctx, 0, m.add...)
		}
	}
	if cfg.cacheConfig != nil {
		kv := []attribute.KeyValue{attribute.String(KeyEngine, engineLabel(e.rank))}
		for _, k := range cfg.cacheConfig.Keys() {
			kv = append(kv, attribute.String(k, cfg.cacheConfig[k]))
		}
		in.cacheConfigInfo.Record(ctx, 1, newMeasure(kv...).rec...)
	}
}

// RecordIteration records one step's outputs: prompt tokens by source, cached
// and generation tokens, preemptions, one iteration-tokens observation of
// it.TokensDone(), the TTFT and ITL values and every finished request. An
// invalid iteration is returned as an error and nothing is recorded.
func (e *Engine) RecordIteration(ctx context.Context, it *stats.Iteration) error {
	if err := e.usable(it == nil); err != nil {
		return err
	}
	if err := it.Validate(); err != nil {
		return err
	}
	var inc increments
	inc.iteration(it)
	if err := e.reserve(&inc); err != nil {
		return err
	}
	in := e.inst
	for _, s := range stats.Sources() {
		addPositive(ctx, in.promptTokens, it.PromptTokens.BySource(s), e.bySource[s])
	}
	addPositive(ctx, in.promptCached, it.PromptTokens.Cached(), e.plain)
	addPositive(ctx, in.generationTokens, it.GenerationTokens, e.plain)
	addPositive(ctx, in.preemptions, it.Preemptions, e.plain)
	addPositive(ctx, in.corrupted, it.CorruptedRequests, e.plain)
	in.iterationTokens.Record(ctx, it.TokensDone(), e.plain.rec...)
	for _, v := range it.TTFT {
		in.ttft.Record(ctx, v, e.ttft.rec...)
	}
	for _, v := range it.ITL {
		in.itl.Record(ctx, v, e.plain.rec...)
	}
	for i := range it.Finished {
		e.recordFinished(ctx, &it.Finished[i])
	}
	return nil
}

// RecordFinished records one finished request: its finish reason, token
// counts, parameters and latencies. An invalid request is returned as an
// error and nothing is recorded.
func (e *Engine) RecordFinished(ctx context.Context, f *stats.FinishedRequest) error {
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

func (e *Engine) recordFinished(ctx context.Context, f *stats.FinishedRequest) {
	in, rec := e.inst, e.plain.rec
	in.requestSuccess.Add(ctx, 1, e.byReason[f.Reason].add...)
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
	latency := e.latencyReason[f.Reason].rec
	in.e2e.Record(ctx, f.E2ELatency, latency...)
	in.tpot.Record(ctx, f.TimePerOutputToken, latency...)
	in.queueTime.Record(ctx, f.QueueTime, rec...)
	in.inferenceTime.Record(ctx, f.InferenceTime, rec...)
	in.prefillTime.Record(ctx, f.PrefillTime, rec...)
	in.decodeTime.Record(ctx, f.DecodeTime, rec...)
}

// RecordScheduler records one scheduler step: the gauges (running, waiting,
// KV cache usage, sleep state), this step's cache lookups, and the optional
// speculative decoding, LoRA, KV connector and KV residency data when present.
// An invalid step is returned as an error and nothing is recorded; so is a
// step with more than 64 speculative decoding positions.
func (e *Engine) RecordScheduler(ctx context.Context, s *stats.Scheduler) error {
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
	var inc increments
	inc.scheduler(s)
	if err := e.reserve(&inc); err != nil {
		return err
	}
	e.recordScheduler(ctx, s)
	return nil
}

func (e *Engine) recordScheduler(ctx context.Context, s *stats.Scheduler) {
	in, rec := e.inst, e.plain.rec
	in.running.Record(ctx, s.Running, rec...)
	in.waiting.Record(ctx, s.Waiting(), rec...)
	in.waitingByReason.Record(ctx, s.WaitingCapacity, e.waitingBy[0].rec...)
	in.waitingByReason.Record(ctx, s.WaitingDeferred, e.waitingBy[1].rec...)
	in.kvCacheUsage.Record(ctx, s.KVCacheUsage, rec...)
	for _, st := range stats.SleepStates() {
		var v int64
		if st == s.SleepState {
			v = 1
		}
		in.sleepState.Record(ctx, v, e.sleep[st].rec...)
	}
	addPositive(ctx, in.prefixQueries, s.PrefixCache.Queries, e.plain)
	addPositive(ctx, in.prefixHits, s.PrefixCache.Hits, e.plain)
	addPositive(ctx, in.mmQueries, s.MultimodalCache.Queries, e.plain)
	addPositive(ctx, in.mmHits, s.MultimodalCache.Hits, e.plain)
	if c := s.ConnectorPrefixCache; c != nil {
		addPositive(ctx, in.extPrefixQueries, c.Queries, e.plain)
		addPositive(ctx, in.extPrefixHits, c.Hits, e.plain)
	}
	if sd := s.SpecDecoding; sd != nil {
		addPositive(ctx, in.specDrafts, sd.Drafts, e.plain)
		addPositive(ctx, in.specDraftTokens, sd.DraftTokens, e.plain)
		addPositive(ctx, in.specAccepted, sd.AcceptedTokens, e.plain)
		positions := e.positionMeasures(len(sd.AcceptedPerPosition)) // RecordScheduler checked the length
		for i, v := range sd.AcceptedPerPosition {
			addPositive(ctx, in.specAcceptedPerPos, v, positions[i])
		}
	}
	if s.LoRA != nil {
		in.loraInfo.Record(ctx, float64(time.Now().UnixNano())/1e9, e.loraMeasure(s.LoRA).rec...)
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
		addPositive(ctx, in.nixlFailedTransfers, k.FailedTransfers, e.plain)
		addPositive(ctx, in.nixlFailedNotifs, k.FailedNotifications, e.plain)
		addPositive(ctx, in.nixlKVExpired, k.ExpiredRequests, e.plain)
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

// positionMeasures returns the measures of draft positions 0..n-1 (at most
// maxSpecPositions), building missing ones once.
func (e *Engine) positionMeasures(n int) []measure {
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

// loraMeasure returns the attribute set of a LoRA state, rebuilt only when
// the adapters change. Like vLLM's, the series carries only its three labels.
func (e *Engine) loraMeasure(l *stats.LoRA) measure {
	e.loraMu.Lock()
	defer e.loraMu.Unlock()
	if last := e.loraLast; last != nil && last.MaxLoRA == l.MaxLoRA &&
		slices.Equal(last.Running, l.Running) && slices.Equal(last.Waiting, l.Waiting) {
		return e.lora
	}
	e.lora = newMeasure(
		attribute.String(KeyMaxLoRA, strconv.FormatInt(l.MaxLoRA, 10)),
		attribute.String(KeyWaitingLoRA, strings.Join(l.Waiting, ",")),
		attribute.String(KeyRunningLoRA, strings.Join(l.Running, ",")),
	)
	e.loraLast = &stats.LoRA{MaxLoRA: l.MaxLoRA,
		Running: append([]string(nil), l.Running...), Waiting: append([]string(nil), l.Waiting...)}
	return e.lora
}

// addPositive adds v when it is above zero: the series already exist at zero.
func addPositive(ctx context.Context, c metric.Int64Counter, v int64, m measure) {
	if v > 0 {
		c.Add(ctx, v, m.add...)
	}
}
