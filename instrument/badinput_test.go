package instrument_test

// The bad-input corpus: every kind of invalid value an engine can hand the
// library, through every stats type, the request Timeline and every Recorder
// and Engine method. Each must return an error matching its sentinels, leave
// the Prometheus scrape byte for byte as it was, and never panic.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/stats"
)

// validFinished is a finished request that passes validation.
func validFinished() stats.FinishedRequest {
	return stats.FinishedRequest{Reason: stats.FinishStop, PromptTokens: 100, GenerationTokens: 10,
		PrefillComputedTokens: 60, MaxTokens: 16, N: 1, MaxGenerationTokens: 10,
		E2ELatency: 1.5, QueueTime: 0.1, PrefillTime: 0.2, InferenceTime: 1.3, DecodeTime: 1.1, TimePerOutputToken: 0.1}
}

// validIteration is an iteration with every part valid.
func validIteration() stats.Iteration {
	return stats.Iteration{
		PromptTokens:     stats.PromptTokens{Computed: 60, LocalCacheHit: 30, ExternalKVTransfer: 10},
		GenerationTokens: 4, Preemptions: 1, CorruptedRequests: 1,
		TTFT: []float64{0.2}, ITL: []float64{0.02, 0.03, 0.04},
		Finished: []stats.FinishedRequest{validFinished(), validFinished()},
	}
}

// validScheduler is a scheduler step with every optional part.
func validScheduler() stats.Scheduler {
	return stats.Scheduler{Running: 3, WaitingCapacity: 2, WaitingDeferred: 1, KVCacheUsage: 0.5,
		PrefixCache: stats.CacheQueries{Queries: 100, Hits: 40}, MultimodalCache: stats.CacheQueries{Queries: 2, Hits: 1},
		ConnectorPrefixCache: &stats.CacheQueries{Queries: 60, Hits: 10},
		SpecDecoding:         &stats.SpecDecoding{Drafts: 2, DraftTokens: 4, AcceptedTokens: 3, AcceptedPerPosition: []int64{2, 1}},
		LoRA:                 &stats.LoRA{MaxLoRA: 2, Running: []string{"a"}, Waiting: []string{"b"}},
		KVTransfer: &stats.KVTransfer{XferTime: []float64{0.1}, PostTime: []float64{0.01},
			BytesTransferred: []int64{4096}, NumDescriptors: []int64{12}, FailedTransfers: 1},
		Evictions: []stats.KVEviction{{Lifetime: 2, IdleBeforeEvict: 1, ReuseGaps: []float64{0.5}}},
	}
}

// recordTarget is one way to reach an engine: through the Recorder by rank or
// through the Engine handle.
type recordTarget struct {
	name      string
	iteration func(context.Context, *stats.Iteration) error
	finished  func(context.Context, *stats.FinishedRequest) error
	scheduler func(context.Context, *stats.Scheduler) error
}

func targets(h *harness) []recordTarget {
	e := h.engine(1)
	return []recordTarget{
		{"Recorder",
			func(ctx context.Context, it *stats.Iteration) error {
				h.rec.RecordIteration(ctx, 1, it)
				return h.refused()
			},
			func(ctx context.Context, f *stats.FinishedRequest) error {
				h.rec.RecordFinished(ctx, 1, f)
				return h.refused()
			},
			func(ctx context.Context, s *stats.Scheduler) error {
				h.rec.RecordScheduler(ctx, 1, s)
				return h.refused()
			}},
		{"Engine",
			func(ctx context.Context, it *stats.Iteration) error { e.RecordIteration(ctx, it); return h.refused() },
			func(ctx context.Context, f *stats.FinishedRequest) error {
				e.RecordFinished(ctx, f)
				return h.refused()
			},
			func(ctx context.Context, s *stats.Scheduler) error { e.RecordScheduler(ctx, s); return h.refused() }},
	}
}

// badEnv is what a case works on: a Recorder with engines 0 and 1, a KV
// connector and two speculative positions, on a provider also read by the
// Prometheus reader, with valid data already recorded through target.
type badEnv struct {
	t      testing.TB
	h      *harness
	target recordTarget
}

// badInput is one invalid input. A case with byTarget runs once through the
// Recorder and once through the Engine; prepare records valid data the case
// builds on, before the scrape taken as "before".
type badInput struct {
	name     string
	want     []error
	byTarget bool
	prepare  func(context.Context, *badEnv) error
	do       func(context.Context, *badEnv) error
	// counted marks a case whose refusal the Recorder counts
	// (instrument.NameInvalidEvents).
	counted bool
}

// recordCase returns the constructor of cases of one Record method: each
// case mutates a fresh valid input and records it through the target.
func recordCase[T any](method string, valid func() T, record func(recordTarget) func(context.Context, *T) error) func(string, error, func(*T)) badInput {
	return func(name string, want error, mutate func(*T)) badInput {
		return badInput{name: method + "/" + name, want: []error{want}, byTarget: true, counted: true,
			do: func(ctx context.Context, env *badEnv) error {
				v := valid()
				mutate(&v)
				return record(env.target)(ctx, &v)
			}}
	}
}

// The Record methods of a target, as recordCase and overflowCase take them.
var (
	viaIteration = func(r recordTarget) func(context.Context, *stats.Iteration) error { return r.iteration }
	viaFinished  = func(r recordTarget) func(context.Context, *stats.FinishedRequest) error { return r.finished }
	viaScheduler = func(r recordTarget) func(context.Context, *stats.Scheduler) error { return r.scheduler }

	iterationCase = recordCase("RecordIteration", validIteration, viaIteration)
	finishedCase  = recordCase("RecordFinished", validFinished, viaFinished)
	schedulerCase = recordCase("RecordScheduler", validScheduler, viaScheduler)
)

// overflowCase records first (valid on its own, with the data already
// recorded: a few hundred tokens), then second, whose values take a total
// since start past MaxTotal, which the SDK before 1.47 would serve rounded
// or wrapped (TestTotalsServedExactly).
func overflowCase[T any](name string, record func(recordTarget) func(context.Context, *T) error, first, second T) badInput {
	return badInput{name: "total overflow/" + name, want: []error{stats.ErrOverflow}, byTarget: true, counted: true,
		prepare: func(ctx context.Context, env *badEnv) error { v := first; return record(env.target)(ctx, &v) },
		do:      func(ctx context.Context, env *badEnv) error { v := second; return record(env.target)(ctx, &v) }}
}

