package instrument_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// observed is a streamed request with usage: 100 prompt tokens, 40 cached,
// 11 generated, first chunk at 0.2 s, last at 1.2 s, end at 1.25 s.
func observed() stats.ObservedRequest {
	return stats.ObservedRequest{Reason: stats.FinishStop, E2ELatency: 1.25, FirstToken: true,
		TimeToFirstToken: 0.2, TimeToLastToken: 1.2, UsageKnown: true, PromptTokens: 100,
		GenerationTokens: 11, CachedPromptTokens: 40, MaxTokens: 64}
}

func TestRecordRequest(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	ctx := t.Context()
	r := observed()
	e.RecordRequest(ctx, &r)
	decode := observed() // a P/D decode leg: its cached tokens came by KV transfer
	decode.CachedByKVTransfer = true
	e.RecordRequest(ctx, &decode)
	e.RecordChunkGap(ctx, 0.1)
	s := h.collect()
	checkPromptTokens(t, s, "0", promptTokens{total: 200, computed: 120, localHit: 40, external: 40, cached: 80})
	checkCounter(t, s, 22, "vllm:generation_tokens", engineLabels("0")...)
	checkCounter(t, s, 2, "vllm:request_success", engineLabels("0", "finished_reason", "stop")...)
	checkHistogram(t, s, 2, 2.5, map[int]uint64{4: 2}, "vllm:e2e_request_latency_seconds", engineLabels("0")...)
	checkHistogram(t, s, 2, 0.4, map[int]uint64{8: 2}, "vllm:time_to_first_token_seconds", engineLabels("0")...)
	checkHistogram(t, s, 2, 0.2, map[int]uint64{4: 2}, "vllm:request_time_per_output_token_seconds", engineLabels("0")...)
	checkHistogram(t, s, 1, 0.1, map[int]uint64{4: 1}, "vllm:inter_token_latency_seconds", engineLabels("0")...)
	checkHistogram(t, s, 2, 200, map[int]uint64{6: 2}, "vllm:request_prompt_tokens", engineLabels("0")...)
	checkHistogram(t, s, 2, 22, map[int]uint64{4: 2}, "vllm:request_generation_tokens", engineLabels("0")...)
	checkHistogram(t, s, 2, 2, map[int]uint64{0: 2}, "vllm:request_params_n", engineLabels("0")...)
	// Not observable by a front end: nothing recorded.
	for _, name := range []string{"vllm:iteration_tokens_total", "vllm:request_queue_time_seconds",
		"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
		"vllm:request_inference_time_seconds", "vllm:request_prefill_kv_computed_tokens",
		"vllm:request_num_preemptions"} {
		for k := range s {
			if strings.HasPrefix(k, name+"{") {
				t.Errorf("%s recorded by RecordRequest: %v", k, s[k])
			}
		}
	}
}

// Without usage no token family moves: nothing is invented.
func TestRecordRequestWithoutUsage(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	r := stats.ObservedRequest{Reason: stats.FinishAbort, E2ELatency: 0.5, FirstToken: true,
		TimeToFirstToken: 0.1, TimeToLastToken: 0.4}
	e.RecordRequest(t.Context(), &r)
	s := h.collect()
	checkPromptTokens(t, s, "0", promptTokens{})
	checkCounter(t, s, 0, "vllm:generation_tokens", engineLabels("0")...)
	checkCounter(t, s, 1, "vllm:request_success", engineLabels("0", "finished_reason", "abort")...)
	for k := range s {
		for _, name := range []string{"vllm:request_prompt_tokens{", "vllm:request_generation_tokens{",
			"vllm:request_time_per_output_token_seconds{"} {
			if strings.HasPrefix(k, name) {
				t.Errorf("%s recorded without usage", k)
			}
		}
	}
}

