package instrument_test

// Fuzz targets of the Recorder's entry points. Each input is recorded one to
// three times on a fresh Recorder (engines 0 and 1) with the vLLM views; after
// every call either the error matches a sentinel and the collected state is
// exactly as before, or the call recorded: then no series disappeared, no
// counter, histogram sum or count went down, nothing is NaN, and the
// families the input feeds grew by exactly the input's values.

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

var fuzzSentinels = []error{
	stats.ErrNegative, stats.ErrNotFinite, stats.ErrOutOfRange, stats.ErrOverflow,
	stats.ErrCachedExceedsPrompt, stats.ErrUnknownSource, stats.ErrUnknownFinishReason,
	stats.ErrUnknownSleepState, stats.ErrInvalidLabel, stats.ErrOutOfOrder, stats.ErrFinished,
	instrument.ErrUnknownEngine, instrument.ErrNilStats,
}

// exactValue is one collected series with its integers kept exact.
type exactValue struct {
	monotone bool    // a counter or a histogram: must never go down
	i        int64   // int64 sums, gauges and histogram sums
	f        float64 // float64 values and histogram sums
	count    uint64  // histogram observations
}

type exactState map[string]exactValue

func (s exactState) get(name string, labels ...string) exactValue { return s[series(name, labels...)] }

// collectExact reads every stream of h without converting integers to floats.
func collectExact(t testing.TB, h *harness) exactState {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	s := exactState{}
	key := func(name string, attrs attribute.Set) string {
		return name + "{" + attrs.Encoded(attribute.DefaultEncoder()) + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					s[key(m.Name, dp.Attributes)] = exactValue{monotone: d.IsMonotonic, i: dp.Value}
				}
			case metricdata.Sum[float64]:
				for _, dp := range d.DataPoints {
					s[key(m.Name, dp.Attributes)] = exactValue{monotone: d.IsMonotonic, f: dp.Value}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					s[key(m.Name, dp.Attributes)] = exactValue{i: dp.Value}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					s[key(m.Name, dp.Attributes)] = exactValue{f: dp.Value}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					s[key(m.Name, dp.Attributes)] = exactValue{monotone: true, i: dp.Sum, count: dp.Count}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					s[key(m.Name, dp.Attributes)] = exactValue{monotone: true, f: dp.Sum, count: dp.Count}
				}
			default:
				t.Fatalf("stream %s has unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return s
}

// fuzzRecord makes one call and checks the general invariants; it reports
// whether the call recorded, with the states before and after.
func fuzzRecord(t *testing.T, h *harness, call func() error) (bool, exactState, exactState) {
	t.Helper()
	before := collectExact(t, h)
	err := noPanic(t, call)
	after := collectExact(t, h)
	for k, v := range after {
		if math.IsNaN(v.f) {
			t.Fatalf("%s is NaN", k)
		}
	}
	if err != nil {
		matched := false
		for _, s := range fuzzSentinels {
			matched = matched || errors.Is(err, s)
		}
		if !matched {
			t.Fatalf("error %v matches no sentinel", err)
		}
		if len(after) != len(before) {
			t.Fatalf("a failed call (%v) changed the series: %d before, %d after", err, len(before), len(after))
		}
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("a failed call (%v) changed %s: %+v, was %+v", err, k, after[k], v)
			}
		}
		return false, before, after
	}
	for k, v := range before {
		a, ok := after[k]
		if !ok {
			t.Fatalf("series %s disappeared", k)
		}
		if v.monotone && (a.i < v.i || a.f < v.f || a.count < v.count) {
			t.Fatalf("%s went down: %+v, was %+v", k, a, v)
		}
	}
	for k, v := range after {
		if v.monotone && (v.i < 0 || v.f < 0) {
			t.Fatalf("%s is negative: %+v", k, v)
		}
	}
	return true, before, after
}

// grew checks that a counter or integer histogram sum grew by want exactly,
// and a histogram's count by count (ignored for counters).
func grew(t *testing.T, before, after exactState, want int64, count uint64, name string, labels ...string) {
	t.Helper()
	b, a := before.get(name, labels...), after.get(name, labels...)
	if a.i-b.i != want || a.count-b.count != count {
		t.Fatalf("%s grew by %d (count %d), want %d (count %d)", series(name, labels...), a.i-b.i, a.count-b.count, want, count)
	}
}