// configCase builds a second Recorder on the harness's provider with opts
// (a valid model name first unless opts set another).
func configCase(name string, want []error, opts ...instrument.Option) badInput {
	return badInput{name: "NewRecorder/" + name, want: want,
		do: func(_ context.Context, env *badEnv) error {
			base := []instrument.Option{instrument.WithMeterProvider(env.h.mp), instrument.WithModelName("other-model")}
			r, err := instrument.NewRecorder(append(base, opts...)...)
			if r != nil {
				return fmt.Errorf("NewRecorder returned a Recorder and %v", err)
			}
			return err
		}}
}

// stepCase drives a request's Timeline as an engine does each step: events
// go into an Iteration that is recorded when every event was accepted (a
// step with a refused event records its other events and counts the
// refusal: refusal_test.go).
func stepCase(name string, want error, build func(testing.TB, *stats.Iteration) error) badInput {
	return badInput{name: "Timeline/" + name, want: []error{want},
		do: func(ctx context.Context, env *badEnv) error {
			var it stats.Iteration
			if err := build(env.t, &it); err != nil {
				return err
			}
			env.h.engine(1).RecordIteration(ctx, &it)
			return env.h.refused()
		}}
}

// statsCase builds a step's iteration with the stats helpers (SplitPrompt,
// PromptTokens.Add, Iteration.AddOutput, ...) and records it when they all
// succeed.
func statsCase(name string, want error, build func(*stats.Iteration) error) badInput {
	c := stepCase(name, want, func(_ testing.TB, it *stats.Iteration) error { return build(it) })
	c.name = "stats/" + name
	return c
}

// output and finish add one Timeline event to an iteration.
func output(it *stats.Iteration, tl *stats.Timeline, atMs int, tokens int64) error {
	o, err := tl.Output(ms(atMs), tokens)
	if err != nil {
		return err
	}
	return it.AddOutput(o)
}

func finish(it *stats.Iteration, tl *stats.Timeline, atMs int, reason stats.FinishReason) error {
	f, err := tl.Finish(ms(atMs), reason)
	if err != nil {
		return err
	}
	return it.AddFinished(f)
}

// running is a request scheduled at 10 ms that emitted a first token at 20 ms.
func running(t testing.TB) *stats.Timeline {
	tl := request(t, 100, 0, 10, 20, 0)
	if _, err := tl.Output(ms(20), 1); err != nil {
		t.Fatal(err)
	}
	return tl
}

// finished is a running request that finished at 30 ms.
func finishedRequest(t testing.TB) *stats.Timeline {
	tl := running(t)
	if _, err := tl.Finish(ms(30), stats.FinishStop); err != nil {
		t.Fatal(err)
	}
	return tl
}

// newTimelineCase starts a request with NewTimeline or NewTimelines.
func newTimelineCase(name string, want error, r stats.Request, many bool) badInput {
	return stepCase(name, want, func(t testing.TB, it *stats.Iteration) error {
		var tl *stats.Timeline
		if many {
			tl = stats.NewTimelines(r)[0]
		} else {
			tl = stats.NewTimeline(r)
		}
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Queued(r.Arrival) }), eventtest.Err(tl.Refused, func() { tl.Scheduled(r.Arrival, 0, 0) }), output(it, tl, 5, 1))
	})
}

var (
	errs         = func(e ...error) []error { return e }
	badLabel     = errs(instrument.ErrConfig, stats.ErrInvalidLabel)
	badRange     = errs(instrument.ErrConfig, stats.ErrOutOfRange)
	badConfig    = errs(instrument.ErrConfig)
	maxInt       = int64(math.MaxInt64)
	halfMaxInt   = int64(math.MaxInt64/2 + 1)
	halfMaxTotal = instrument.MaxTotal/2 + 1
)

