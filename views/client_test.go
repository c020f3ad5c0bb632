package views_test

import (
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

// With Semconv the GenAI client families keep their OpenTelemetry names,
// the GenAI, backend and role labels, and drop model_name and engine; the
// semantic conventions' buckets stay unless an option replaces them.
func TestSemconvClientFamilies(t *testing.T) {
	vllm, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	semconv, err := views.Semconv(views.WithBuckets(instrument.NameGenAIClientOperationDuration, 1, 10))
	if err != nil {
		t.Fatal(err)
	}
	r := testutil.NewWithViews(t, append(vllm, semconv...)...)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	e, _ := rec.Engine(0)
	b, err := e.Backend("10.0.0.1:8000", instrument.RolePrefill)
	if err != nil {
		t.Fatal(err)
	}
	leg := stats.ObservedRequest{Reason: stats.FinishLength, E2ELatency: 0.3, UsageKnown: true, PromptTokens: 70, GenerationTokens: 1}
	b.RecordRequest(t.Context(), &leg)
	labels := []string{"gen_ai.operation.name", "text_completion", "gen_ai.provider.name", "self_hosted",
		"gen_ai.request.model", "m", "backend", "10.0.0.1:8000", "backend.role", "prefill", "server.address", "10.0.0.1", "server.port", "8000"}
	d := r.Histogram(instrument.NameGenAIClientOperationDuration, labels...)
	if d.Count != 1 || !slices.Equal(d.Bounds, []float64{1, 10}) {
		t.Errorf("duration %+v", d)
	}
	u := r.Histogram(instrument.NameGenAIClientTokenUsage, append(labels, "gen_ai.token.type", "input")...)
	if u.Sum != 70 || len(u.Bounds) != 14 || u.Bounds[13] != 67108864 {
		t.Errorf("token usage %+v", u)
	}
	for _, f := range views.ClientFamilies() {
		if slices.Contains(f.Labels, instrument.KeyModelName) || !slices.Contains(f.Labels, instrument.KeyBackend) {
			t.Errorf("%s labels %v", f.Name, f.Labels)
		}
	}
	if _, err := views.VLLM(views.WithBuckets(instrument.NameGenAIClientOperationDuration, 1)); err == nil {
		t.Error("VLLM takes an option of a client family, which Semconv exports")
	}
}

// ScrapeName and ScrapeLabel name the GenAI client families and their
// labels as the Prometheus exporter writes them.
func TestClientFamiliesScrapeNames(t *testing.T) {
	x := newExported(t, vllmAndSemconv(t))
	e, _ := x.rec.Engine(0)
	b, err := e.Backend("10.0.0.1:8000", instrument.RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	leg := stats.ObservedRequest{Reason: stats.FinishError, E2ELatency: 0.3, FirstToken: true, TimeToFirstToken: 0.1,
		TimeToLastToken: 0.2, UsageKnown: true, PromptTokens: 70, GenerationTokens: 2, ResponseModel: "llama-3.1-8b-2026"}
	b.RecordChunkGap(t.Context(), stats.OperationDefault, 0.1)
	b.RecordRequest(t.Context(), &leg)
	fams := families(t, x.scrape())
	for _, f := range views.ClientFamilies() {
		mf, ok := fams[f.ScrapeName()]
		if !ok {
			t.Errorf("%s: no family %s in the scrape", f.Name, f.ScrapeName())
			continue
		}
		for _, k := range f.Labels {
			if k == instrument.KeyErrorType && f.Instrument.Name != instrument.NameGenAIClientOperationDuration {
				continue
			}
			if labelValue(mf.GetMetric()[0], views.ScrapeLabel(k)) == "" {
				t.Errorf("%s: no label %s (%s) on %v", f.ScrapeName(), views.ScrapeLabel(k), k, mf.GetMetric()[0].GetLabel())
			}
		}
	}
}

// With WithGenAIInferenceNames the client durations are exported under the
// conventions' inference names, nothing under the old ones, and options
// naming the old names still apply; the token usage keeps its name.
func TestGenAIInferenceNames(t *testing.T) {
	sv, err := views.Semconv(views.WithGenAIInferenceNames(), views.WithBuckets(instrument.NameGenAIClientOperationDuration, 1, 10))
	if err != nil {
		t.Fatal(err)
	}
	vv, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	x := newExported(t, append(vv, sv...))
	e, _ := x.rec.Engine(0)
	b, err := e.Backend("10.0.0.1:8000", "")
	if err != nil {
		t.Fatal(err)
	}
	leg := stats.ObservedRequest{Reason: stats.FinishStop, E2ELatency: 0.3, FirstToken: true, TimeToFirstToken: 0.1,
		TimeToLastToken: 0.2, UsageKnown: true, PromptTokens: 70, GenerationTokens: 2}
	b.RecordChunkGap(t.Context(), stats.OperationDefault, 0.1)
	b.RecordRequest(t.Context(), &leg)
	fams := families(t, x.scrape())
	for _, name := range []string{"gen_ai_client_inference_duration_seconds", "gen_ai_client_inference_time_to_first_chunk_seconds",
		"gen_ai_client_inference_time_per_output_chunk_seconds", "gen_ai_client_token_usage"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("no family %s", name)
		}
	}
	for _, name := range []string{"gen_ai_client_operation_duration_seconds", "gen_ai_client_operation_time_to_first_chunk_seconds",
		"gen_ai_client_operation_time_per_output_chunk_seconds"} {
		if _, ok := fams[name]; ok {
			t.Errorf("family %s under its old name too", name)
		}
	}
	if mf := fams["gen_ai_client_inference_duration_seconds"]; mf != nil {
		var bounds []float64
		for _, bk := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, bk.GetUpperBound())
		}
		if len(bounds) < 2 || bounds[0] != 1 || bounds[1] != 10 {
			t.Errorf("duration buckets %v, want WithBuckets' 1 and 10", bounds)
		}
	}
}
