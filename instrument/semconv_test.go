package instrument_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// genAILabels are the attributes of the GenAI server metrics, with extra pairs.
func genAILabels(extra ...string) []string {
	return append([]string{instrument.KeyGenAIOperationName, "chat", instrument.KeyGenAIProviderName, "acme",
		instrument.KeyGenAIRequestModel, model}, extra...)
}

// The GenAI server metrics follow the conventions: request duration of every
// request (error.type on failures), TTFT at the first token (under priority
// scheduling too), and the time per output token of successful requests with
// more than one output token only, from steps and from a front end alike.
func TestGenAIServerMetrics(t *testing.T) {
	for _, priority := range []bool{false, true} {
		opts := []instrument.Option{instrument.WithGenAI("chat", "acme")}
		if priority {
			opts = append(opts, instrument.WithPriorityScheduling())
		}
		h := newSemconvHarness(t, opts...)
		e := h.engine(0)
		ok := validFinished() // 10 tokens, TPOT 0.1
		failed := validFinished()
		failed.Reason, failed.E2ELatency = stats.FinishError, 0.5
		one := validFinished()
		one.GenerationTokens, one.MaxGenerationTokens, one.DecodeTime, one.TimePerOutputToken = 1, 1, 0, 0
		it := stats.Iteration{GenerationTokens: 1, TTFT: []float64{0.25}, Finished: []stats.FinishedRequest{ok, failed, one}}
		e.RecordIteration(t.Context(), &it)
		// A front end: a streamed request with usage, a failed one with
		// usage and one token made, and one without usage.
		r := observed() // 11 tokens from 0.2 s to 1.2 s: TPOT 0.1
		rFailed := observed()
		rFailed.Reason = stats.FinishError
		rNoUsage := observed()
		rNoUsage.UsageKnown, rNoUsage.PromptTokens, rNoUsage.GenerationTokens, rNoUsage.CachedPromptTokens = false, 0, 0, 0
		for _, o := range []*stats.ObservedRequest{&r, &rFailed, &rNoUsage} {
			e.RecordRequest(t.Context(), o)
		}
		s := h.collect()
		for _, c := range []struct {
			name   string
			labels []string
			count  uint64
			sum    float64
		}{
			{instrument.NameGenAIServerRequestDuration, genAILabels(), 4, 1.5 + 1.5 + 1.25 + 1.25},
			{instrument.NameGenAIServerRequestDuration, genAILabels(instrument.KeyErrorType, "_OTHER"), 2, 0.5 + 1.25},
			{instrument.NameGenAIServerTimeToFirstToken, genAILabels(), 4, 0.25 + 3*0.2},
			{instrument.NameGenAIServerTimePerOutputToken, genAILabels(), 2, 0.1 + 0.1},
		} {
			p := s.get(t, c.name, c.labels...)
			if p.count != c.count || !approx(p.sum, c.sum) {
				t.Errorf("priority %v: %s{%v} = count %d sum %v, want count %d sum %v",
					priority, c.name, c.labels, p.count, p.sum, c.count, c.sum)
			}
		}
		for k := range s {
			if strings.HasPrefix(k, instrument.NameGenAIServerTimePerOutputToken) && strings.Contains(k, instrument.KeyErrorType) {
				t.Errorf("priority %v: %s: a failed request's time per output token", priority, k)
			}
		}
	}
}

// Without WithGenAISemconv nothing is recorded on the GenAI server metrics,
// and vLLM's latency families carry no GenAI attribute.
func TestGenAIServerMetricsOff(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	it := validIteration()
	e.RecordIteration(t.Context(), &it)
	for k := range h.collect() {
		if strings.HasPrefix(k, "gen_ai.server.") || strings.Contains(k, "gen_ai.") {
			t.Errorf("series %s without WithGenAISemconv", k)
		}
	}
}