func FuzzRecordIteration(f *testing.F) {
	// rank, computed, local hit, external, generation, preemptions, TTFT, ITL,
	// finish reason, prompt, finished generation, prefill computed, e2e, repeat
	f.Add(0, int64(60), int64(30), int64(10), int64(4), int64(1), 0.2, 0.02, uint8(0), int64(100), int64(10), int64(60), 1.5, uint8(0))
	f.Add(1, int64(0), int64(0), int64(3000), int64(1), int64(0), 0.5, 0.01, uint8(4), int64(3000), int64(1), int64(0), 0.6, uint8(2))
	f.Add(1, int64(-20), int64(100), int64(20), int64(1), int64(0), 0.1, 0.1, uint8(1), int64(100), int64(1), int64(0), 0.2, uint8(0))
	f.Add(0, int64(math.MaxInt64), int64(0), int64(0), int64(1), int64(0), 0.1, 0.1, uint8(0), int64(1), int64(1), int64(0), 0.1, uint8(0))
	f.Add(0, int64(0), int64(0), int64(0), int64(math.MaxInt64/2+1), int64(0), 0.1, 0.1, uint8(0), int64(1), int64(1), int64(0), 0.1, uint8(1))
	f.Add(2, int64(1), int64(1), int64(1), int64(1), int64(1), math.NaN(), math.Inf(1), uint8(9), int64(-1), int64(2), int64(3), -1.0, uint8(0))
	f.Add(-1, int64(0), int64(0), int64(0), int64(0), int64(0), 0.0, 0.0, uint8(0), int64(0), int64(0), int64(0), 0.0, uint8(0))
	f.Fuzz(func(t *testing.T, rank int, computed, localHit, external, gen, preemptions int64, ttft, itl float64,
		reason uint8, prompt, fgen, fcomputed int64, e2e float64, repeat uint8) {
		h := newHarness(t, instrument.WithEngines(0, 1))
		it := stats.Iteration{
			PromptTokens:     stats.PromptTokens{Computed: computed, LocalCacheHit: localHit, ExternalKVTransfer: external},
			GenerationTokens: gen, Preemptions: preemptions,
			TTFT: []float64{ttft}, ITL: []float64{itl, itl},
			Finished: []stats.FinishedRequest{{Reason: stats.FinishReason(reason % 7), PromptTokens: prompt,
				GenerationTokens: fgen, PrefillComputedTokens: fcomputed, E2ELatency: e2e}},
		}
		r := engineLabels(strconv.Itoa(rank))
		for range repeat%3 + 1 {
			step := it // each step its own: a recorded Iteration is refused until Reset
			ok, before, after := fuzzRecord(t, h, func() error { return instrument.RecorderRecordIterationErr(h.rec, t.Context(), rank, &step) })
			if !ok {
				continue
			}
			if rank != 0 && rank != 1 {
				t.Fatalf("recorded on unknown engine %d", rank)
			}
			p := it.PromptTokens
			grew(t, before, after, p.Total(), 0, "vllm:prompt_tokens", r...)
			grew(t, before, after, p.Computed, 0, "vllm:prompt_tokens_by_source", append(r, "source", "local_compute")...)
			grew(t, before, after, p.LocalCacheHit, 0, "vllm:prompt_tokens_by_source", append(r, "source", "local_cache_hit")...)
			grew(t, before, after, p.ExternalKVTransfer, 0, "vllm:prompt_tokens_by_source", append(r, "source", "external_kv_transfer")...)
			grew(t, before, after, p.Cached(), 0, "vllm:prompt_tokens_cached", r...)
			grew(t, before, after, gen, 0, "vllm:generation_tokens", r...)
			grew(t, before, after, preemptions, 0, "vllm:num_preemptions", r...)
			grew(t, before, after, it.TokensDone(), 1, "vllm:iteration_tokens_total", r...)
			fin := it.Finished[0]
			grew(t, before, after, 1, 0, "vllm:request_success", append(r, "finished_reason", fin.Reason.String())...)
			grew(t, before, after, fin.PromptTokens, 1, "vllm:request_prompt_tokens", r...)
			grew(t, before, after, fin.PrefillComputedTokens, 1, "vllm:request_prefill_kv_computed_tokens", r...)
			if c := after.get("vllm:inter_token_latency_seconds", r...).count - before.get("vllm:inter_token_latency_seconds", r...).count; c != 2 {
				t.Fatalf("ITL count grew by %d, want 2", c)
			}
		}
	})
}

