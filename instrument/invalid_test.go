package instrument_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/infermetrics/infermetrics/instrument"
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
			func(ctx context.Context, it *stats.Iteration) error { return h.rec.RecordIteration(ctx, 1, it) },
			func(ctx context.Context, f *stats.FinishedRequest) error { return h.rec.RecordFinished(ctx, 1, f) },
			func(ctx context.Context, s *stats.Scheduler) error { return h.rec.RecordScheduler(ctx, 1, s) }},
		{"Engine", e.RecordIteration, e.RecordFinished, e.RecordScheduler},
	}
}

// invalidCase is one invalid input of one Record method.
type invalidCase struct {
	name   string
	record func(context.Context, recordTarget) error
	want   error
}

// caseMaker returns the constructor of invalid cases of one Record method:
// each case mutates a fresh valid input.
func caseMaker[T any](method string, valid func() T, record func(context.Context, recordTarget, *T) error) func(string, error, func(*T)) invalidCase {
	return func(name string, want error, mutate func(*T)) invalidCase {
		return invalidCase{method + "/" + name, func(ctx context.Context, r recordTarget) error {
			v := valid()
			mutate(&v)
			return record(ctx, r, &v)
		}, want}
	}
}

var (
	iterationCase = caseMaker("RecordIteration", validIteration,
		func(ctx context.Context, r recordTarget, it *stats.Iteration) error { return r.iteration(ctx, it) })
	finishedCase = caseMaker("RecordFinished", validFinished,
		func(ctx context.Context, r recordTarget, f *stats.FinishedRequest) error { return r.finished(ctx, f) })
	schedulerCase = caseMaker("RecordScheduler", validScheduler,
		func(ctx context.Context, r recordTarget, s *stats.Scheduler) error { return r.scheduler(ctx, s) })
)