var badInputs = []badInput{
	// RecordIteration.
	iterationCase("negative generation tokens", stats.ErrNegative, func(it *stats.Iteration) { it.GenerationTokens = -1 }),
	iterationCase("negative preemptions", stats.ErrNegative, func(it *stats.Iteration) { it.Preemptions = -2 }),
	iterationCase("negative corrupted requests", stats.ErrNegative, func(it *stats.Iteration) { it.CorruptedRequests = -1 }),
	// The shape of vLLM #36755: computed = prompt - cached gone negative
	// because more tokens were cached than the prompt has.
	iterationCase("cached exceeds prompt, computed negative", stats.ErrNegative, func(it *stats.Iteration) {
		it.PromptTokens = stats.PromptTokens{Computed: -20, LocalCacheHit: 100, ExternalKVTransfer: 20}
	}),
	iterationCase("negative local cache hits", stats.ErrNegative, func(it *stats.Iteration) { it.PromptTokens.LocalCacheHit = -1 }),
	iterationCase("negative KV transfer tokens", stats.ErrNegative, func(it *stats.Iteration) { it.PromptTokens.ExternalKVTransfer = math.MinInt64 }),
	iterationCase("prompt tokens overflow", stats.ErrOverflow, func(it *stats.Iteration) {
		it.PromptTokens = stats.PromptTokens{LocalCacheHit: maxInt, ExternalKVTransfer: 1}
	}),
	iterationCase("tokens done overflow", stats.ErrOverflow, func(it *stats.Iteration) {
		it.PromptTokens, it.GenerationTokens = stats.PromptTokens{Computed: maxInt}, 1
	}),
	iterationCase("NaN TTFT", stats.ErrNotFinite, func(it *stats.Iteration) { it.TTFT = []float64{0.1, math.NaN()} }),
	iterationCase("+Inf TTFT", stats.ErrNotFinite, func(it *stats.Iteration) { it.TTFT[0] = math.Inf(1) }),
	iterationCase("negative TTFT", stats.ErrNegative, func(it *stats.Iteration) { it.TTFT[0] = -1e-9 }),
	iterationCase("+Inf ITL", stats.ErrNotFinite, func(it *stats.Iteration) { it.ITL[2] = math.Inf(1) }),
	iterationCase("-Inf ITL", stats.ErrNotFinite, func(it *stats.Iteration) { it.ITL[1] = math.Inf(-1) }),
	iterationCase("negative ITL", stats.ErrNegative, func(it *stats.Iteration) { it.ITL[0] = -0.01 }),
	// Everything valid up to the second finished request: nothing at all may be recorded.
	iterationCase("later finished request has unknown reason", stats.ErrUnknownFinishReason,
		func(it *stats.Iteration) { it.Finished[1].Reason = stats.FinishReason(9) }),
	iterationCase("later finished request has NaN latency", stats.ErrNotFinite,
		func(it *stats.Iteration) { it.Finished[1].E2ELatency = math.NaN() }),
	iterationCase("finished request computed more than its prompt", stats.ErrOutOfRange,
		func(it *stats.Iteration) { it.Finished[0].PrefillComputedTokens = 101 }),
	{name: "RecordIteration/nil", want: errs(instrument.ErrNilStats), byTarget: true,
		do: func(ctx context.Context, env *badEnv) error { return env.target.iteration(ctx, nil) }},

	// RecordFinished.
	finishedCase("unknown finish reason", stats.ErrUnknownFinishReason, func(f *stats.FinishedRequest) { f.Reason = 5 }),
	finishedCase("negative prompt tokens", stats.ErrNegative, func(f *stats.FinishedRequest) { f.PromptTokens = -1 }),
	finishedCase("negative generation tokens", stats.ErrNegative, func(f *stats.FinishedRequest) { f.GenerationTokens = -1 }),
	finishedCase("negative prefill computed tokens", stats.ErrNegative, func(f *stats.FinishedRequest) { f.PrefillComputedTokens = -1 }),
	finishedCase("negative max tokens", stats.ErrNegative, func(f *stats.FinishedRequest) { f.MaxTokens = -16 }),
	finishedCase("negative n", stats.ErrNegative, func(f *stats.FinishedRequest) { f.N = -1 }),
	finishedCase("computed exceeds prompt", stats.ErrOutOfRange, func(f *stats.FinishedRequest) { f.PrefillComputedTokens = 101 }),
	finishedCase("parent max below own tokens", stats.ErrOutOfRange, func(f *stats.FinishedRequest) { f.MaxGenerationTokens = 9 }),
	finishedCase("parent max of an n = 1 request above its own tokens", stats.ErrOutOfRange, func(f *stats.FinishedRequest) { f.N, f.MaxGenerationTokens = 0, 11 }),
	finishedCase("NaN e2e latency", stats.ErrNotFinite, func(f *stats.FinishedRequest) { f.E2ELatency = math.NaN() }),
	finishedCase("-Inf queue time", stats.ErrNotFinite, func(f *stats.FinishedRequest) { f.QueueTime = math.Inf(-1) }),
	finishedCase("+Inf inference time", stats.ErrNotFinite, func(f *stats.FinishedRequest) { f.InferenceTime = math.Inf(1) }),
	finishedCase("negative prefill time", stats.ErrNegative, func(f *stats.FinishedRequest) { f.PrefillTime = -0.5 }),
	finishedCase("negative decode time", stats.ErrNegative, func(f *stats.FinishedRequest) { f.DecodeTime = -1 }),
	finishedCase("NaN time per output token", stats.ErrNotFinite, func(f *stats.FinishedRequest) { f.TimePerOutputToken = math.NaN() }),
	{name: "RecordFinished/nil", want: errs(instrument.ErrNilStats), byTarget: true,
		do: func(ctx context.Context, env *badEnv) error { return env.target.finished(ctx, nil) }},

	// RecordScheduler.
	schedulerCase("negative running", stats.ErrNegative, func(s *stats.Scheduler) { s.Running = -1 }),
	schedulerCase("negative waiting for capacity", stats.ErrNegative, func(s *stats.Scheduler) { s.WaitingCapacity = -3 }),
	schedulerCase("negative deferred", stats.ErrNegative, func(s *stats.Scheduler) { s.WaitingDeferred = -1 }),
	schedulerCase("waiting overflows", stats.ErrOverflow, func(s *stats.Scheduler) { s.WaitingCapacity, s.WaitingDeferred = maxInt, 1 }),
	schedulerCase("KV cache usage 1.5", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.KVCacheUsage = 1.5 }),
	schedulerCase("NaN KV cache usage", stats.ErrNotFinite, func(s *stats.Scheduler) { s.KVCacheUsage = math.NaN() }),
	schedulerCase("+Inf KV cache usage", stats.ErrNotFinite, func(s *stats.Scheduler) { s.KVCacheUsage = math.Inf(1) }),
	schedulerCase("negative KV cache usage", stats.ErrNegative, func(s *stats.Scheduler) { s.KVCacheUsage = -0.1 }),
	schedulerCase("negative prefix queries", stats.ErrNegative, func(s *stats.Scheduler) { s.PrefixCache.Queries = -1 }),
	schedulerCase("more prefix hits than queries", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.PrefixCache.Hits = 101 }),
	schedulerCase("negative multimodal queries", stats.ErrNegative, func(s *stats.Scheduler) { s.MultimodalCache.Queries = -1 }),
	schedulerCase("more multimodal hits than queries", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.MultimodalCache.Hits = 3 }),
	schedulerCase("unknown sleep state", stats.ErrUnknownSleepState, func(s *stats.Scheduler) { s.SleepState = 3 }),
	schedulerCase("negative connector hits", stats.ErrNegative, func(s *stats.Scheduler) { s.ConnectorPrefixCache.Hits = -1 }),
	schedulerCase("more connector hits than queries", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.ConnectorPrefixCache.Hits = 61 }),
	schedulerCase("negative drafts", stats.ErrNegative, func(s *stats.Scheduler) { s.SpecDecoding.Drafts = -1 }),
	schedulerCase("negative accepted per position", stats.ErrNegative,
		func(s *stats.Scheduler) { s.SpecDecoding.AcceptedPerPosition[1] = -1 }),
	schedulerCase("65 draft positions", stats.ErrOutOfRange,
		func(s *stats.Scheduler) { s.SpecDecoding.AcceptedPerPosition = make([]int64, 65) }),
	schedulerCase("invalid UTF-8 running LoRA name", stats.ErrInvalidLabel, func(s *stats.Scheduler) { s.LoRA.Running[0] = "bad\xff" }),
	schedulerCase("invalid UTF-8 waiting LoRA name", stats.ErrInvalidLabel, func(s *stats.Scheduler) { s.LoRA.Waiting[0] = "\xc3\x28" }),
	schedulerCase("empty LoRA name", stats.ErrInvalidLabel, func(s *stats.Scheduler) { s.LoRA.Waiting[0] = "" }),
	schedulerCase("negative max LoRA", stats.ErrNegative, func(s *stats.Scheduler) { s.LoRA.MaxLoRA = -1 }),
	schedulerCase("NaN transfer time", stats.ErrNotFinite, func(s *stats.Scheduler) { s.KVTransfer.XferTime[0] = math.NaN() }),
	schedulerCase("negative post time", stats.ErrNegative, func(s *stats.Scheduler) { s.KVTransfer.PostTime[0] = -1 }),
	schedulerCase("negative bytes", stats.ErrNegative, func(s *stats.Scheduler) { s.KVTransfer.BytesTransferred[0] = -1 }),
	schedulerCase("negative descriptors", stats.ErrNegative, func(s *stats.Scheduler) { s.KVTransfer.NumDescriptors[0] = -7 }),
	schedulerCase("negative failed transfers", stats.ErrNegative, func(s *stats.Scheduler) { s.KVTransfer.FailedTransfers = -1 }),
	schedulerCase("negative failed notifications", stats.ErrNegative,
		func(s *stats.Scheduler) { s.KVTransfer.FailedNotifications = -1 }),
	schedulerCase("negative expired requests", stats.ErrNegative, func(s *stats.Scheduler) { s.KVTransfer.ExpiredRequests = -1 }),
	schedulerCase("bytes of one step overflow", stats.ErrOverflow,
		func(s *stats.Scheduler) { s.KVTransfer.BytesTransferred = []int64{halfMaxInt, halfMaxInt} }),
	schedulerCase("NaN block lifetime", stats.ErrNotFinite, func(s *stats.Scheduler) { s.Evictions[0].Lifetime = math.NaN() }),
	schedulerCase("negative idle before evict", stats.ErrNegative, func(s *stats.Scheduler) { s.Evictions[0].IdleBeforeEvict = -2 }),
	schedulerCase("infinite reuse gap", stats.ErrNotFinite, func(s *stats.Scheduler) { s.Evictions[0].ReuseGaps[0] = math.Inf(1) }),
	{name: "RecordScheduler/nil", want: errs(instrument.ErrNilStats), byTarget: true,
		do: func(ctx context.Context, env *badEnv) error { return env.target.scheduler(ctx, nil) }},

	// Values valid one by one whose total since start passes MaxTotal.
	overflowCase("generation tokens", viaIteration,
		stats.Iteration{GenerationTokens: instrument.MaxTotal - 1000}, stats.Iteration{GenerationTokens: 1001}),
	// Each source series would fit; vllm:prompt_tokens, their sum, would not.
	overflowCase("prompt tokens over sources", viaIteration,
		stats.Iteration{PromptTokens: stats.PromptTokens{LocalCacheHit: halfMaxTotal}},
		stats.Iteration{PromptTokens: stats.PromptTokens{ExternalKVTransfer: halfMaxTotal}}),
	overflowCase("iteration tokens histogram sum", viaIteration,
		stats.Iteration{PromptTokens: stats.PromptTokens{Computed: halfMaxTotal}}, stats.Iteration{GenerationTokens: halfMaxTotal}),
	overflowCase("request prompt tokens histogram sum", viaFinished,
		stats.FinishedRequest{PromptTokens: instrument.MaxTotal - 1000}, stats.FinishedRequest{PromptTokens: 1001}),
	overflowCase("prefix cache queries", viaScheduler,
		stats.Scheduler{PrefixCache: stats.CacheQueries{Queries: instrument.MaxTotal - 1000}},
		stats.Scheduler{PrefixCache: stats.CacheQueries{Queries: 1001}}),

	// Engines the Recorder does not serve, and handles not made by it.
	{name: "Recorder.RecordIteration/unknown rank", want: errs(instrument.ErrUnknownEngine),
		do: func(ctx context.Context, env *badEnv) error {
			return instrument.RecorderRecordIterationErr(env.h.rec, ctx, 2, &stats.Iteration{GenerationTokens: 1})
		}},
	{name: "Recorder.RecordFinished/unknown rank", want: errs(instrument.ErrUnknownEngine),
		do: func(ctx context.Context, env *badEnv) error {
			return instrument.RecorderRecordFinishedErr(env.h.rec, ctx, 7, &stats.FinishedRequest{})
		}},
	{name: "Recorder.RecordScheduler/negative rank", want: errs(instrument.ErrUnknownEngine),
		do: func(ctx context.Context, env *badEnv) error {
			return instrument.RecorderRecordSchedulerErr(env.h.rec, ctx, -1, &stats.Scheduler{Running: 1})
		}},
	{name: "Recorder.Engine/rank MaxInt", want: errs(instrument.ErrUnknownEngine),
		do: func(context.Context, *badEnv) error { return engineErr(testRecorder.Engine(math.MaxInt)) }},
	{name: "Recorder.Engine/nil Recorder", want: errs(instrument.ErrUnknownEngine),
		do: func(context.Context, *badEnv) error { return engineErr((*instrument.Recorder)(nil).Engine(0)) }},
	{name: "Engine.RecordIteration/zero Engine", want: errs(instrument.ErrUnknownEngine),
		do: func(ctx context.Context, env *badEnv) error {
			var e instrument.Engine
			return instrument.RecordIterationErr(&e, ctx, &stats.Iteration{GenerationTokens: 1})
		}},
	{name: "Engine.RecordScheduler/nil Engine", want: errs(instrument.ErrUnknownEngine),
		do: func(ctx context.Context, env *badEnv) error {
			return instrument.RecordSchedulerErr((*instrument.Engine)(nil), ctx, &stats.Scheduler{})
		}},
	{name: "Engine.RecordFinished/nil Engine", want: errs(instrument.ErrUnknownEngine),
		do: func(ctx context.Context, env *badEnv) error {
			return instrument.RecordFinishedErr((*instrument.Engine)(nil), ctx, &stats.FinishedRequest{})
		}},

	// NewRecorder on the same provider.
	configCase("empty model name", badLabel, instrument.WithModelName("")),
	configCase("model name too long", badLabel, instrument.WithModelName(strings.Repeat("m", instrument.MaxModelNameLen+1))),
	configCase("model name not UTF-8", badLabel, instrument.WithModelName("llama\xff")),
	configCase("no engines", badConfig, instrument.WithEngines()),
	configCase("repeated engine ranks", badConfig, instrument.WithEngines(0, 1, 0)),
	configCase("negative engine rank", errs(instrument.ErrConfig, stats.ErrNegative), instrument.WithEngines(-1)),
	configCase("max model len 0", badRange, instrument.WithMaxModelLen(0)),
	configCase("negative max model len", badRange, instrument.WithMaxModelLen(-4096)),
	configCase("negative speculative tokens", badRange, instrument.WithSpecDecoding(-1)),
	configCase("too many speculative tokens", badRange, instrument.WithSpecDecoding(1000)),
	configCase("reserved attribute engine", badLabel, instrument.WithAttributes(attribute.String("engine", "x"))),
	configCase("reserved attribute model_name", badLabel, instrument.WithAttributes(attribute.String("model_name", "x"))),
	configCase("reserved attribute source", badLabel, instrument.WithAttributes(attribute.String("source", "x"))),
	// The GenAI client metrics' own: a constant attribute would be replaced there.
	configCase("reserved attribute server.address", badLabel, instrument.WithAttributes(attribute.String("server.address", "x"))),
	configCase("attribute exported as server_port", badLabel, instrument.WithAttributes(attribute.String("server_port", "8000"))),
	configCase("empty attribute key", badLabel, instrument.WithAttributes(attribute.String("", "x"))),
	configCase("attribute value not UTF-8", badLabel, instrument.WithAttributes(attribute.String("role", "\xff"))),
	configCase("attribute key not UTF-8", badLabel, instrument.WithAttributes(attribute.String("role\xff", "x"))),
	// Keys the Prometheus exporter would turn into a reserved or taken label name.
	configCase("attribute exported as model_name", badLabel, instrument.WithAttributes(attribute.String("model.name", "x"))),
	configCase("attribute exported as model_name again", badLabel, instrument.WithAttributes(attribute.String("model__name", "x"))),
	configCase("attribute exported as error_type", badLabel, instrument.WithAttributes(attribute.String("error-type", "x"))),
	configCase("attribute le", badLabel, instrument.WithAttributes(attribute.String("le", "x"))),
	configCase("attribute quantile", badLabel, instrument.WithAttributes(attribute.String("quantile", "x"))),
	configCase("attribute with reserved prefix", badLabel, instrument.WithAttributes(attribute.String("__name__", "x"))),
	configCase("attribute of underscores only", badLabel, instrument.WithAttributes(attribute.String("._", "x"))),
	configCase("two attributes with one label", badLabel,
		instrument.WithAttributes(attribute.String("k8s.pod", "a"), attribute.String("k8s_pod", "b"))),
	configCase("cache config keys with one label", badLabel,
		instrument.WithCacheConfig(stats.CacheConfig{"block_size": "16", "block__size": "32"})),
	configCase("cache config key with a space", badLabel, instrument.WithCacheConfig(stats.CacheConfig{"block size": "16"})),
	configCase("cache config key engine", badLabel, instrument.WithCacheConfig(stats.CacheConfig{"engine": "0"})),
	configCase("cache config key reserved prefix", badLabel, instrument.WithCacheConfig(stats.CacheConfig{"__name__": "x"})),
	configCase("cache config value not UTF-8", badLabel, instrument.WithCacheConfig(stats.CacheConfig{"block_size": "\xff"})),
	configCase("empty gen_ai operation", badLabel, instrument.WithGenAI("", "self_hosted")),
	configCase("gen_ai provider not UTF-8", badLabel, instrument.WithGenAI("chat", "\xff")),
	// The harness's Recorder already exports model, engines 0 and 1.
	configCase("duplicate series", errs(instrument.ErrDuplicateSeries),
		instrument.WithModelName(model), instrument.WithEngines(1, 2)),

	// Prefill accounting and iteration building (package stats).
	statsCase("SplitPrompt cached exceeds prompt", stats.ErrCachedExceedsPrompt, func(it *stats.Iteration) error {
		p, err := stats.SplitPrompt(100, 80, 21)
		it.PromptTokens = p
		return err
	}),
	statsCase("SplitPrompt negative prompt", stats.ErrNegative, func(it *stats.Iteration) error {
		p, err := stats.SplitPrompt(-1, 0, 0)
		it.PromptTokens = p
		return err
	}),
	statsCase("SplitPrompt cached overflows", stats.ErrOverflow, func(it *stats.Iteration) error {
		p, err := stats.SplitPrompt(maxInt, maxInt, 1)
		it.PromptTokens = p
		return err
	}),
	statsCase("PromptTokens.Add overflows", stats.ErrOverflow, func(it *stats.Iteration) error {
		it.PromptTokens = stats.PromptTokens{Computed: maxInt - 1}
		return it.PromptTokens.Add(stats.PromptTokens{Computed: 2})
	}),
	statsCase("AddOutput prompt tokens on a later output", stats.ErrOutOfOrder, func(it *stats.Iteration) error {
		return it.AddOutput(stats.Output{PromptTokens: stats.PromptTokens{Computed: 5}, GenerationTokens: 1, ITL: 0.1})
	}),
	statsCase("AddOutput NaN latency", stats.ErrNotFinite, func(it *stats.Iteration) error {
		return it.AddOutput(stats.Output{First: true, GenerationTokens: 1, TTFT: math.NaN()})
	}),
	statsCase("AddOutput generation overflows", stats.ErrOverflow, func(it *stats.Iteration) error {
		it.GenerationTokens = maxInt
		return it.AddOutput(stats.Output{GenerationTokens: 1, ITL: 0.01})
	}),
	statsCase("AddFinished unknown reason", stats.ErrUnknownFinishReason, func(it *stats.Iteration) error {
		return it.AddFinished(stats.FinishedRequest{Reason: 200})
	}),
	statsCase("unknown source", stats.ErrUnknownSource, func(*stats.Iteration) error { return stats.Source(3).Validate() }),

	// Request timelines.
	newTimelineCase("zero arrival", stats.ErrOutOfRange, stats.Request{PromptTokens: 10}, false),
	newTimelineCase("negative prompt", stats.ErrNegative, stats.Request{Arrival: t0, PromptTokens: -10}, false),
	newTimelineCase("negative max tokens", stats.ErrNegative, stats.Request{Arrival: t0, PromptTokens: 10, MaxTokens: -1}, false),
	newTimelineCase("n = 2 for one timeline", stats.ErrOutOfRange, stats.Request{Arrival: t0, PromptTokens: 10, N: 2}, false),
	newTimelineCase("negative n", stats.ErrNegative, stats.Request{Arrival: t0, PromptTokens: 10, N: -2}, true),
	newTimelineCase("n = 2^20 children", stats.ErrOutOfRange, stats.Request{Arrival: t0, PromptTokens: 10, N: 1 << 20}, true),
	stepCase("queued before arrival", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
		return eventtest.Err(tl.Refused, func() { tl.Queued(t0.Add(-time.Nanosecond)) })
	}),
	stepCase("queued twice", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		tl := request(t, 10, 0, 5, 0, 0)
		return eventtest.Err(tl.Refused, func() { tl.Queued(ms(6)) })
	}),
	stepCase("queued after scheduled", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(1), 0, 0) }), eventtest.Err(tl.Refused, func() { tl.Queued(ms(2)) }))
	}),
	stepCase("output before scheduled", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }), output(it, tl, 2, 1))
	}),
	stepCase("scheduled with cached beyond the prompt", stats.ErrCachedExceedsPrompt, func(t testing.TB, it *stats.Iteration) error {
		tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 100})
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }), eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(2), 60, 41) }), output(it, tl, 3, 1))
	}),
	stepCase("rescheduled after preemption with cached beyond the prompt", stats.ErrCachedExceedsPrompt,
		func(t testing.TB, it *stats.Iteration) error {
			tl := request(t, 100, 0, 10, 0, 0)
			if err := tl.Preempted(ms(12)); err != nil {
				t.Fatal(err)
			}
			return errors.Join(eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(15), 101, 0) }), output(it, tl, 20, 1))
		}),
	stepCase("scheduled with negative cached", stats.ErrNegative, func(t testing.TB, it *stats.Iteration) error {
		tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 100})
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }), eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(2), 0, -1) }), output(it, tl, 3, 1))
	}),
	stepCase("zero tokens output", stats.ErrOutOfRange, func(t testing.TB, it *stats.Iteration) error {
		return output(it, request(t, 10, 0, 5, 0, 0), 6, 0)
	}),
	stepCase("negative tokens output", stats.ErrOutOfRange, func(t testing.TB, it *stats.Iteration) error {
		return output(it, running(t), 25, -3)
	}),
	stepCase("output tokens overflow", stats.ErrOverflow, func(t testing.TB, it *stats.Iteration) error {
		return output(it, running(t), 25, maxInt)
	}),
	stepCase("output earlier than the previous event", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		return output(it, running(t), 19, 1)
	}),
	stepCase("preempted while queued", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }), tl.Preempted(ms(2)))
	}),
	stepCase("output after finish", stats.ErrFinished, func(t testing.TB, it *stats.Iteration) error {
		return output(it, finishedRequest(t), 40, 1)
	}),
	stepCase("finished twice", stats.ErrFinished, func(t testing.TB, it *stats.Iteration) error {
		return finish(it, finishedRequest(t), 40, stats.FinishStop)
	}),
	stepCase("scheduled after finish", stats.ErrFinished, func(t testing.TB, it *stats.Iteration) error {
		tl := finishedRequest(t)
		return eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(40), 0, 0) })
	}),
	stepCase("finish with unknown reason", stats.ErrUnknownFinishReason, func(t testing.TB, it *stats.Iteration) error {
		return finish(it, running(t), 30, stats.FinishReason(7))
	}),
	stepCase("finish earlier than the previous event", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		return finish(it, running(t), 15, stats.FinishStop)
	}),
	stepCase("zero Timeline", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		var tl stats.Timeline
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }), eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(2), 0, 0) }), output(it, &tl, 3, 1), finish(it, &tl, 4, stats.FinishStop))
	}),
	stepCase("nil Timeline", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
		var tl *stats.Timeline
		return errors.Join(eventtest.Err(tl.Refused, func() { tl.Queued(ms(1)) }), tl.Preempted(ms(2)), output(it, tl, 3, 1), finish(it, tl, 4, stats.FinishStop))
	}),
}

