package exporters

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters/internal/exportertest"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/views"
)

// instanceSeries is what one instance's scrape puts in a Prometheus store.
type instanceSeries struct {
	text    int // vLLM families, text scrape: one per sample line (a histogram: buckets with +Inf, _sum, _count)
	native  int // vLLM families, protobuf scrape with native histograms on: a native histogram is one series
	process int // the process_* families of Setup's registry, which depend on nothing recorded
}

// shape is one instance's deployment: models Recorders of engines engines
// each, on every engine lora distinct LoRA states (kept with
// WithLoRAHistory(history) when history > 0), and its views:
// views.VLLM(opts...) followed by extra.
type shape struct {
	models, engines, lora, history int
	opts                           []views.Option
	extra                          []sdkmetric.View
	drive                          bool // driveScenario on each Recorder (engines 0 and 1)
	distinctLoRA                   bool // each engine its own LoRA states, else all the same ones
	setup                          []Option
}

// countInstance builds one instance of shape s through Setup and counts its
// series as a store ingests them.
func countInstance(t *testing.T, s shape) instanceSeries {
	t.Helper()
	cleanEnv(t)
	vs, err := views.VLLM(s.opts...)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Setup(t.Context(), append(s.setup, WithViews(append(vs, s.extra...)...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, p)
	var recs []*instrument.Recorder
	for m := range s.models {
		ranks := make([]int, s.engines)
		for i := range ranks {
			ranks[i] = i
		}
		opts := []instrument.Option{instrument.WithMeterProvider(p.MeterProvider()),
			instrument.WithModelName(fmt.Sprintf("model-%d", m)), instrument.WithEngines(ranks...)}
		if s.history > 0 {
			opts = append(opts, instrument.WithLoRAHistory(s.history))
		}
		rec, err := instrument.NewRecorder(opts...)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
		if s.drive {
			driveScenario(t, rec)
		}
		for _, rank := range ranks {
			e, err := rec.Engine(rank)
			if err != nil {
				t.Fatal(err)
			}
			first := 0
			if s.distinctLoRA {
				first = s.lora * (m*s.engines + rank)
			}
			for i := range s.lora {
				recordLoRA(t, e, first+i)
			}
		}
	}
	var n instanceSeries
	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 {
		t.Fatalf("text scrape: HTTP %d\n%s", code, body)
	}
	for line := range strings.Lines(body) {
		switch {
		case line == "\n" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "process_"):
			n.process++
		default:
			n.text++
		}
	}
	for _, mf := range exportertest.ScrapeProtobuf(t, p.Handler()) {
		if strings.HasPrefix(mf.GetName(), "process_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			switch {
			case h == nil:
				n.native++
			case h.Schema != nil: // native: one series in the store
				n.native++
			default: // classic: the finite buckets, +Inf, _sum and _count
				n.native += len(h.GetBucket()) + 3
			}
		}
	}
	runtime.KeepAlive(recs)
	return n
}