var invalidCases = []invalidCase{
	iterationCase("negative generation tokens", stats.ErrNegative, func(it *stats.Iteration) { it.GenerationTokens = -1 }),
	iterationCase("negative preemptions", stats.ErrNegative, func(it *stats.Iteration) { it.Preemptions = -2 }),
	iterationCase("negative corrupted requests", stats.ErrNegative, func(it *stats.Iteration) { it.CorruptedRequests = -1 }),
	// The shape of vLLM #36755: computed = prompt - cached gone negative
	// because more tokens were cached than the prompt has.
	iterationCase("cached exceeds prompt", stats.ErrNegative, func(it *stats.Iteration) {
		it.PromptTokens = stats.PromptTokens{Computed: -20, LocalCacheHit: 100, ExternalKVTransfer: 20}
	}),
	iterationCase("prompt tokens overflow", stats.ErrOverflow, func(it *stats.Iteration) {
		it.PromptTokens = stats.PromptTokens{LocalCacheHit: math.MaxInt64, ExternalKVTransfer: 1}
	}),
	iterationCase("tokens done overflow", stats.ErrOverflow, func(it *stats.Iteration) {
		it.PromptTokens, it.GenerationTokens = stats.PromptTokens{Computed: math.MaxInt64}, 1
	}),
	iterationCase("NaN TTFT", stats.ErrNotFinite, func(it *stats.Iteration) { it.TTFT = []float64{0.1, math.NaN()} }),
	iterationCase("infinite ITL", stats.ErrNotFinite, func(it *stats.Iteration) { it.ITL[2] = math.Inf(1) }),
	iterationCase("negative ITL", stats.ErrNegative, func(it *stats.Iteration) { it.ITL[0] = -0.01 }),
	// Everything valid up to the second finished request: nothing at all may be recorded.
	iterationCase("later finished request has unknown reason", stats.ErrUnknownFinishReason,
		func(it *stats.Iteration) { it.Finished[1].Reason = stats.FinishReason(9) }),
	iterationCase("later finished request has NaN latency", stats.ErrNotFinite,
		func(it *stats.Iteration) { it.Finished[1].E2ELatency = math.NaN() }),

	finishedCase("unknown finish reason", stats.ErrUnknownFinishReason, func(f *stats.FinishedRequest) { f.Reason = 5 }),
	finishedCase("negative prompt tokens", stats.ErrNegative, func(f *stats.FinishedRequest) { f.PromptTokens = -1 }),
	finishedCase("negative generation tokens", stats.ErrNegative, func(f *stats.FinishedRequest) { f.GenerationTokens = -1 }),
	finishedCase("computed exceeds prompt", stats.ErrOutOfRange, func(f *stats.FinishedRequest) { f.PrefillComputedTokens = 101 }),
	finishedCase("parent max below own tokens", stats.ErrOutOfRange, func(f *stats.FinishedRequest) { f.MaxGenerationTokens = 9 }),
	finishedCase("NaN e2e latency", stats.ErrNotFinite, func(f *stats.FinishedRequest) { f.E2ELatency = math.NaN() }),
	finishedCase("infinite queue time", stats.ErrNotFinite, func(f *stats.FinishedRequest) { f.QueueTime = math.Inf(-1) }),
	finishedCase("negative decode time", stats.ErrNegative, func(f *stats.FinishedRequest) { f.DecodeTime = -1 }),
	finishedCase("NaN time per output token", stats.ErrNotFinite, func(f *stats.FinishedRequest) { f.TimePerOutputToken = math.NaN() }),

	schedulerCase("negative running", stats.ErrNegative, func(s *stats.Scheduler) { s.Running = -1 }),
	schedulerCase("negative deferred", stats.ErrNegative, func(s *stats.Scheduler) { s.WaitingDeferred = -1 }),
	schedulerCase("KV cache usage 1.5", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.KVCacheUsage = 1.5 }),
	schedulerCase("NaN KV cache usage", stats.ErrNotFinite, func(s *stats.Scheduler) { s.KVCacheUsage = math.NaN() }),
	schedulerCase("negative KV cache usage", stats.ErrNegative, func(s *stats.Scheduler) { s.KVCacheUsage = -0.1 }),
	schedulerCase("more prefix hits than queries", stats.ErrOutOfRange, func(s *stats.Scheduler) { s.PrefixCache.Hits = 101 }),
	schedulerCase("negative multimodal queries", stats.ErrNegative, func(s *stats.Scheduler) { s.MultimodalCache.Queries = -1 }),
	schedulerCase("unknown sleep state", stats.ErrUnknownSleepState, func(s *stats.Scheduler) { s.SleepState = 3 }),
	schedulerCase("negative connector hits", stats.ErrNegative, func(s *stats.Scheduler) { s.ConnectorPrefixCache.Hits = -1 }),
	schedulerCase("negative accepted per position", stats.ErrNegative,
		func(s *stats.Scheduler) { s.SpecDecoding.AcceptedPerPosition[1] = -1 }),
	schedulerCase("invalid UTF-8 LoRA name", stats.ErrInvalidLabel, func(s *stats.Scheduler) { s.LoRA.Running[0] = "bad\xff" }),
	schedulerCase("empty LoRA name", stats.ErrInvalidLabel, func(s *stats.Scheduler) { s.LoRA.Waiting[0] = "" }),
	schedulerCase("negative max LoRA", stats.ErrNegative, func(s *stats.Scheduler) { s.LoRA.MaxLoRA = -1 }),
	schedulerCase("NaN transfer time", stats.ErrNotFinite, func(s *stats.Scheduler) { s.KVTransfer.XferTime[0] = math.NaN() }),
	schedulerCase("negative bytes", stats.ErrNegative, func(s *stats.Scheduler) { s.KVTransfer.BytesTransferred[0] = -1 }),
	schedulerCase("negative failed notifications", stats.ErrNegative,
		func(s *stats.Scheduler) { s.KVTransfer.FailedNotifications = -1 }),
	schedulerCase("infinite reuse gap", stats.ErrNotFinite, func(s *stats.Scheduler) { s.Evictions[0].ReuseGaps[0] = math.Inf(1) }),
}