// A front end's request carries its operation (from its endpoint) onto the
// GenAI server and client metrics; OperationDefault and the engine path keep
// the configured one. An unknown operation is an error and records nothing.
func TestGenAIOperation(t *testing.T) {
	h := newSemconvHarness(t, instrument.WithGenAI("generate_content", "acme"))
	e := h.engine(0)
	ctx := t.Context()
	hc := newHarness(t, instrument.WithGenAI("generate_content", "acme")) // the client metrics' views
	b, err := hc.engine(0).Backend("decode-0", instrument.RoleDecode)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range stats.Operations() {
		r := observed()
		r.Operation = op
		e.RecordRequest(ctx, &r)
		b.RecordRequest(ctx, &r)
		b.RecordChunkGap(ctx, op, 0.02)
	}
	it := stats.Iteration{GenerationTokens: 1, TTFT: []float64{0.25}}
	e.RecordIteration(ctx, &it)
	bad := observed()
	bad.Operation = stats.Operation(200)
	if err := instrument.RecordRequestErr(e, ctx, &bad); !errors.Is(err, stats.ErrUnknownOperation) {
		t.Errorf("Engine.RecordRequest(Operation 200) = %v", err)
	}
	if err := instrument.RecordRequestErr(b, ctx, &bad); !errors.Is(err, stats.ErrUnknownOperation) {
		t.Errorf("Backend.RecordRequest(Operation 200) = %v", err)
	}
	if err := instrument.BackendRecordChunkGapErr(b, ctx, stats.Operation(200), 0.02); !errors.Is(err, stats.ErrUnknownOperation) {
		t.Errorf("Backend.RecordChunkGap(Operation 200) = %v", err)
	}
	s, sc := h.collect(), hc.collect()
	for op, ttft := range map[string]uint64{"generate_content": 2, "chat": 1, "text_completion": 1} {
		l := []string{instrument.KeyGenAIOperationName, op, instrument.KeyGenAIProviderName, "acme", instrument.KeyGenAIRequestModel, model}
		if p := s.get(t, instrument.NameGenAIServerRequestDuration, l...); p.count != 1 {
			t.Errorf("%s{%s} count %d, want 1", instrument.NameGenAIServerRequestDuration, op, p.count)
		}
		if p := s.get(t, instrument.NameGenAIServerTimeToFirstToken, l...); p.count != ttft {
			t.Errorf("%s{%s} count %d, want %d", instrument.NameGenAIServerTimeToFirstToken, op, p.count, ttft)
		}
		cl := engineLabels("0", append(l, "backend", "decode-0", "backend.role", "decode")...)
		for _, name := range []string{instrument.NameGenAIClientOperationDuration, instrument.NameGenAIClientTimePerOutputChunk} {
			if p := sc.get(t, name, cl...); p.count != 1 {
				t.Errorf("%s{%s} count %d, want 1", name, op, p.count)
			}
		}
		if p := sc.get(t, instrument.NameGenAIClientTokenUsage, append(cl, instrument.KeyGenAITokenType, "input")...); p.count != 1 {
			t.Errorf("%s{%s} count %d, want 1", instrument.NameGenAIClientTokenUsage, op, p.count)
		}
	}
	for _, series := range []snapshot{s, sc} {
		for k := range series {
			if strings.Contains(k, "unknown") {
				t.Errorf("series %s from an unknown operation", k)
			}
		}
	}
}

// frontEnd returns a harness with the GenAI server metrics, operation chat
// and provider acme, its engine 0, and that engine's backend "up".
func frontEnd(t *testing.T) (*harness, *instrument.Engine, *instrument.Backend) {
	h := newSemconvHarness(t, instrument.WithGenAI("chat", "acme"))
	e := h.engine(0)
	b, err := e.Backend("up", "")
	if err != nil {
		t.Fatal(err)
	}
	return h, e, b
}

// upLabels are the labels of frontEnd's backend's client metrics.
func upLabels() []string {
	return []string{instrument.KeyGenAIOperationName, "chat", instrument.KeyGenAIProviderName, "acme",
		instrument.KeyGenAIRequestModel, model, instrument.KeyBackend, "up", instrument.KeyBackendRole, ""}
}