func FuzzRecordFinished(f *testing.F) {
	// reason, prompt, generation, prefill computed, max tokens, n, max
	// generation, e2e, queue, prefill, decode, TPOT, repeat
	f.Add(uint8(0), int64(100), int64(10), int64(60), int64(16), int64(1), int64(10), 1.5, 0.1, 0.2, 1.1, 0.1, uint8(0))
	f.Add(uint8(2), int64(20), int64(0), int64(0), int64(0), int64(0), int64(0), 0.3, 0.3, 0.0, 0.0, 0.0, uint8(2))
	f.Add(uint8(3), int64(100), int64(10), int64(101), int64(-1), int64(2), int64(9), math.NaN(), math.Inf(-1), -1.0, 0.0, 0.0, uint8(0))
	f.Add(uint8(1), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64),
		int64(math.MaxInt64), 1e308, 1e308, 1e308, 0.0, 1e308, uint8(1))
	f.Add(uint8(6), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0.0, 0.0, 0.0, 0.0, 0.0, uint8(0))
	f.Fuzz(func(t *testing.T, reason uint8, prompt, gen, computed, maxTokens, n, maxGen int64,
		e2e, queue, prefill, decode, tpot float64, repeat uint8) {
		h := newHarness(t, instrument.WithEngines(0, 1))
		e := h.engine(1)
		fr := stats.FinishedRequest{Reason: stats.FinishReason(reason % 7), PromptTokens: prompt, GenerationTokens: gen,
			PrefillComputedTokens: computed, MaxTokens: maxTokens, N: n, MaxGenerationTokens: maxGen,
			E2ELatency: e2e, QueueTime: queue, PrefillTime: prefill, InferenceTime: prefill + decode, DecodeTime: decode,
			TimePerOutputToken: tpot}
		r := engineLabels("1")
		for range repeat%3 + 1 {
			ok, before, after := fuzzRecord(t, h, func() error { return instrument.RecordFinishedErr(e, t.Context(), &fr) })
			if !ok {
				continue
			}
			grew(t, before, after, 1, 0, "vllm:request_success", append(r, "finished_reason", fr.Reason.String())...)
			grew(t, before, after, prompt, 1, "vllm:request_prompt_tokens", r...)
			grew(t, before, after, gen, 1, "vllm:request_generation_tokens", r...)
			grew(t, before, after, computed, 1, "vllm:request_prefill_kv_computed_tokens", r...)
			var once uint64
			if maxTokens > 0 {
				once = 1
			}
			grew(t, before, after, maxTokens*int64(once), once, "vllm:request_params_max_tokens", r...)
			// Not ParentPending: observed once, n = 0 as 1, max 0 as gen.
			wantMax := maxGen
			if wantMax == 0 {
				wantMax = gen
			}
			grew(t, before, after, max(n, 1), 1, "vllm:request_params_n", r...)
			grew(t, before, after, wantMax, 1, "vllm:request_max_num_generation_tokens", r...)
			for _, name := range []string{"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
				"vllm:request_decode_time_seconds", "vllm:request_time_per_output_token_seconds"} {
				if c := after.get(name, r...).count - before.get(name, r...).count; c != 1 {
					t.Fatalf("%s count grew by %d, want 1", name, c)
				}
			}
		}
	})
}