// TestInvalidInputRecordsNothing checks that every invalid input returns an
// error matching its sentinel and leaves every series exactly as it was.
func TestInvalidInputRecordsNothing(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1), instrument.WithKVConnector(), instrument.WithSpecDecoding(2))
	ctx := t.Context()
	// Some data first, so that a reset would show too.
	for _, r := range targets(h) {
		it, s := validIteration(), validScheduler()
		if err := r.iteration(ctx, &it); err != nil {
			t.Fatal(err)
		}
		if err := r.scheduler(ctx, &s); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range targets(h) {
		for _, c := range invalidCases {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				before := h.collect().String()
				err := c.record(ctx, r)
				if !errors.Is(err, c.want) {
					t.Errorf("error = %v, want one matching %v", err, c.want)
				}
				if after := h.collect().String(); after != before {
					t.Errorf("an invalid input changed the series:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
		}
	}
}

func TestUnknownEngine(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1))
	ctx := t.Context()
	before := h.collect().String()
	for name, err := range map[string]error{
		"RecordIteration": h.rec.RecordIteration(ctx, 2, &stats.Iteration{GenerationTokens: 1}),
		"RecordFinished":  h.rec.RecordFinished(ctx, 7, &stats.FinishedRequest{}),
		"RecordScheduler": h.rec.RecordScheduler(ctx, -1, &stats.Scheduler{Running: 1}),
	} {
		if !errors.Is(err, instrument.ErrUnknownEngine) {
			t.Errorf("%s on an unknown rank: error = %v, want ErrUnknownEngine", name, err)
		}
	}
	if e, err := h.rec.Engine(2); e != nil || !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("Engine(2) = %v, %v; want nil, ErrUnknownEngine", e, err)
	}
	if after := h.collect().String(); after != before {
		t.Errorf("recording on an unknown engine changed the series:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestNewRecorderConfigErrors(t *testing.T) {
	mp := noop.NewMeterProvider()
	// named gives the options a valid model name.
	named := func(o ...instrument.Option) []instrument.Option {
		return append([]instrument.Option{instrument.WithModelName(model)}, o...)
	}
	cases := []struct {
		name string
		opts []instrument.Option
	}{
		{"no model name", nil},
		{"empty model name", []instrument.Option{instrument.WithModelName("")}},
		{"model name too long", []instrument.Option{instrument.WithModelName(strings.Repeat("m", instrument.MaxModelNameLen+1))}},
		{"model name not UTF-8", []instrument.Option{instrument.WithModelName("llama\xff")}},
		{"no engines", named(instrument.WithEngines())},
		{"duplicate engine ranks", named(instrument.WithEngines(0, 1, 0))},
		{"negative engine rank", named(instrument.WithEngines(-1))},
		{"max model len 0", named(instrument.WithMaxModelLen(0))},
		{"negative max model len", named(instrument.WithMaxModelLen(-4096))},
		{"negative speculative tokens", named(instrument.WithSpecDecoding(-1))},
		{"too many speculative tokens", named(instrument.WithSpecDecoding(1000))},
		{"reserved attribute engine", named(instrument.WithAttributes(attribute.String("engine", "x")))},
		{"reserved attribute model_name", named(instrument.WithAttributes(attribute.String("model_name", "x")))},
		{"reserved attribute source", named(instrument.WithAttributes(attribute.String("source", "x")))},
		{"empty attribute key", named(instrument.WithAttributes(attribute.String("", "x")))},
		{"attribute value not UTF-8", named(instrument.WithAttributes(attribute.String("role", "\xff")))},
		{"attribute key not UTF-8", named(instrument.WithAttributes(attribute.String("role\xff", "x")))},
		// Keys the Prometheus exporter would turn into a reserved or taken label name.
		{"attribute exported as model_name", named(instrument.WithAttributes(attribute.String("model.name", "x")))},
		{"attribute exported as model_name again", named(instrument.WithAttributes(attribute.String("model__name", "x")))},
		{"attribute exported as error_type", named(instrument.WithAttributes(attribute.String("error-type", "x")))},
		{"attribute le", named(instrument.WithAttributes(attribute.String("le", "x")))},
		{"attribute quantile", named(instrument.WithAttributes(attribute.String("quantile", "x")))},
		{"attribute with reserved prefix", named(instrument.WithAttributes(attribute.String("__name__", "x")))},
		{"attribute of underscores only", named(instrument.WithAttributes(attribute.String("._", "x")))},
		{"two attributes with one label", named(instrument.WithAttributes(attribute.String("k8s.pod", "a"),
			attribute.String("k8s_pod", "b")))},
		{"cache config keys with one label", named(instrument.WithCacheConfig(stats.CacheConfig{"block_size": "16",
			"block__size": "32"}))},
		{"cache config key with a space", named(instrument.WithCacheConfig(stats.CacheConfig{"block size": "16"}))},
		{"cache config key engine", named(instrument.WithCacheConfig(stats.CacheConfig{"engine": "0"}))},
		{"cache config key reserved prefix", named(instrument.WithCacheConfig(stats.CacheConfig{"__name__": "x"}))},
		{"cache config value not UTF-8", named(instrument.WithCacheConfig(stats.CacheConfig{"block_size": "\xff"}))},
		{"empty gen_ai operation", named(instrument.WithGenAI("", "self_hosted"))},
		{"gen_ai provider not UTF-8", named(instrument.WithGenAI("chat", "\xff"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(mp)}, c.opts...)...)
			if r != nil || !errors.Is(err, instrument.ErrConfig) {
				t.Errorf("NewRecorder = %v, %v; want nil, ErrConfig", r, err)
			}
		})
	}
	// The limits themselves are accepted.
	r, err := instrument.NewRecorder(instrument.WithMeterProvider(mp),
		instrument.WithModelName(strings.Repeat("m", instrument.MaxModelNameLen)), instrument.WithMaxModelLen(1),
		instrument.WithEngines(3, 0), instrument.WithCacheConfig(stats.CacheConfig{}),
		instrument.WithAttributes(attribute.String("k8s.pod.name", "p"), attribute.String("role", "decode"),
			attribute.String("1st", "x"), attribute.String("engine.group", "g")))
	if err != nil || r == nil {
		t.Errorf("NewRecorder at the limits = %v, %v; want a Recorder", r, err)
	}
}