// The request durations of the GenAI server and client metrics carry each
// failed request's error.type (stats.ErrorType): every value on its own
// series, _OTHER for a failure of no known cause, none for a request that
// did not fail or an abort of no known cause, client_canceled on an abort
// the client made. Before, every failure was _OTHER.
func TestErrorTypes(t *testing.T) {
	h, e, b := frontEnd(t)
	ctx := t.Context()
	record := func(reason stats.FinishReason, typ stats.ErrorType) {
		r := stats.ObservedRequest{Operation: stats.OperationChat, Reason: reason, ErrorType: typ, E2ELatency: 0.5}
		e.RecordRequest(ctx, &r)
		b.RecordRequest(ctx, &r)
	}
	for _, typ := range stats.ErrorTypes() {
		record(stats.FinishError, typ)
	}
	record(stats.FinishError, stats.ErrorNone)           // _OTHER
	record(stats.FinishAbort, stats.ErrorClientCanceled) // client_canceled
	record(stats.FinishAbort, stats.ErrorNone)           // no error.type
	record(stats.FinishStop, stats.ErrorNone)            // no error.type
	s := h.collect()
	for _, typ := range stats.ErrorTypes() {
		want := uint64(1)
		switch typ {
		case stats.ErrorOther, stats.ErrorClientCanceled:
			want = 2
		}
		if p := s.get(t, instrument.NameGenAIServerRequestDuration, genAILabels(instrument.KeyErrorType, typ.String())...); p.count != want {
			t.Errorf("server duration{error.type=%s} count %d, want %d", typ, p.count, want)
		}
		if p := s.get(t, instrument.NameGenAIClientOperationDuration, append(upLabels(), instrument.KeyErrorType, typ.String())...); p.count != want {
			t.Errorf("client duration{error.type=%s} count %d, want %d", typ, p.count, want)
		}
	}
	if p := s.get(t, instrument.NameGenAIServerRequestDuration, genAILabels()...); p.count != 2 {
		t.Errorf("server duration without error.type: count %d, want 2 (the stop and the abort of no known cause)", p.count)
	}
}

// gen_ai.response.model is on the GenAI server and client metrics a
// front end's request records (durations, first token or chunk, time per
// output token, token usage), the first MaxResponseModels models of an
// Engine under their names, shared by its server and client metrics, the
// rest under ResponseModelOther, and none on a request that named none.
func TestResponseModels(t *testing.T) {
	h, e, b := frontEnd(t)
	ctx := t.Context()
	models := []string{""}
	for i := range instrument.MaxResponseModels + 3 {
		models = append(models, fmt.Sprintf("m-%02d", i))
	}
	for _, m := range models {
		r := observed()
		r.Operation, r.ResponseModel = stats.OperationChat, m
		e.RecordRequest(ctx, &r)
		b.RecordRequest(ctx, &r)
	}
	s := h.collect()
	for i, m := range models {
		var extra []string
		want := uint64(1)
		switch {
		case m == "":
		case i <= instrument.MaxResponseModels:
			extra = []string{instrument.KeyGenAIResponseModel, m}
		default:
			extra, want = []string{instrument.KeyGenAIResponseModel, instrument.ResponseModelOther}, 3
		}
		for _, c := range []struct {
			name   string
			labels []string
		}{
			{instrument.NameGenAIServerRequestDuration, genAILabels(extra...)},
			{instrument.NameGenAIServerTimeToFirstToken, genAILabels(extra...)},
			{instrument.NameGenAIServerTimePerOutputToken, genAILabels(extra...)},
			{instrument.NameGenAIClientOperationDuration, append(upLabels(), extra...)},
			{instrument.NameGenAIClientTimeToFirstChunk, append(upLabels(), extra...)},
			{instrument.NameGenAIClientTokenUsage, append(append(upLabels(), instrument.KeyGenAITokenType, "input"), extra...)},
		} {
			if p := s.get(t, c.name, c.labels...); p.count != want {
				t.Errorf("%s %v: count %d, want %d", c.name, c.labels, p.count, want)
			}
		}
	}
}

// A request refused whole (here: past the totals since start) takes none
// of an Engine's MaxResponseModels: the models of the requests recorded
// after it keep their names.
func TestRefusedRequestTakesNoResponseModel(t *testing.T) {
	h, e, _ := frontEnd(t)
	ctx := t.Context()
	e.RecordIteration(ctx, &stats.Iteration{GenerationTokens: instrument.MaxTotal - 1000})
	refused := observed()
	refused.Operation, refused.ResponseModel, refused.GenerationTokens = stats.OperationChat, "refused", 1001
	e.RecordRequest(ctx, &refused)
	if err := h.refused(); !errors.Is(err, stats.ErrOverflow) {
		t.Fatalf("refused %v, want the total since start passing MaxTotal", err)
	}
	for i := range instrument.MaxResponseModels {
		r := observed()
		r.Operation, r.ResponseModel, r.PromptTokens, r.CachedPromptTokens, r.GenerationTokens = stats.OperationChat, fmt.Sprintf("m-%02d", i), 1, 0, 1
		e.RecordRequest(ctx, &r)
	}
	s := h.collect()
	for i := range instrument.MaxResponseModels {
		m := fmt.Sprintf("m-%02d", i)
		if p := s.get(t, instrument.NameGenAIServerRequestDuration, genAILabels(instrument.KeyGenAIResponseModel, m)...); p.count != 1 {
			t.Errorf("response model %s: count %d, want 1 under its name", m, p.count)
		}
	}
}