// testRecorder is a Recorder on a no-op provider for cases that only look
// engines up.
var testRecorder, _ = instrument.NewRecorder(instrument.WithMeterProvider(noop.NewMeterProvider()),
	instrument.WithModelName(model), instrument.WithEngines(0, 1))

func engineErr(e *instrument.Engine, err error) error {
	if e != nil {
		return fmt.Errorf("got an Engine and %v", err)
	}
	return err
}

// TestBadInputCorpus checks every case of the corpus on a fresh Recorder that
// already holds data (so that a reset would show too): the error matches
// each wanted sentinel, the scrape after is byte for byte the scrape before,
// and nothing panics.
//
// Under the race detector, the cases package sample keeps (the first of
// each method and wanted error, and every sample.Every-th), all of them
// without: a case is refused on the test's goroutine, and what a scrape
// runs on goroutines of its own is the same for every case.
func TestBadInputCorpus(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range badInputs {
		if seen[c.name] {
			t.Fatalf("case %q appears twice", c.name)
		}
		seen[c.name] = true
	}
	runs := 0
	cases := sample.UnderRace(badInputs, func(c *badInput) string {
		method, _, _ := strings.Cut(c.name, "/")
		return fmt.Sprint(method, c.want)
	})
	for _, c := range cases {
		names := []string{""}
		if c.byTarget {
			names = []string{"Recorder", "Engine"}
		}
		for i, via := range names {
			runs++
			t.Run(strings.TrimSuffix(c.name+"/"+via, "/"), func(t *testing.T) {
				h := newScrapedHarness(t, instrument.WithEngines(0, 1), instrument.WithKVConnector(), instrument.WithSpecDecoding(2))
				ctx := t.Context()
				for _, r := range targets(h) {
					it, s := validIteration(), validScheduler()
					if err := errors.Join(r.iteration(ctx, &it), r.scheduler(ctx, &s)); err != nil {
						t.Fatal(err)
					}
				}
				env := &badEnv{t: t, h: h, target: targets(h)[i]}
				if c.prepare != nil {
					if err := c.prepare(ctx, env); err != nil {
						t.Fatalf("prepare: %v", err)
					}
				}
				beforeFull := h.scrape()
				before := withoutInvalid(beforeFull)
				err := noPanic(t, func() error { return c.do(ctx, env) })
				if err == nil {
					t.Fatal("no error")
				}
				for _, want := range c.want {
					if !errors.Is(err, want) {
						t.Errorf("error %q does not match %q", err, want)
					}
				}
				full := h.scrape()
				if after := withoutInvalid(full); after != before {
					t.Errorf("the bad input changed the scrape:\nbefore:\n%s\nafter:\n%s", before, after)
				}
				if c.counted && invalidLines(full) == invalidLines(beforeFull) {
					t.Errorf("the refusal is not counted:\n%s", invalidLines(full))
				}
			})
		}
	}
	if len(badInputs) < 50 {
		t.Errorf("the corpus has %d distinct inputs, want at least 50", len(badInputs))
	}
	t.Logf("bad-input corpus: %d distinct inputs, %d of them run (race detector: %v), %d runs", len(badInputs), len(cases), sample.Race, runs)
}