func FuzzRecordScheduler(f *testing.F) {
	// running, waiting capacity, deferred, KV usage, prefix queries, hits,
	// sleep state, connector queries, hits, accepted per position and the
	// number of positions, LoRA running adapters ('|'-separated), bytes
	// and the number of transfers, transfer time, eviction lifetime, repeat
	f.Add(int64(3), int64(2), int64(1), 0.5, int64(100), int64(40), uint8(0), int64(60), int64(10), int64(2), uint8(2),
		"sql|chat", int64(4096), uint8(1), 0.1, 2.0, uint8(0))
	f.Add(int64(0), int64(0), int64(0), 1.0, int64(0), int64(0), uint8(2), int64(0), int64(0), int64(0), uint8(0),
		"", int64(0), uint8(0), 0.0, 0.0, uint8(2))
	f.Add(int64(-1), int64(math.MaxInt64), int64(1), 1.5, int64(1), int64(2), uint8(3), int64(-1), int64(0), int64(-1), uint8(65),
		"bad\xff|", int64(-1), uint8(3), math.NaN(), math.Inf(1), uint8(0))
	f.Add(int64(1), int64(1), int64(1), 0.25, int64(math.MaxInt64), int64(math.MaxInt64), uint8(1), int64(math.MaxInt64/2+1),
		int64(0), int64(math.MaxInt64/2+1), uint8(3), "a", int64(math.MaxInt64/2+1), uint8(2), 0.5, 1e308, uint8(1))
	f.Fuzz(func(t *testing.T, running, waitCap, waitDef int64, kv float64, pq, ph int64, sleep uint8,
		cq, ch, perPos int64, positions uint8, lora string, bytes int64, transfers uint8, xfer, lifetime float64, repeat uint8) {
		h := newHarness(t, instrument.WithEngines(0, 1))
		e := h.engine(0)
		s := stats.Scheduler{Running: running, WaitingCapacity: waitCap, WaitingDeferred: waitDef, KVCacheUsage: kv,
			PrefixCache: stats.CacheQueries{Queries: pq, Hits: ph}, SleepState: stats.SleepState(sleep % 5),
			ConnectorPrefixCache: &stats.CacheQueries{Queries: cq, Hits: ch},
			SpecDecoding:         &stats.SpecDecoding{AcceptedPerPosition: make([]int64, positions%80)},
			KVTransfer:           &stats.KVTransfer{BytesTransferred: make([]int64, transfers%4), XferTime: []float64{xfer}},
			Evictions:            []stats.KVEviction{{Lifetime: lifetime}},
		}
		for i := range s.SpecDecoding.AcceptedPerPosition {
			s.SpecDecoding.AcceptedPerPosition[i] = perPos
		}
		for i := range s.KVTransfer.BytesTransferred {
			s.KVTransfer.BytesTransferred[i] = bytes
		}
		if lora != "" {
			s.LoRA = &stats.LoRA{MaxLoRA: 4, Running: strings.Split(lora, "|")}
		}
		r := engineLabels("0")
		for range repeat%3 + 1 {
			ok, before, after := fuzzRecord(t, h, func() error { return instrument.RecordSchedulerErr(e, t.Context(), &s) })
			if !ok {
				continue
			}
			for name, want := range map[string]int64{"vllm:num_requests_running": running, "vllm:num_requests_waiting": waitCap + waitDef} {
				if got := after.get(name, r...).i; got != want {
					t.Fatalf("%s = %d, want %d", name, got, want)
				}
			}
			if got := after.get("vllm:kv_cache_usage_perc", r...).f; got != kv {
				t.Fatalf("KV cache usage = %v, want %v", got, kv)
			}
			for _, st := range stats.SleepStates() {
				want := int64(0)
				if st == s.SleepState {
					want = 1
				}
				if got := after.get("vllm:engine_sleep_state", append(r, "sleep_state", st.String())...).i; got != want {
					t.Fatalf("sleep state %s = %d, want %d", st, got, want)
				}
			}
			grew(t, before, after, pq, 0, "vllm:prefix_cache_queries", r...)
			grew(t, before, after, ph, 0, "vllm:prefix_cache_hits", r...)
			grew(t, before, after, cq, 0, "vllm:external_prefix_cache_queries", r...)
			grew(t, before, after, ch, 0, "vllm:external_prefix_cache_hits", r...)
			for p := range s.SpecDecoding.AcceptedPerPosition {
				grew(t, before, after, perPos, 0, "vllm:spec_decode_num_accepted_tokens_per_pos",
					append(r, "position", strconv.Itoa(p))...)
			}
			grew(t, before, after, bytes*int64(len(s.KVTransfer.BytesTransferred)), uint64(len(s.KVTransfer.BytesTransferred)),
				"vllm:nixl_bytes_transferred", r...)
		}
	})
}
