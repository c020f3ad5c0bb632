package views_test

// Helpers shared by the tests of package views: a Recorder exported through
// the OpenTelemetry Prometheus exporter, a scrape over HTTP, its parse, and the
// fixed scenario behind the golden files.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// modelName is the served model name of every test Recorder.
const modelName = "llama-3.1-8b"

// exported is a Recorder whose MeterProvider, with the given views, is read by
// the Prometheus exporter into its own registry, without scope labels and
// target_info.
type exported struct {
	t   testing.TB
	rec *instrument.Recorder
	reg *prometheus.Registry
}

func newExported(t testing.TB, vs []sdkmetric.View, opts ...instrument.Option) *exported {
	t.Helper()
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatalf("prometheus exporter: %v", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	base := []instrument.Option{instrument.WithMeterProvider(mp), instrument.WithModelName(modelName), scenarioErrors(t)}
	rec, err := instrument.NewRecorder(append(base, opts...)...)
	if err != nil {
		t.Fatalf("NewRecorder: %v", err)
	}
	return &exported{t: t, rec: rec, reg: reg}
}

// vllmAndSemconv returns the views of VLLM and Semconv together, with their
// default options: both sets of families in one export.
func vllmAndSemconv(t testing.TB) []sdkmetric.View {
	t.Helper()
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := views.Semconv()
	if err != nil {
		t.Fatal(err)
	}
	return append(vs, sc...)
}

// scrape returns the text exposition served by promhttp for the registry.
func (x *exported) scrape() string {
	x.t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	w := httptest.NewRecorder()
	promhttp.HandlerFor(x.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(w, req)
	body, err := io.ReadAll(w.Result().Body)
	if err != nil {
		x.t.Fatalf("reading the scrape: %v", err)
	}
	if w.Code != http.StatusOK {
		x.t.Fatalf("scrape: HTTP %d: %s", w.Code, body)
	}
	return string(body)
}

// families parses a text exposition into its families by name.
func families(t testing.TB, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader([]byte(text)))
	if err != nil {
		t.Fatalf("parsing the scrape: %v\n%s", err, text)
	}
	return fams
}

// labelValue returns the value of a label of a series, "" when absent.
func labelValue(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// scenarioOptions are the Recorder options of the golden scenario.
var scenarioOptions = []instrument.Option{
	instrument.WithEngines(0, 1), instrument.WithMaxModelLen(4096), instrument.WithKVConnector(),
	instrument.WithSpecDecoding(2), instrument.WithKVConsumer(),
	instrument.WithCacheConfig(stats.CacheConfig{"block_size": "16", "num_gpu_blocks": "2048",
		"cache_dtype": "auto", "enable_prefix_caching": "True"}),
	instrument.WithKVOffloadCPU(), instrument.WithKVOffloadStoreThreshold(2),
	instrument.WithSimpleKVOffload(stats.SimpleKVOffloadConfig{Backend: "cpu", LazyOffload: true, CapacityBlocks: 8192}),
	// The scenario's corrupted requests and evictions come without their
	// options, which the Recorder reports once per engine (and counts: the
	// golden files show infermetrics_invalid_events_total); any other
	// refusal is a broken scenario.
	instrument.WithErrorHandler(func(err error) {
		if !errors.Is(err, instrument.ErrFeatureNotConfigured) {
			panic(fmt.Sprintf("the scenario's input was refused: %v", err))
		}
	}),
}

// recordScenario drives a fixed set of request timelines and scheduler steps
// on engines 0 and 1 that touches every vLLM family. Every value but the LoRA
// info gauge's (the current time) is deterministic.
func recordScenario(t testing.TB, rec *instrument.Recorder) {
	t.Helper()
	ctx := context.Background()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// newRequest returns the n timelines of a request queued at queuedMs.
	newRequest := func(prompt, maxTokens, n int64, queuedMs int) []*stats.Timeline {
		tls := stats.NewTimelines(stats.Request{Arrival: start, PromptTokens: prompt, MaxTokens: maxTokens, N: n,
			Priority: scenarioPriority[prompt]})
		err := tls[0].Err()
		must(err)
		for _, tl := range tls {
			tl.Queued(at(queuedMs))
		}
		return tls
	}
	// iteration collects the outputs and finishes of one step.
	type iteration struct {
		ms   int
		outs map[*stats.Timeline]int64
		done map[*stats.Timeline]stats.FinishReason
		it   stats.Iteration
	}
	var order []*stats.Timeline // the requests, in the order each step visits them
	record := func(rank int, steps ...iteration) {
		for _, s := range steps {
			// Outputs in a fixed order: the map is only a lookup.
			for _, tl := range order {
				if n, ok := s.outs[tl]; ok {
					o, err := tl.Output(at(s.ms), n)
					must(err)
					must(s.it.AddOutput(o))
				}
			}
			for _, tl := range order {
				if reason, ok := s.done[tl]; ok {
					f, err := tl.Finish(at(s.ms), reason)
					must(err)
					must(s.it.AddFinished(f))
				}
			}
			rec.RecordIteration(ctx, rank, &s.it)
		}
	}

	// Engine 0: a, prompt 1000 with 256 local and 512 external cached tokens
	// (384 of them from a host tier, the rest unspecified);
	// b, two children of a 40-token prompt (n = 2); c aborted while queued;
	// d failing after its first token.
	a := newRequest(1000, 64, 1, 10)[0]
	b := newRequest(40, 8, 2, 20)
	c := newRequest(20, 16, 1, 5)[0]
	d := newRequest(10, 0, 1, 20)[0]
	a.ScheduledWith(at(50), stats.Cached{Local: 256, External: 512, ExternalTiers: stats.ExternalTiers{Host: 384}})
	b[0].Scheduled(at(50), 0, 0)
	b[1].Scheduled(at(50), 0, 0)
	d.Scheduled(at(50), 0, 0)
	// Engine 1: e, a P/D decode request whose 3000 prompt tokens all arrive
	// through the KV connector, from the prefill node (p2p).
	e := newRequest(3000, 0, 1, 50)[0]
	e.ScheduledWith(at(100), stats.Cached{External: 3000, ExternalTiers: stats.ExternalTiers{P2P: 3000}})
	order = []*stats.Timeline{a, b[0], b[1], c, d, e}

	record(0,
		iteration{ms: 300, outs: map[*stats.Timeline]int64{a: 1, b[0]: 1, b[1]: 1, d: 1},
			done: map[*stats.Timeline]stats.FinishReason{c: stats.FinishAbort}},
		iteration{ms: 330, outs: map[*stats.Timeline]int64{a: 2, b[0]: 1},
			done: map[*stats.Timeline]stats.FinishReason{d: stats.FinishError}, it: stats.Iteration{Preemptions: 1}},
	)
	must(b[1].Preempted(at(330)))
	b[1].Scheduled(at(360), 41, 0)
	record(0,
		iteration{ms: 400, outs: map[*stats.Timeline]int64{a: 1, b[0]: 1, b[1]: 1},
			done: map[*stats.Timeline]stats.FinishReason{b[0]: stats.FinishStop}},
		iteration{ms: 1500, outs: map[*stats.Timeline]int64{a: 1, b[1]: 1},
			done: map[*stats.Timeline]stats.FinishReason{a: stats.FinishLength, b[1]: stats.FinishAbort}},
	)
	record(1,
		iteration{ms: 200, outs: map[*stats.Timeline]int64{e: 1}, it: stats.Iteration{CorruptedRequests: 1}},
		iteration{ms: 250, outs: map[*stats.Timeline]int64{e: 1}},
		iteration{ms: 2300, outs: map[*stats.Timeline]int64{e: 1},
			done: map[*stats.Timeline]stats.FinishReason{e: stats.FinishRepetition}},
	)

	rec.RecordScheduler(ctx, 0, &stats.Scheduler{
		Running: 3, WaitingCapacity: 2, WaitingDeferred: 1, KVCacheUsage: 0.25,
		PrefixCache:          stats.CacheQueries{Queries: 1090, Hits: 297},
		MultimodalCache:      stats.CacheQueries{Queries: 4, Hits: 1},
		ConnectorPrefixCache: &stats.CacheQueries{Queries: 1000, Hits: 512},
		SpecDecoding:         &stats.SpecDecoding{Drafts: 3, DraftTokens: 6, AcceptedTokens: 4, AcceptedPerPosition: []int64{3, 1}},
		LoRA:                 &stats.LoRA{MaxLoRA: 4, Running: []string{"sql-lora"}, Waiting: []string{"chat-lora", "math-lora"}},
		KVTransfer: &stats.KVTransfer{XferTime: []float64{0.012, 0.3}, PostTime: []float64{0.0005},
			BytesTransferred: []int64{4096, 1 << 20}, NumDescriptors: []int64{12, 150},
			FailedTransfers: 1, ExpiredRequests: 2, NotificationsAfterExpiry: 1},
		Evictions: []stats.KVEviction{{Lifetime: 12.5, IdleBeforeEvict: 3, ReuseGaps: []float64{0.5, 1.5}}},
		KVOffload: scenarioOffload(),
		SimpleKVOffload: &stats.SimpleKVOffload{Stored: 5, DroppedCPUFull: 1, SkippedAlreadyCached: 2,
			LoadBlocksIssued: 64, LoadBlocksCompleted: 48, UsedBlocks: 80, PendingStoreBlocks: 16},
		Perf: &stats.PerfEstimate{FLOPs: 1.6e13, ReadBytes: 1.6e10, WriteBytes: 1.25e8},
	})
	rec.RecordScheduler(ctx, 1, &stats.Scheduler{
		Running: 1, WaitingDeferred: 2, KVCacheUsage: 0.75,
		PrefixCache:          stats.CacheQueries{Queries: 3000},
		ConnectorPrefixCache: &stats.CacheQueries{Queries: 3000, Hits: 3000},
		KVTransfer:           &stats.KVTransfer{XferTime: []float64{0.08}, BytesTransferred: []int64{1 << 30}, NumDescriptors: []int64{40000}, FailedNotifications: 1},
		KVFetch:              &stats.KVFetch{WaitingToStart: 1, InProgress: 1},
		Perf:                 &stats.PerfEstimate{FLOPs: 4.8e10, ReadBytes: 1.7e10},
	})
	rec.RecordScheduler(ctx, 1, &stats.Scheduler{SleepState: stats.WeightsOffloaded,
		Evictions: []stats.KVEviction{{Lifetime: 600, IdleBeforeEvict: 0.004}}})

	// The P/D router families, as a router's front end records them (on a
	// step-fed engine here only to cover every family in one scenario).
	e0, err := rec.Engine(0)
	must(err)
	e0.RecordPDLegs(ctx, &stats.PDLegs{PrefillLatency: 0.25, Handoff: true, HandoffGap: 0.004,
		DecodeFirstToken: true, DecodeTimeToFirstToken: 0.05})
	e0.RecordAttempts(ctx, 2)
	// The API server's sleep mode and weight-transfer operations.
	e0.RecordSleepModeOperation(ctx, stats.SleepModeSleep, 2.5)
	e0.RecordSleepModeOperation(ctx, stats.SleepModeWake, 0.8)
	e0.RecordWeightUpdateOperation(ctx, stats.WeightInit, 0.05)
	e0.RecordWeightUpdateOperation(ctx, stats.WeightUpdate, 12)
}

// scenarioFamilies records the scenario through views.VLLM() and returns the
// parsed scrape.
func scenarioFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	x := newExported(t, vs, scenarioOptions...)
	recordScenario(t, x.rec)
	return families(t, x.scrape())
}

// scenarioReader records the scenario on a testutil.Reader with
// views.VLLM(opts...).
func scenarioReader(t *testing.T, opts ...views.Option) *testutil.Reader {
	t.Helper()
	r := testutil.New(t, opts...)
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(r.Provider()),
		instrument.WithModelName(modelName), scenarioErrors(t)}, scenarioOptions...)...)
	if err != nil {
		t.Fatalf("NewRecorder: %v", err)
	}
	recordScenario(t, rec)
	return r
}

// scenarioErrors fails the test on a refusal of the Recorder; the
// scenario's corrupted requests come without WithCorruptionDetection, which
// the Recorder reports once per engine (and counts: the golden files show
// infermetrics_invalid_events_total).
func scenarioErrors(t testing.TB) instrument.Option {
	return instrument.WithErrorHandler(func(err error) {
		if !errors.Is(err, instrument.ErrFeatureNotConfigured) {
			t.Errorf("refused: %v", err)
		}
	})
}
