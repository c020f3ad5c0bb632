package instrument_test

import (
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// Refused admissions are the Recorder's, by reason, without engine, as
// vLLM's front end counts them: whichever engine records one, one series
// per reason carries it; an unknown reason is refused and counted on the
// engine that was given it; a closed Recorder records nothing.
func TestAdmissionRejections(t *testing.T) {
	r, errs, rec := decodeRecorder(t, 0, 1, 2)
	e1, _ := rec.Engine(1)
	e2, _ := rec.Engine(2)
	e1.RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedRequests)
	e2.RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedRequests)
	e2.RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedTokens)
	labels := func(reason string) []string {
		return []string{"model_name", model, "reason", reason, "role", "decode"}
	}
	s := r.Snapshot()
	for reason, want := range map[string]float64{"max_num_queued_reqs": 2, "max_num_queued_tokens": 1} {
		if got := s.Value("vllm:admission_rejections_total", labels(reason)...); got != want {
			t.Errorf("vllm:admission_rejections_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}

	e1.RecordAdmissionRejection(t.Context(), stats.AdmissionReason(7))
	if got := errs.Take(); len(got) != 1 || !errors.Is(got[0], stats.ErrUnknownAdmissionReason) {
		t.Errorf("reports %v, want one unknown admission reason", got)
	}
	s = r.Snapshot()
	if got := s.Value("infermetrics.invalid_events_total", engineLabels("1", "role", "decode", "kind", "admission_rejection")...); got != 1 {
		t.Errorf("invalid events of kind admission_rejection on engine 1 = %v, want 1", got)
	}
	if got := s.Value("vllm:admission_rejections_total", labels("max_num_queued_reqs")...) +
		s.Value("vllm:admission_rejections_total", labels("max_num_queued_tokens")...); got != 3 {
		t.Errorf("after a refused reason: %v rejections in all, want 3", got)
	}

	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	e1.RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedRequests)
	if got := errs.Take(); len(got) != 1 || !errors.Is(got[0], instrument.ErrClosed) {
		t.Errorf("after Close: reports %v, want ErrClosed", got)
	}
	var nilEngine *instrument.Engine
	nilEngine.RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedTokens) // no panic
}

// decodeRecorder returns a Recorder of the given engines with the constant
// attribute role=decode, the reader of its provider and the errors it
// reports. What a nil Engine refuses goes to otel.Handle, which logs it: to
// the test's log.
func decodeRecorder(t *testing.T, ranks ...int) (*testutil.Reader, *testutil.Errors, *instrument.Recorder) {
	t.Helper()
	testlog.StdLogger(t)
	r := testutil.New(t)
	errs := &testutil.Errors{}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model),
		instrument.WithEngines(ranks...), instrument.WithAttributes(attribute.String("role", "decode")), errs.Option())
	if err != nil {
		t.Fatal(err)
	}
	return r, errs, rec
}

// Two Recorders of one model on one MeterProvider (other engines, same
// constant attributes) report the same admission series: the SDK sums
// their counts into it, as vLLM sums its API servers' (the prometheus
// multiprocess mode).
func TestAdmissionRejectionsTwoRecorders(t *testing.T) {
	r := testutil.New(t)
	var engines []*instrument.Engine
	for rank := range 2 {
		rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model),
			instrument.WithEngines(rank))
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Close()
		e, _ := rec.Engine(rank)
		engines = append(engines, e)
	}
	engines[0].RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedTokens)
	engines[1].RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedTokens)
	engines[1].RecordAdmissionRejection(t.Context(), stats.AdmissionQueuedTokens)
	if got := r.Value("vllm:admission_rejections_total", "model_name", model, "reason", "max_num_queued_tokens"); got != 3 {
		t.Errorf("two Recorders' rejections = %v, want their sum 3", got)
	}
}

// A front end's request refused at admission (stats.ErrorAdmissionRejected)
// is in none of vLLM's request families, as vLLM counts it only as an
// admission rejection, and is a failed request of the GenAI server metrics.
func TestRecordRequestRefusedAtAdmission(t *testing.T) {
	h := newSemconvHarness(t, instrument.WithGenAI("chat", "acme"))
	e := h.engine(0)
	refused := stats.ObservedRequest{Reason: stats.FinishError, ErrorType: stats.ErrorAdmissionRejected, E2ELatency: 0.004}
	e.RecordRequest(t.Context(), &refused)
	s := h.collect()
	if p := s.get(t, instrument.NameGenAIServerRequestDuration, genAILabels(instrument.KeyErrorType, stats.ErrorAdmissionRejected.String())...); p.count != 1 {
		t.Errorf("GenAI request duration of failed requests: %d, want the refused one", p.count)
	}
	if p := s.get(t, "vllm:request_success", engineLabels("0", "finished_reason", "error")...); p.value != 0 {
		t.Errorf("vllm:request_success{finished_reason=error} = %v, want 0: vLLM does not count a refused attempt", p.value)
	}
	for k := range s {
		if strings.HasPrefix(k, "vllm:e2e_request_latency") || strings.HasPrefix(k, "vllm:request_params_n") {
			t.Errorf("%s recorded for a request refused at admission", k)
		}
	}
}

// A request refused at admission is bounded by the engine's totals since
// start as any other: its tokens on the usage families cannot take a
// series past MaxTotal.
func TestRefusedAtAdmissionBoundedByTotals(t *testing.T) {
	_, errs, rec := decodeRecorder(t, 0)
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	e.RecordIteration(t.Context(), &stats.Iteration{GenerationTokens: instrument.MaxTotal - 1000})
	refused := stats.ObservedRequest{Reason: stats.FinishError, ErrorType: stats.ErrorAdmissionRejected, E2ELatency: 0.004,
		UsageKnown: true, PromptTokens: 10, GenerationTokens: 1001}
	e.RecordRequest(t.Context(), &refused)
	if got := errs.Take(); len(got) != 1 || !errors.Is(got[0], stats.ErrOverflow) {
		t.Errorf("reported %v, want the total since start passing MaxTotal", got)
	}
}