func TestRecordRequestBadInput(t *testing.T) {
	for name, c := range map[string]struct {
		change func(*stats.ObservedRequest)
		want   error
	}{
		"nan e2e":           {func(r *stats.ObservedRequest) { r.E2ELatency = math.NaN() }, stats.ErrNotFinite},
		"tokens w/o usage":  {func(r *stats.ObservedRequest) { r.UsageKnown = false }, stats.ErrOutOfRange},
		"negative":          {func(r *stats.ObservedRequest) { r.GenerationTokens = -1 }, stats.ErrNegative},
		"ttft w/o chunk":    {func(r *stats.ObservedRequest) { r.FirstToken = false }, stats.ErrOutOfRange},
		"last before first": {func(r *stats.ObservedRequest) { r.TimeToLastToken = 0.1 }, stats.ErrOutOfOrder},
		"last after end":    {func(r *stats.ObservedRequest) { r.E2ELatency = 1 }, stats.ErrOutOfOrder},
		"reason":            {func(r *stats.ObservedRequest) { r.Reason = 9 }, stats.ErrUnknownFinishReason},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			e := h.engine(0)
			r := observed()
			c.change(&r)
			if err := instrument.RecordRequestErr(e, t.Context(), &r); !errors.Is(err, c.want) {
				t.Fatalf("RecordRequest = %v, want %v", err, c.want)
			}
			s := h.collect()
			checkCounter(t, s, 0, "vllm:request_success", engineLabels("0", "finished_reason", "stop")...)
			checkPromptTokens(t, s, "0", promptTokens{})
		})
	}
	h := newHarness(t)
	e := h.engine(0)
	if err := instrument.RecordRequestErr(e, t.Context(), nil); !errors.Is(err, instrument.ErrNilStats) {
		t.Errorf("RecordRequest(nil) = %v", err)
	}
	if err := instrument.RecordChunkGapErr(e, t.Context(), -1); !errors.Is(err, stats.ErrNegative) {
		t.Errorf("RecordChunkGap(-1) = %v", err)
	}
	var zero *instrument.Engine
	if err := instrument.RequestStartedErr(zero); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("nil Engine RequestStarted = %v", err)
	}
}

// In-flight requests are vllm:num_requests_running, added to the last
// scheduler value, and never below zero.
func TestInFlight(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	for range 3 {
		e.RequestStarted()
	}
	e.RequestEnded()
	if got := h.collect().get(t, "vllm:num_requests_running", engineLabels("0")...).value; got != 2 {
		t.Errorf("running = %v, want 2", got)
	}
	for range 5 {
		_ = instrument.RequestEndedErr(e)
	}
	if got := h.collect().get(t, "vllm:num_requests_running", engineLabels("0")...).value; got != 0 {
		t.Errorf("running after more ends than starts = %v, want 0", got)
	}
}

func TestBackend(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	ctx := t.Context()
	b, err := e.Backend("10.0.0.2:8000", instrument.RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := e.Backend("10.0.0.2:8000", instrument.RoleDecode); again != b {
		t.Error("Backend builds a second handle for the same backend")
	}
	r := observed()
	b.RecordRequest(ctx, &r)
	failed := stats.ObservedRequest{Reason: stats.FinishError, E2ELatency: 0.05}
	b.RecordRequest(ctx, &failed)
	b.RecordChunkGap(ctx, stats.OperationDefault, 0.02)
	s := h.collect()
	labels := engineLabels("0", "backend", "10.0.0.2:8000", "backend.role", "decode", "server.address", "10.0.0.2", "server.port", "8000",
		"gen_ai.operation.name", "text_completion", "gen_ai.provider.name", "self_hosted", "gen_ai.request.model", model)
	checkHistogram(t, s, 1, 1.25, map[int]uint64{7: 1}, instrument.NameGenAIClientOperationDuration, labels...)
	checkHistogram(t, s, 1, 0.05, map[int]uint64{3: 1}, instrument.NameGenAIClientOperationDuration, append(labels, "error.type", "_OTHER")...)
	checkHistogram(t, s, 1, 0.2, map[int]uint64{5: 1}, instrument.NameGenAIClientTimeToFirstChunk, labels...) // le 0.32: the conventions' buckets
	checkHistogram(t, s, 1, 0.02, map[int]uint64{1: 1}, instrument.NameGenAIClientTimePerOutputChunk, labels...)
	checkHistogram(t, s, 1, 100, map[int]uint64{4: 1}, instrument.NameGenAIClientTokenUsage, append(labels, "gen_ai.token.type", "input")...)
	checkHistogram(t, s, 1, 11, map[int]uint64{2: 1}, instrument.NameGenAIClientTokenUsage, append(labels, "gen_ai.token.type", "output")...)
	// The backend's legs are not the front end's requests: no vLLM family moves.
	checkCounter(t, s, 0, "vllm:request_success", engineLabels("0", "finished_reason", "stop")...)

	if _, err := e.Backend("", ""); !errors.Is(err, stats.ErrInvalidLabel) {
		t.Errorf("Backend(\"\") = %v", err)
	}
	if _, err := e.Backend("x", "\xff"); !errors.Is(err, stats.ErrInvalidLabel) {
		t.Errorf("Backend with a non-UTF-8 role = %v", err)
	}
	var nb *instrument.Backend
	if err := instrument.RecordRequestErr(nb, ctx, &r); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("nil Backend = %v", err)
	}
}

