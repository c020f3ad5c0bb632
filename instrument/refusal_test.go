package instrument_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/eventtest"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

const invalidFamily = "infermetrics.invalid_events_total"

// A step with a refused event records the step's other events, counts the
// refusal by kind on the invalid events counter and reports it once, with
// the event's error.
func TestRefusedEventCountedAndReported(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	good := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
	bad := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 20})
	good.Scheduled(ms(1), 0, 0)
	var step stats.Iteration
	step.Output(good, ms(2), 1)
	step.Output(bad, ms(2), 1) // never scheduled
	step.Output(good, ms(3), 0)
	e.RecordIteration(t.Context(), &step)

	if got := r.Value("vllm:generation_tokens_total", withLabels()...); got != 1 {
		t.Errorf("generation tokens %v, want 1: the accepted output only", got)
	}
	if got := r.Value("vllm:prompt_tokens_total", withLabels()...); got != 10 {
		t.Errorf("prompt tokens %v, want 10: the refused request's prompt is not counted", got)
	}
	if got := r.Value(invalidFamily, withLabels("kind", "output")...); got != 2 {
		t.Errorf("invalid output events %v, want 2", got)
	}
	reported := errs.Take()
	if len(reported) != 1 {
		t.Fatalf("%d reports, want 1 for the step: %v", len(reported), reported)
	}
	msg := reported[0].Error()
	for _, want := range []string{"engine 0", "2 events refused", "output 2", "call Scheduled first"} {
		if !strings.Contains(msg, want) {
			t.Errorf("report %q does not say %q", msg, want)
		}
	}
	if !errors.Is(reported[0], stats.ErrOutOfOrder) {
		t.Errorf("report %v does not match ErrOutOfOrder", reported[0])
	}
}

// A refusal kept on a Timeline (a Scheduled before the arrival) is counted
// and reported once, by the step that takes it, whatever the request does
// after: every later Output, Preempt and Finish of the request, through the
// Iteration methods, across steps.
func TestKeptRefusalCountedOnce(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	tl := stats.NewTimeline(stats.Request{Arrival: ms(10), PromptTokens: 8})
	tl.Scheduled(ms(5), 0, 0) // before the arrival: refused, kept
	tl.Scheduled(ms(11), 0, 0)
	var step stats.Iteration
	var reports int
	for i := range 5 {
		step.Output(tl, ms(20+10*i), 1)
		if i == 2 {
			step.Preempt(tl, ms(21+10*i))
			tl.Scheduled(ms(22+10*i), 0, 0)
		}
		e.RecordIteration(t.Context(), &step)
		reports += len(errs.Take())
		step.Reset()
	}
	step.Finish(tl, ms(90), stats.FinishStop)
	e.RecordIteration(t.Context(), &step)
	reports += len(errs.Take())

	if got := r.Value(invalidFamily, withLabels("kind", "scheduled")...); got != 1 {
		t.Errorf("invalid scheduled events %v, want 1", got)
	}
	if reports != 1 {
		t.Errorf("%d reports, want 1", reports)
	}
	if got := r.Value("vllm:generation_tokens_total", withLabels()...); got != 5 {
		t.Errorf("generation tokens %v, want 5", got)
	}
	if got := r.Value("vllm:request_success_total", withLabels("finished_reason", "stop")...); got != 1 {
		t.Errorf("finished %v, want 1", got)
	}
}

// A step recorded twice without Reset is refused the second time: nothing is
// counted twice, and the mistake is counted and reported.
func TestRecordedTwiceRefused(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	step := stats.Iteration{GenerationTokens: 5}
	e.RecordIteration(t.Context(), &step)
	e.RecordIteration(t.Context(), &step)
	if got := r.Value("vllm:generation_tokens_total", withLabels()...); got != 5 {
		t.Errorf("generation tokens %v, want 5: counted once", got)
	}
	if got := r.Value(invalidFamily, withLabels("kind", "recorded_twice")...); got != 1 {
		t.Errorf("recorded_twice %v, want 1", got)
	}
	reported := errs.Take()
	if len(reported) != 1 || !errors.Is(reported[0], instrument.ErrRecordedTwice) || !strings.Contains(reported[0].Error(), "call Reset") {
		t.Fatalf("reports %v, want one ErrRecordedTwice naming Reset", reported)
	}
	step.Reset()
	step.GenerationTokens = 2
	e.RecordIteration(t.Context(), &step)
	if got := r.Value("vllm:generation_tokens_total", withLabels()...); got != 7 || len(errs.Take()) != 0 {
		t.Errorf("after Reset: generation tokens %v, want 7, and no report", got)
	}
}

// Feature data on a Recorder without the feature's option is recorded, and
// reported and counted once per engine and feature, naming the option.
func TestFeatureWithoutOptionReportedOnce(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	for range 3 {
		e.RecordScheduler(t.Context(), &stats.Scheduler{
			SpecDecoding: &stats.SpecDecoding{Drafts: 1, DraftTokens: 2, AcceptedTokens: 1},
			KVTransfer:   &stats.KVTransfer{FailedTransfers: 1},
		})
	}
	if got := r.Value("vllm:spec_decode_num_drafts_total", withLabels()...); got != 3 {
		t.Errorf("drafts %v, want 3: the data is recorded", got)
	}
	if got := r.Value(invalidFamily, withLabels("kind", "feature_not_configured")...); got != 2 {
		t.Errorf("feature_not_configured %v, want 2 (spec decoding, KV connector)", got)
	}
	reported := errs.Take()
	var options []string
	for _, err := range reported {
		if !errors.Is(err, instrument.ErrFeatureNotConfigured) {
			t.Errorf("report %v does not match ErrFeatureNotConfigured", err)
		}
		for _, o := range []string{"WithSpecDecoding(k)", "WithKVConnector()"} {
			if strings.Contains(err.Error(), o) {
				options = append(options, o)
			}
		}
	}
	if len(reported) != 2 || len(options) != 2 {
		t.Errorf("reports %v, want one naming WithSpecDecoding(k) and one naming WithKVConnector()", reported)
	}
}