// withoutInvalid returns a scrape without the invalid events family, the one
// a refusal adds to.
func withoutInvalid(scrape string) string {
	var keep []string
	for _, line := range strings.SplitAfter(scrape, "\n") {
		if !strings.Contains(line, "infermetrics_invalid_events") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// invalidLines returns the invalid events series of a scrape.
func invalidLines(scrape string) string {
	var keep []string
	for _, line := range strings.SplitAfter(scrape, "\n") {
		if strings.HasPrefix(line, "infermetrics_invalid_events_total{") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// noPanic runs f, failing the test if it panics.
func noPanic(t *testing.T, f func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("panic: %v", p)
		}
	}()
	return f()
}

// The limits themselves are accepted.
func TestNewRecorderAtLimits(t *testing.T) {
	r, err := instrument.NewRecorder(instrument.WithMeterProvider(noop.NewMeterProvider()),
		instrument.WithModelName(strings.Repeat("m", instrument.MaxModelNameLen)), instrument.WithMaxModelLen(1),
		instrument.WithEngines(3, 0), instrument.WithCacheConfig(stats.CacheConfig{}), instrument.WithSpecDecoding(64),
		instrument.WithAttributes(attribute.String("k8s.pod.name", "p"), attribute.String("role", "decode"),
			attribute.String("1st", "x"), attribute.String("engine.group", "g")))
	if err != nil || r == nil {
		t.Errorf("NewRecorder at the limits = %v, %v; want a Recorder", r, err)
	}
}

// Values up to the limits record: MaxTotal in one step, 64 draft positions.
func TestRecordAtLimits(t *testing.T) {
	h := newScrapedHarness(t, instrument.WithEngines(0))
	ctx := t.Context()
	e := h.engine(0)
	e.RecordIteration(ctx, &stats.Iteration{GenerationTokens: instrument.MaxTotal})
	e.RecordScheduler(ctx, &stats.Scheduler{PrefixCache: stats.CacheQueries{Queries: instrument.MaxTotal, Hits: instrument.MaxTotal},
		SpecDecoding: &stats.SpecDecoding{AcceptedPerPosition: make([]int64, 64)}})
	s := h.collect()
	checkCounter(t, s, float64(instrument.MaxTotal), "vllm:generation_tokens", engineLabels("0")...)
	checkCounter(t, s, float64(instrument.MaxTotal), "vllm:prefix_cache_hits", engineLabels("0")...)
	// The next token would pass the total: refused, and the total stays.
	e.RecordIteration(ctx, &stats.Iteration{GenerationTokens: 1})
	if err := h.refused(); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("one more token: %v, want ErrOverflow", err)
	}
	checkCounter(t, h.collect(), float64(instrument.MaxTotal), "vllm:generation_tokens", engineLabels("0")...)
}

// Every total stops at instrument.MaxTotal, which every OpenTelemetry SDK
// go.mod allows serves exactly: sdk/metric 1.44 to 1.46 read an int64 sum
// through a float64 (open-telemetry/opentelemetry-go#8981), so a counter
// above 2^53 was rounded and one at math.MaxInt64 served negative. A
// counter and an integer histogram's sum at MaxTotal, and a counter at
// MaxTotal - 1, are served exactly, in the SDK's int64 points and in the
// scrape; one more is refused (stats.ErrOverflow), as is
// Synthetic.AddCount(NameGenerationTokens, math.MaxInt64).
func TestTotalsServedExactly(t *testing.T) {
	h := newScrapedHarness(t, instrument.WithEngines(0, 1))
	ctx := t.Context()
	e0, e1 := h.engine(0), h.engine(1)
	e0.RecordIteration(ctx, &stats.Iteration{GenerationTokens: instrument.MaxTotal})
	e1.RecordIteration(ctx, &stats.Iteration{GenerationTokens: instrument.MaxTotal - 1})
	e0.RecordFinished(ctx, &stats.FinishedRequest{PromptTokens: instrument.MaxTotal})
	if err := h.refused(); err != nil {
		t.Fatalf("values up to MaxTotal refused: %v", err)
	}
	got := collectExact(t, h)
	for _, c := range []struct {
		name, engine string
		want         int64
	}{
		{"vllm:generation_tokens", "0", instrument.MaxTotal},
		{"vllm:generation_tokens", "1", instrument.MaxTotal - 1},
		{"vllm:request_prompt_tokens", "0", instrument.MaxTotal}, // the histogram's sum
	} {
		if v := got.get(c.name, engineLabels(c.engine)...).i; v != c.want {
			t.Errorf("%s engine %s served %d, want %d (sdk/metric %s)", c.name, c.engine, v, c.want, sdk.Version())
		}
	}
	body := h.scrape()
	for _, line := range []string{
		`vllm:generation_tokens_total{engine="0",model_name="llama-3.1-8b"} ` + fmt.Sprint(float64(instrument.MaxTotal)),
		`vllm:request_prompt_tokens_sum{engine="0",model_name="llama-3.1-8b"} ` + fmt.Sprint(float64(instrument.MaxTotal)),
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("the scrape lacks %q", line)
		}
	}

	e0.RecordIteration(ctx, &stats.Iteration{GenerationTokens: 1})
	if err := h.refused(); !errors.Is(err, stats.ErrOverflow) {
		t.Errorf("one token past MaxTotal: %v, want ErrOverflow", err)
	}
	syn := newHarness(t).engine(0).Synthetic()
	for _, n := range []int64{math.MaxInt64, instrument.MaxTotal + 1} {
		if err := syn.AddCount(instrument.NameGenerationTokens, n); !errors.Is(err, stats.ErrOverflow) {
			t.Errorf("Synthetic.AddCount(NameGenerationTokens, %d) = %v, want ErrOverflow", n, err)
		}
	}
}