// The series one instance exports by default, and what each model, engine
// and LoRA state adds, as docs/benchmarks.md ("Series per instance") states
// them: the test fails when a family, a label value or a bucket is added or
// removed, and the table must then be updated with it.
func TestSeriesPerInstance(t *testing.T) {
	// perEngine is the doc's figure for one (model, engine) pair: every
	// vLLM family but the LoRA info gauge carries model_name and engine.
	const perEngine, process = 334, 9
	// perModel are the front end's series of each model, without engine:
	// vllm:admission_rejections_total by reason.
	const perModel = 2
	// With views.WithExponentialLatency, the 8 latency histograms' 189
	// series per engine become 8 native histograms (protobuf scrape), or 8
	// times _count, _sum and le="+Inf" (text scrape).
	const perEngineNative, perEngineNativeText = perEngine - 189 + 8, perEngine - 189 + 3*8
	// Dropping the engine label of every counter and histogram family
	// (views.WithAttributes) leaves per extra engine its 10 gauge series
	// once each family has an observation; at start-up the histograms' zero
	// series still carry the engine (the handler cannot tell the label is
	// dropped before a gathered series shows it), so only the 26 counter
	// series go.
	const perEngineGauges, perEngineCounters = 10, 26

	check := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d series, want %d", what, got, want)
		}
	}
	exp := []views.Option{views.WithExponentialLatency()}
	base := countInstance(t, shape{models: 1, engines: 1})
	check("one model, one engine (text)", base.text, perEngine+perModel)
	check("one model, one engine (protobuf)", base.native, perEngine+perModel)
	check("process_*", base.process, process)
	check("WithoutProcessMetrics: process_*", countInstance(t, shape{models: 1, engines: 1,
		setup: []Option{WithoutProcessMetrics()}}).process, 0)
	check("per extra model", countInstance(t, shape{models: 2, engines: 1}).text-base.text, perEngine+perModel)
	check("per extra engine", countInstance(t, shape{models: 1, engines: 2}).text-base.text, perEngine)
	// The rows of the doc's table (S = perEngine*N*E + perModel*N + L + process).
	check("1 model x 8 engines", countInstance(t, shape{models: 1, engines: 8}).text+process, 2683)
	check("1 model x 8 engines, native", countInstance(t, shape{models: 1, engines: 8, opts: exp}).native+process, 1235)
	pd := shape{models: 4, engines: 2, lora: 1, distinctLoRA: true}
	check("4 models x 2 engines, a LoRA state each", countInstance(t, pd).text+process, 2697)
	pd.opts = exp
	check("4 models x 2 engines, a LoRA state each, native", countInstance(t, pd).native+process, 1249)

	// LoRA: one vllm:lora_requests_info series per current state, the
	// adapters in its label values: more adapters add none; the
	// WithLoRAHistory(k) states one each.
	check("one LoRA state", countInstance(t, shape{models: 1, engines: 1, lora: 1}).text-base.text, 1)
	check("4 LoRA states, the last kept", countInstance(t, shape{models: 1, engines: 1, lora: 4}).text-base.text, 1)
	check("2 engines in the same LoRA state", countInstance(t, shape{models: 1, engines: 2, lora: 1}).text-2*perEngine-perModel, 1)
	check("4 LoRA states, WithLoRAHistory(4)",
		countInstance(t, shape{models: 1, engines: 1, lora: 4, history: 4}).text-base.text, 4)

	native := countInstance(t, shape{models: 1, engines: 1, opts: exp})
	check("WithExponentialLatency (protobuf)", native.native, perEngineNative+perModel)
	check("WithExponentialLatency (text)", native.text, perEngineNativeText+perModel)
	check("WithExponentialLatency, per extra engine (protobuf)",
		countInstance(t, shape{models: 1, engines: 2, opts: exp}).native-native.native, perEngineNative)

	var noEngine []views.Option
	for _, f := range views.Families() {
		if f.Type != "gauge" && slices.Contains(f.Labels, instrument.KeyEngine) {
			noEngine = append(noEngine, views.WithAttributes(f.Name,
				slices.DeleteFunc(slices.Clone(f.Labels), func(k string) bool { return k == instrument.KeyEngine })...))
		}
	}
	merged := countInstance(t, shape{models: 1, engines: 1, opts: noEngine})
	check("without the engine label, one engine", merged.text, perEngine+perModel)
	check("without the engine label, at start-up, per extra engine",
		countInstance(t, shape{models: 1, engines: 2, opts: noEngine}).text-merged.text, perEngine-perEngineCounters)
	// driveScenario records on engines 0 and 1: it adds no series to the
	// default (every label value exists from start-up).
	check("2 engines recorded on", countInstance(t, shape{models: 1, engines: 2, drive: true}).text, 2*perEngine+perModel)
	driven := countInstance(t, shape{models: 1, engines: 2, drive: true, opts: noEngine}).text
	check("without the engine label, 2 engines recorded on", driven, perEngine+perModel+perEngineGauges)
	check("without the engine label, recorded on, a third engine",
		countInstance(t, shape{models: 1, engines: 3, drive: true, opts: noEngine}).text-driven, perEngineGauges)

	// No option of views drops a family, and a view dropping an instrument
	// given beside views.VLLM does not either: the SDK applies every
	// matching view, each its own stream.
	drop := sdkmetric.NewView(sdkmetric.Instrument{Name: instrument.NameTimeToFirstToken},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}})
	check("beside an SDK view dropping TTFT", countInstance(t, shape{models: 1, engines: 1, extra: []sdkmetric.View{drop}}).text, perEngine+perModel)

	t.Logf("per (model, engine) %d series (%d with WithExponentialLatency on a protobuf scrape, %d on a text one), "+
		"%d per model, %d per extra engine without the engine label once recorded on; process_* %d; "+
		"1,000 instances of 1 model x 1 engine: %d",
		perEngine, perEngineNative, perEngineNativeText, perModel, perEngineGauges, process, 1000*(perEngine+perModel+process))
}