// A front end records on every request and chunk: nothing allocates.
func TestRecordRequestDoesNotAllocate(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	ctx := t.Context()
	b, err := e.Backend("prefill-0", instrument.RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	r := observed()
	chat := observed()
	chat.Operation = stats.OperationChat
	limited := stats.ObservedRequest{Operation: stats.OperationChat, Reason: stats.FinishError, ErrorType: stats.ErrorRateLimited, E2ELatency: 0.1}
	named := observed()
	named.ResponseModel = "llama-3.1-8b-2026-01"
	for name, f := range map[string]func() error{
		"Backend.RecordRequest rate limited":   func() error { b.RecordRequest(ctx, &limited); return h.refused() },
		"Backend.RecordRequest response model": func() error { b.RecordRequest(ctx, &named); return h.refused() },
		"RecordRequest":                        func() error { e.RecordRequest(ctx, &r); return h.refused() },
		"RecordRequest chat":                   func() error { e.RecordRequest(ctx, &chat); return h.refused() },
		"Backend.RecordRequest chat":           func() error { b.RecordRequest(ctx, &chat); return h.refused() },
		"Backend.RecordChunkGap chat":          func() error { b.RecordChunkGap(ctx, stats.OperationChat, 0.01); return h.refused() },
		"RecordChunkGap":                       func() error { e.RecordChunkGap(ctx, 0.01); return h.refused() },
		"RecordAttempts":                       func() error { e.RecordAttempts(ctx, 2); return h.refused() },
		"RequestStarted":                       func() error { e.RequestStarted(); return h.refused() },
		"RequestEnded":                         func() error { e.RequestEnded(); return h.refused() },
		"Backend":                              func() error { _, err := e.Backend("prefill-0", instrument.RolePrefill); return err },
		"Backend.RecordRequest":                func() error { b.RecordRequest(ctx, &r); return h.refused() },
		"Backend.RecordChunkGap":               func() error { b.RecordChunkGap(ctx, stats.OperationDefault, 0.01); return h.refused() },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if allocs := testing.AllocsPerRun(100, func() { err = f() }); allocs != 0 || err != nil {
			t.Errorf("%s allocates %v times per call (err %v), want 0", name, allocs, err)
		}
	}
}

// Usage whose cached tokens exceed its prompt (xAI's grok through Azure AI
// Foundry reports prompt_tokens without the cached part: 10 prompt, 161
// cached, 213 completion) is recorded without the cached count, its prompt
// all computed and its generation tokens counted; the drop is counted
// (kind value_dropped) and reported, on an Engine and on a Backend. Before,
// the request was refused whole, 213 generation tokens lost.
func TestRecordRequestCachedAbovePrompt(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	b, err := e.Backend("xai", "")
	if err != nil {
		t.Fatal(err)
	}
	req := observed()
	req.PromptTokens, req.CachedPromptTokens, req.GenerationTokens = 10, 161, 213
	e.RecordRequest(t.Context(), &req)
	b.RecordRequest(t.Context(), &req)
	for family, want := range map[string]float64{
		"vllm:prompt_tokens_total":     10,
		"vllm:generation_tokens_total": 213,
		"vllm:request_success_total":   1,
	} {
		var extra []string
		if family == "vllm:request_success_total" {
			extra = []string{"finished_reason", "stop"}
		}
		if got := r.Value(family, withLabels(extra...)...); got != want {
			t.Errorf("%s = %v, want %v", family, got, want)
		}
	}
	if got := r.Value("vllm:prompt_tokens_by_source_total", withLabels("source", "local_compute")...); got != 10 {
		t.Errorf("local_compute = %v, want 10", got)
	}
	if got := r.Value("vllm:prompt_tokens_cached_total", withLabels()...); got != 0 {
		t.Errorf("prompt_tokens_cached = %v, want 0", got)
	}
	if got := r.Value(invalidFamily, withLabels("kind", "value_dropped")...); got != 2 {
		t.Errorf("value_dropped = %v, want 2 (the Engine's and the Backend's)", got)
	}
	reported := errs.Take()
	if len(reported) != 2 || !errors.Is(reported[0], stats.ErrCachedExceedsPrompt) || !errors.Is(reported[1], stats.ErrCachedExceedsPrompt) {
		t.Errorf("reported %v, want the cached count dropped twice", reported)
	}
}
