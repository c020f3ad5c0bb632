package instrument_test

import (
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
		if err := e.RecordIteration(t.Context(), &it); err != nil {
			t.Fatal(err)
		}
		// A front end: a streamed request with usage, a failed one with
		// usage and one token made, and one without usage.
		r := observed() // 11 tokens from 0.2 s to 1.2 s: TPOT 0.1
		rFailed := observed()
		rFailed.Reason = stats.FinishError
		rNoUsage := observed()
		rNoUsage.UsageKnown, rNoUsage.PromptTokens, rNoUsage.GenerationTokens, rNoUsage.CachedPromptTokens = false, 0, 0, 0
		for _, o := range []*stats.ObservedRequest{&r, &rFailed, &rNoUsage} {
			if err := e.RecordRequest(t.Context(), o); err != nil {
				t.Fatal(err)
			}
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
	if err := e.RecordIteration(t.Context(), &it); err != nil {
		t.Fatal(err)
	}
	for k := range h.collect() {
		if strings.HasPrefix(k, "gen_ai.server.") || strings.Contains(k, "gen_ai.") {
			t.Errorf("series %s without WithGenAISemconv", k)
		}
	}
}