// More bad inputs: durations above stats.MaxSeconds and the accounting
// guarantees of speculative decoding, KV eviction and LoRA states.
func init() {
	badInputs = append(badInputs,
		finishedCase("absurd e2e latency", stats.ErrOutOfRange, func(f *stats.FinishedRequest) { f.E2ELatency = 1e308 }),
		finishedCase("TPOT above MaxSeconds", stats.ErrOutOfRange, func(f *stats.FinishedRequest) { f.TimePerOutputToken = 2e9 }),
		finishedCase("parent pending on an n = 1 request", stats.ErrOutOfRange, func(f *stats.FinishedRequest) {
			f.N, f.MaxGenerationTokens, f.ParentPending = 1, 0, true
		}),
		iterationCase("absurd TTFT", stats.ErrOutOfRange, func(it *stats.Iteration) { it.TTFT = append(it.TTFT, 1e300) }),
		schedulerCase("accepted more tokens than drafted", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.SpecDecoding.AcceptedTokens = 5 }),
		schedulerCase("a position accepted more than the drafts", stats.ErrOutOfRange, func(s *stats.Scheduler) {
			s.SpecDecoding.AcceptedPerPosition = []int64{3, 0}
		}),
		schedulerCase("positions not summing to accepted tokens", stats.ErrOutOfRange, func(s *stats.Scheduler) {
			s.SpecDecoding.AcceptedPerPosition = []int64{2, 2}
		}),
		schedulerCase("idle before evict above lifetime", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.Evictions[0].IdleBeforeEvict = 3 }),
		schedulerCase("reuse gap above lifetime", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.Evictions[0].ReuseGaps[0] = 2.5 }),
		schedulerCase("absurd KV block lifetime", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.Evictions[0].Lifetime = 1e308 }),
		schedulerCase("duplicate running LoRA", stats.ErrInvalidLabel, func(s *stats.Scheduler) { s.LoRA.Running = []string{"a", "a"} }),
		schedulerCase("running LoRAs above max_lora", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.LoRA.Running = []string{"a", "b", "c"} }),
		schedulerCase("10,000 waiting LoRAs", stats.ErrOutOfRange, func(s *stats.Scheduler) {
			s.LoRA.Waiting = make([]string, 10000)
			for i := range s.LoRA.Waiting {
				s.LoRA.Waiting[i] = fmt.Sprintf("adapter-%05d", i)
			}
		}),
		schedulerCase("LoRA label above MaxLoRALabelBytes", stats.ErrInvalidLabel, func(s *stats.Scheduler) {
			s.LoRA.Waiting = []string{strings.Repeat("w", stats.MaxLoRALabelBytes+1)}
		}),
		stepCase("event more than MaxSeconds after arrival", stats.ErrOutOfRange, func(t testing.TB, it *stats.Iteration) error {
			tl := request(t, 10, 0, 5, 0, 0)
			return eventtest.Err(it.Refused, func() { it.Output(tl, t0.Add(time.Duration(stats.MaxSeconds+1)*time.Second), 1) })
		}),
		stepCase("preempt before the previous event", stats.ErrOutOfOrder, func(t testing.TB, it *stats.Iteration) error {
			return eventtest.Err(it.Refused, func() { it.Preempt(running(t), ms(15)) })
		}),
	)
}