// The default handler lets one report per ErrorReportInterval through and
// says how many it dropped; the counter counts every refusal.
func TestRateLimited(t *testing.T) {
	var got []error
	now := t0
	report := instrument.RateLimitedAt(func(err error) { got = append(got, err) }, func() time.Time { return now })
	for i := range 5 {
		report(errors.New("bad " + string(rune('a'+i))))
	}
	now = now.Add(instrument.ErrorReportInterval)
	report(errors.New("bad f"))
	if len(got) != 2 {
		t.Fatalf("%d reports passed, want 2: %v", len(got), got)
	}
	if got[0].Error() != "bad a" || !strings.HasPrefix(got[1].Error(), "bad f (and 4 more refused") {
		t.Errorf("reports %q, %q; want bad a, then bad f saying 4 were dropped", got[0], got[1])
	}
}

// Every error of a metrics call or option names its fix: the call, the
// option, the allowed range or the field it is compared with.
func TestErrorsSayWhatToDo(t *testing.T) {
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
	var step stats.Iteration
	var zero stats.Timeline
	_, noName := instrument.NewRecorder(instrument.WithEngines(-1))
	rec := testRecorder // engines 0 and 1
	_, unknown := rec.Engine(2)
	for _, c := range []struct {
		name string
		err  error
		want []string
	}{
		{"Output before Scheduled", eventtest.Err(step.Refused, func() { step.Output(tl, ms(1), 1) }), []string{"call Scheduled first"}},
		{"zero tokens", func() error {
			ok := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
			ok.Scheduled(ms(1), 0, 0)
			return eventtest.Err(step.Refused, func() { step.Output(ok, ms(2), 0) })
		}(), []string{"tokens = 0", "want 1 or more"}},
		{"hits above queries", (&stats.Scheduler{PrefixCache: stats.CacheQueries{Queries: 1, Hits: 2}}).Validate(),
			[]string{"PrefixCache.Hits = 2", "more than Queries (1)"}},
		{"zero Timeline", eventtest.Err(step.Refused, func() { step.Output(&zero, ms(1), 1) }), []string{"use NewTimeline"}},
		{"Timeline after its finish", func() error {
			done := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
			step.Finish(done, ms(1), stats.FinishAbort)
			return eventtest.Err(step.Refused, func() { step.Finish(done, ms(2), stats.FinishAbort) })
		}(), []string{"own Timeline (NewTimeline)"}},
		{"unknown engine", unknown, []string{"rank 2", "[0 1]", "WithEngines"}},
		{"no model name, bad rank", noName, []string{"required", "WithModelName", "engine rank -1", "WithEngines"}},
		{"KV cache usage", (&stats.Scheduler{KVCacheUsage: 1.5}).Validate(), []string{"want 0 to 1"}},
		{"accepted above drafted", (&stats.SpecDecoding{DraftTokens: 1, AcceptedTokens: 2}).Validate(), []string{"more than DraftTokens (1)"}},
		{"n > 1 on one Timeline", stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 1, N: 2}).Err(), []string{"use NewTimelines"}},
		{"empty prompt", func() error {
			tl := stats.NewTimeline(stats.Request{Arrival: t0})
			return eventtest.Err(tl.Refused, func() { tl.Tokenized(t0, 0) })
		}(), []string{"promptTokens = 0", "want at least 1"}},
		{"scheduled before its prompt length", func() error {
			tl := stats.NewTimeline(stats.Request{Arrival: t0})
			return eventtest.Err(tl.Refused, func() { tl.Scheduled(ms(1), 0, 0) })
		}(), []string{"call Tokenized first"}},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, c.err, w)
			}
		}
	}
}

// CountUnwrapped counts, once per call, the live engines of a model and
// engine whose Recorder has no SeriesSet, and no other engine.
func TestCountUnwrapped(t *testing.T) {
	r := testutil.New(t)
	plain, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()),
		instrument.WithModelName("unwrapped-count"), instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	shared, err := instrument.NewRecorder(instrument.WithMeterProvider(&sharedProvider{r.Provider(), new(instrument.SeriesSet)}),
		instrument.WithModelName("unwrapped-count-shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	for _, c := range []struct {
		model, engine string
		want          int
	}{
		{"unwrapped-count", "1", 1},
		{"unwrapped-count", "1", 1},
		{"unwrapped-count", "2", 0},
		{"unwrapped-count-shared", "0", 0},
		{"other", "0", 0},
	} {
		if got := instrument.CountUnwrapped(c.model, c.engine); got != c.want {
			t.Errorf("CountUnwrapped(%q, %q) = %d, want %d", c.model, c.engine, got, c.want)
		}
	}
	kind := []string{"model_name", "unwrapped-count", "kind", "unwrapped_provider"}
	if got := r.Value(invalidFamily, append(kind, "engine", "1")...); got != 2 {
		t.Errorf("engine 1: %v unwrapped_provider events, want 2", got)
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}
	if got := instrument.CountUnwrapped("unwrapped-count", "1"); got != 0 {
		t.Errorf("after Close: CountUnwrapped = %d, want 0", got)
	}
}