// A FinishedRequest with zero N and MaxGenerationTokens is an n = 1 request:
// request_params_n observes 1 and request_max_num_generation_tokens its own
// generation tokens. A child marked ParentPending observes neither.
func TestFinishedZeroNObservesParams(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0))
	e := h.engine(0)
	e.RecordFinished(t.Context(), &stats.FinishedRequest{})
	e.RecordFinished(t.Context(), &stats.FinishedRequest{GenerationTokens: 7})
	pending := stats.FinishedRequest{GenerationTokens: 3, N: 2, ParentPending: true}
	e.RecordFinished(t.Context(), &pending)
	s := h.collect()
	checkHistogram(t, s, 2, 2, map[int]uint64{0: 2}, "vllm:request_params_n", engineLabels("0")...)
	got := s.get(t, "vllm:request_max_num_generation_tokens", engineLabels("0")...)
	if got.count != 2 || got.sum != 7 {
		t.Errorf("request_max_num_generation_tokens = %v, want count 2 sum 7", got)
	}
	if got := s.get(t, "vllm:request_generation_tokens", engineLabels("0")...); got.count != 3 {
		t.Errorf("request_generation_tokens count = %d, want 3 (every child)", got.count)
	}
}

// Finite but absurd durations are refused: two E2E latencies of 1e308 would
// make the histogram's float64 sum +Inf forever.
func TestAbsurdDurationKeepsSumsFinite(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0))
	e := h.engine(0)
	ok := stats.FinishedRequest{E2ELatency: 2}
	e.RecordFinished(t.Context(), &ok)
	for range 2 {
		f := stats.FinishedRequest{E2ELatency: 1e308}
		if err := instrument.RecordFinishedErr(e, t.Context(), &f); !errors.Is(err, stats.ErrOutOfRange) {
			t.Errorf("E2ELatency 1e308: %v, want ErrOutOfRange", err)
		}
	}
	got := h.collect().get(t, "vllm:e2e_request_latency_seconds", engineLabels("0")...)
	if got.count != 1 || got.sum != 2 || math.IsInf(got.sum, 0) {
		t.Errorf("e2e latency = %v, want count 1 sum 2", got)
	}
}
