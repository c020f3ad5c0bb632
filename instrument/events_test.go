package instrument_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/testlog"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// eventsRecorder is a Recorder on a testutil.Reader whose refusals the test
// takes from errs (any left fail it), closed at the end of the test.
func eventsRecorder(t *testing.T, opts ...instrument.Option) (*testutil.Reader, *instrument.Recorder, *testutil.Errors) {
	t.Helper()
	r := testutil.New(t)
	errs := collectErrors(t)
	base := []instrument.Option{instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model), errs.Option()}
	rec, err := instrument.NewRecorder(append(base, opts...)...)
	if err != nil {
		t.Fatalf("NewRecorder: %v", err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return r, rec, errs
}

// manualWindows is WithEventWindow's longest window, so that a test ends
// its windows with Flush, at the times it chooses.
var manualWindows = instrument.WithEventWindow(instrument.MaxEventWindow)

// An event-driven engine's requests through Events, in four windows: one
// iteration-tokens observation per window with output, each the prompt
// tokens computed for the requests whose first output came in it plus its
// output tokens; a window with a finish alone observes nothing; every
// request-level family is as from steps.
func TestEventsWindows(t *testing.T) {
	r, rec, errs := eventsRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()

	// a: queued before its tokenization, 200 of its 600 tokens in the prefix
	// cache; b: a decode node's request, its 300 tokens' KV transferred; c:
	// aborted while queued.
	a := stats.NewTimeline(stats.Request{Arrival: t0})
	b := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 300})
	c := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 50})
	ev.Queued(a, ms(1))
	ev.Queued(c, ms(1))
	ev.Tokenized(a, ms(2), 600)
	ev.Scheduled(a, ms(3), 200, 0)
	ev.Scheduled(b, ms(3), 0, 300)

	ev.Output(a, ms(20), 1)
	ev.Output(b, ms(20), 1)
	ev.Flush() // 400 computed + 2 generated

	ev.Output(a, ms(40), 2)
	ev.Output(b, ms(40), 1)
	ev.Finish(b, ms(40), stats.FinishStop)
	ev.Flush() // 3 generated

	ev.Finish(c, ms(50), stats.FinishAbort)
	ev.Flush() // no output: no observation

	ev.Output(b, ms(60), 1) // b has finished: dropped, not refused
	ev.Output(a, ms(60), 0) // refused: no token
	ev.Output(a, ms(60), 1)
	ev.Finish(a, ms(60), stats.FinishLength)
	ev.Flush() // 1 generated
	ev.Flush() // no window is open: nothing

	if err := errors.Join(refusals(errs)...); err == nil || !strings.Contains(err.Error(), "tokens = 0") {
		t.Errorf("refusals %v, want the output of 0 tokens", err)
	}
	if got := r.Value(invalidFamily, withLabels("kind", "output")...); got != 1 {
		t.Errorf("invalid output events %v, want 1", got)
	}
	if h := r.Histogram("vllm:iteration_tokens_total", withLabels()...); h.Count != 3 || h.Sum != 406 {
		t.Errorf("iteration tokens: %d windows, %v tokens; want 3 windows (the abort's has no output), 402+3+1 tokens", h.Count, h.Sum)
	}
	checkTheRule(t, r, 406, 6, stats.PromptTokens{Computed: 400, LocalCacheHit: 200, ExternalKVTransfer: 300})
	for reason, want := range map[string]float64{"stop": 1, "abort": 1, "length": 1, "error": 0} {
		if got := r.Value("vllm:request_success_total", withLabels("finished_reason", reason)...); got != want {
			t.Errorf("requests finished by %s: %v, want %v", reason, got, want)
		}
	}
	for family, want := range map[string]struct {
		count uint64
		sum   float64
	}{
		"vllm:request_prompt_tokens":             {3, 950},
		"vllm:request_generation_tokens":         {3, 6},
		"vllm:time_to_first_token_seconds":       {2, 0.04},
		"vllm:inter_token_latency_seconds":       {3, 0.02 + 0.02 + 0.02},
		"vllm:e2e_request_latency_seconds":       {3, 0.04 + 0.05 + 0.06},
		"vllm:request_params_n":                  {3, 3},
		"vllm:request_max_num_generation_tokens": {3, 6},
	} {
		if h := r.Histogram(family, withLabels()...); h.Count != want.count || !approx(h.Sum, want.sum) {
			t.Errorf("%s: count %d, sum %v; want %d, %v", family, h.Count, h.Sum, want.count, want.sum)
		}
	}
}

// checkTheRule checks the token counters of engine 0, and that the iteration
// tokens are the computed prompt tokens plus the generation tokens, and the
// prompt tokens the sum over sources.
func checkTheRule(t *testing.T, r *testutil.Reader, iterationTokens, generation float64, p stats.PromptTokens) {
	t.Helper()
	bySource := map[string]float64{"local_compute": float64(p.Computed), "local_cache_hit": float64(p.LocalCacheHit),
		"external_kv_transfer": float64(p.ExternalKVTransfer)}
	var sum float64
	for source, want := range bySource {
		got := r.Value("vllm:prompt_tokens_by_source_total", withLabels("source", source)...)
		if got != want {
			t.Errorf("prompt tokens from %s: %v, want %v", source, got, want)
		}
		sum += got
	}
	if total := r.Value("vllm:prompt_tokens_total", withLabels()...); total != sum || total != float64(p.Total()) {
		t.Errorf("prompt tokens %v, want %v, the sum over sources (%v)", total, p.Total(), sum)
	}
	gen := r.Value("vllm:generation_tokens_total", withLabels()...)
	if gen != generation {
		t.Errorf("generation tokens %v, want %v", gen, generation)
	}
	h := r.Histogram("vllm:iteration_tokens_total", withLabels()...)
	if h.Sum != iterationTokens || h.Sum != bySource["local_compute"]+gen {
		t.Errorf("iteration tokens sum %v, want %v = local_compute %v + generation %v", h.Sum, iterationTokens, bySource["local_compute"], gen)
	}
}

// The timer ends a window with no call from the engine: its events reach
// the exports without Flush or Close.
func TestEventsTimerEndsWindow(t *testing.T) {
	r, rec, _ := eventsRecorder(t, instrument.WithEventWindow(instrument.MinEventWindow))
	e, _ := rec.Engine(0)
	ev := e.Events()
	now := time.Now()
	tl := stats.NewTimeline(stats.Request{Arrival: now, PromptTokens: 40})
	ev.Scheduled(tl, now, 0, 0)
	ev.Output(tl, now, 1)
	ev.Finish(tl, now, stats.FinishStop)
	deadline := time.Now().Add(20 * time.Second) // far above a 1 ms window, on a loaded machine
	for r.Value("vllm:request_success_total", withLabels("finished_reason", "stop")...) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the window was not recorded 20 s after its events")
		}
		time.Sleep(time.Millisecond)
	}
	if h := r.Histogram("vllm:iteration_tokens_total", withLabels()...); h.Count != 1 || h.Sum != 41 {
		t.Errorf("iteration tokens: %d windows, %v tokens; want 1, 40 + 1", h.Count, h.Sum)
	}
	// Later events open a window of their own.
	tl2 := stats.NewTimeline(stats.Request{Arrival: now, PromptTokens: 10})
	ev.Scheduled(tl2, now, 0, 0)
	ev.Output(tl2, now, 1)
	for r.Histogram("vllm:iteration_tokens_total", withLabels()...).Count != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the second window was not recorded")
		}
		time.Sleep(time.Millisecond)
	}
}

// Close records the open window before it closes the Recorder: with the
// longest window, nothing ended it before.
func TestEventsCloseRecordsLastWindow(t *testing.T) {
	r, rec, _ := eventsRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 100})
	ev.Scheduled(tl, ms(1), 60, 0)
	ev.Output(tl, ms(5), 1)
	ev.Finish(tl, ms(6), stats.FinishStop)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	// The histograms stay after Close; the counters left with the callback.
	if h := r.Histogram("vllm:iteration_tokens_total", withLabels()...); h.Count != 1 || h.Sum != 41 {
		t.Errorf("iteration tokens after Close: %d windows, %v tokens; want 1, 40 + 1", h.Count, h.Sum)
	}
	if h := r.Histogram("vllm:e2e_request_latency_seconds", withLabels()...); h.Count != 1 {
		t.Errorf("e2e latencies after Close: %d, want 1", h.Count)
	}
}

// An event of a request that has finished is dropped: an abort from another
// goroutine may come first. An event timed up to a second before the
// request's latest one takes that time; one earlier still is refused.
func TestEventsDropAndSkew(t *testing.T) {
	r, rec, errs := eventsRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()
	base := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }

	late := stats.NewTimeline(stats.Request{Arrival: base, PromptTokens: 10})
	ev.Scheduled(late, at(2*time.Second), 0, 0)
	ev.Output(late, at(1500*time.Millisecond), 1) // 0.5 s before: at the scheduling's time
	ev.Output(late, at(3*time.Second), 1)
	ev.Output(late, at(time.Second), 1) // 2 s before: refused
	ev.Finish(late, at(4*time.Second), stats.FinishAbort)
	ev.Output(late, at(5*time.Second), 1)                // after the abort: dropped
	ev.Finish(late, at(5*time.Second), stats.FinishStop) // dropped
	ev.Scheduled(late, at(5*time.Second), 0, 0)          // dropped
	ev.Flush()

	reported := refusals(errs)
	if len(reported) != 1 || !errors.Is(reported[0], stats.ErrOutOfOrder) {
		t.Errorf("refusals %v, want one, the output 2 s early", reported)
	}
	if got := r.Value(invalidFamily, withLabels("kind", "output")...); got != 1 {
		t.Errorf("invalid output events %v, want 1", got)
	}
	if got := r.Histogram("vllm:time_to_first_token_seconds", withLabels()...); got.Count != 1 || !approx(got.Sum, 2) {
		t.Errorf("TTFT %+v, want one of 2 s: the early output at the scheduling's time", got)
	}
	if got := r.Value("vllm:generation_tokens_total", withLabels()...); got != 2 {
		t.Errorf("generation tokens %v, want 2", got)
	}
	for reason, want := range map[string]float64{"abort": 1, "stop": 0} {
		if got := r.Value("vllm:request_success_total", withLabels("finished_reason", reason)...); got != want {
			t.Errorf("requests finished by %s: %v, want %v", reason, got, want)
		}
	}
}

// A window that reaches its bound of values is recorded at once, without
// waiting for its end.
func TestEventsFullWindow(t *testing.T) {
	t.Parallel()
	r, rec, _ := eventsRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 1})
	ev.Scheduled(tl, t0, 0, 0)
	const outputs = 1 << 16 // one TTFT, then inter-token latencies
	for i := range outputs {
		ev.Output(tl, t0.Add(time.Duration(i)*time.Microsecond), 1)
	}
	if h := r.Histogram("vllm:iteration_tokens_total", withLabels()...); h.Count != 1 || h.Sum != outputs+1 {
		t.Errorf("iteration tokens before Flush: %d windows, %v tokens; want the full window, %d tokens", h.Count, h.Sum, outputs+1)
	}
}

// Requests of many goroutines, each driven by its own goroutine while others
// abort some of them, end windows and scrape: every token, request and
// parent counts exactly once, THE RULE holds, and no event is refused
// (run with -race).
func TestEventsConcurrent(t *testing.T) {
	h := newScrapedHarness(t, instrument.WithEventWindow(instrument.MinEventWindow))
	e := h.engine(0)
	ev := e.Events()
	const goroutines, requests = 8, 40

	type request struct {
		children []*stats.Timeline
		local    int64
	}
	all := make([][]request, goroutines)
	done := make(chan struct{})
	var background sync.WaitGroup
	background.Go(func() { // ends windows at its own pace, beside the timer
		for {
			select {
			case <-done:
				return
			default:
				ev.Flush()
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	background.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				if _, err := h.tryScrape(); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	var workers, aborts sync.WaitGroup
	for g := range goroutines {
		workers.Go(func() {
			for i := range requests {
				n := int64(1 + i%3)
				req := request{children: stats.NewTimelines(stats.Request{Arrival: time.Now(), N: n}), local: int64(i % 7)}
				all[g] = append(all[g], req)
				for k, tl := range req.children {
					ev.Queued(tl, time.Now())
					if k == 2 && i%2 == 0 {
						ev.Finish(tl, time.Now(), stats.FinishError) // fails before its tokenization
						continue
					}
					ev.Tokenized(tl, time.Now(), 32)
					ev.Scheduled(tl, time.Now(), req.local, 0)
					ev.Output(tl, time.Now(), 1)
					if i%5 == 0 { // aborted by another goroutine, racing the request's own end
						aborts.Go(func() { ev.Finish(tl, time.Now(), stats.FinishAbort) })
					}
					for range i % 4 {
						ev.Output(tl, time.Now(), 2)
					}
					ev.Finish(tl, time.Now(), stats.FinishStop)
				}
			}
		})
	}
	workers.Wait()
	aborts.Wait()
	close(done)
	background.Wait()
	ev.Flush()

	var want struct {
		generation, parents, children, finishedBefore int64
		prompt                                        stats.PromptTokens
	}
	for _, reqs := range all {
		for _, req := range reqs {
			want.parents++
			for _, tl := range req.children {
				if !tl.Done() {
					t.Fatal("a request did not finish")
				}
				want.children++
				want.generation += tl.Generated()
				if tl.Generated() > 0 {
					want.prompt.Computed += 32 - req.local
					want.prompt.LocalCacheHit += req.local
				}
			}
		}
	}
	s := h.collect()
	checkPromptTokens(t, s, "0", promptTokens{total: float64(want.prompt.Total()), computed: float64(want.prompt.Computed),
		localHit: float64(want.prompt.LocalCacheHit), cached: float64(want.prompt.LocalCacheHit)})
	checkCounter(t, s, float64(want.generation), "vllm:generation_tokens", engineLabels("0")...)
	it := s.get(t, "vllm:iteration_tokens_total", engineLabels("0")...)
	if it.sum != float64(want.prompt.Computed+want.generation) {
		t.Errorf("iteration tokens sum %v, want local_compute %d + generation %d", it.sum, want.prompt.Computed, want.generation)
	}
	var finished float64
	for _, reason := range stats.FinishReasons() {
		finished += s.get(t, "vllm:request_success", engineLabels("0", "finished_reason", reason.String())...).value
	}
	if finished != float64(want.children) {
		t.Errorf("%v requests finished, want %d", finished, want.children)
	}
	if n := s.get(t, "vllm:request_params_n", engineLabels("0")...); n.count != uint64(want.parents) {
		t.Errorf("request_params_n observed %d times, want once per parent, %d", n.count, want.parents)
	}
	// The harness fails the test on any refusal.
}

// Events and their Timelines refuse bad input, count it by kind and report
// it, and never panic; a nil Events, or one of a closed Recorder, reports
// every call.
func TestEventsBadInput(t *testing.T) {
	testlog.StdLogger(t) // what a nil Engine refuses goes to otel.Handle, which logs it: to the test's log
	r, rec, errs := eventsRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()
	var zero stats.Timeline
	ok := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 5})
	ev.Scheduled(ok, ms(1), 0, 0)
	for _, call := range []func(){
		func() { ev.Output(nil, ms(1), 1) },
		func() { ev.Output(&zero, ms(1), 1) },
		func() { ev.Preempt(nil, ms(1)) },
		func() { ev.Finish(&zero, ms(1), stats.FinishStop) },
		func() { ev.Output(ok, time.Time{}, 1) },
		func() { ev.Output(ok, ms(2), -3) },
		func() { ev.Finish(ok, ms(2), stats.FinishReason(42)) },
		func() { ev.Scheduled(nil, ms(1), 0, 0) },
		func() { ev.Tokenized(ok, ms(2), 10) },
	} {
		call()
	}
	ev.Flush()
	for kind, want := range map[string]float64{"output": 4, "preempt": 1, "finish": 2} {
		if got := r.Value(invalidFamily, withLabels("kind", kind)...); got != want {
			t.Errorf("invalid %s events %v, want %v", kind, got, want)
		}
	}
	// The Timeline refusals (Scheduled, Tokenized) are the request's, kept
	// until one of its step events takes them.
	ev.Output(ok, ms(3), 1)
	ev.Flush()
	if got := r.Value(invalidFamily, withLabels("kind", "request")...); got != 1 {
		t.Errorf("invalid request events (the refused Tokenized) %v, want 1", got)
	}
	if got := r.Value("vllm:generation_tokens_total", withLabels()...); got != 1 {
		t.Errorf("generation tokens %v, want 1: the good output only", got)
	}
	refusals(errs)

	var none *instrument.Events
	none.Output(ok, ms(4), 1)
	none.Flush()
	var zeroEngine instrument.Engine
	if zeroEngine.Events() != nil {
		t.Error("a zero Engine's Events is not nil")
	}
	_ = rec.Close()
	ev.Output(ok, ms(5), 1)
	ev.Flush()
	if got := refusals(errs); len(got) != 2 || !errors.Is(got[0], instrument.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed twice", got)
	}
}

// WithEventWindow refuses a window outside MinEventWindow to MaxEventWindow.
func TestEventWindowOption(t *testing.T) {
	r := testutil.New(t)
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, instrument.MaxEventWindow + 1} {
		_, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model),
			instrument.WithEventWindow(d))
		if !errors.Is(err, instrument.ErrConfig) || !errors.Is(err, stats.ErrOutOfRange) || !strings.Contains(err.Error(), "WithEventWindow") {
			t.Errorf("WithEventWindow(%v): %v, want ErrConfig naming the option", d, err)
		}
	}
}

// Reporting an event allocates nothing once the window's lists have grown.
func TestEventsDoNotAllocate(t *testing.T) {
	_, rec, _ := eventsRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()
	tls := make([]*stats.Timeline, 64)
	for i := range tls {
		tls[i] = stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 100, Context: context.Background()})
		ev.Scheduled(tls[i], t0, 20, 0)
	}
	now := t0
	step := func() {
		now = now.Add(10 * time.Millisecond)
		for _, tl := range tls {
			ev.Output(tl, now, 1)
		}
		ev.Flush()
	}
	step() // first outputs, then the lists' storage
	step()
	if allocs := testing.AllocsPerRun(50, func() {
		now = now.Add(10 * time.Millisecond)
		ev.Output(tls[0], now, 1)
	}); allocs != 0 {
		t.Errorf("Events.Output allocates %v times, want 0", allocs)
	}
}

// SetWindow changes the length of the windows that follow, not of the open
// one (issue 32, item 6): the window opened after it lasts the new length,
// which its timer ends; a length out of bounds is refused and changes
// nothing.
func TestEventsSetWindow(t *testing.T) {
	r, rec, _ := eventsRecorder(t, manualWindows)
	e, _ := rec.Engine(0)
	ev := e.Events()
	now := time.Now()
	a := stats.NewTimeline(stats.Request{Arrival: now, PromptTokens: 40})
	ev.Scheduled(a, now, 0, 0)
	ev.Output(a, now, 1) // opens a window of MaxEventWindow
	if err := ev.SetWindow(instrument.MinEventWindow); err != nil {
		t.Fatalf("SetWindow(%v): %v", instrument.MinEventWindow, err)
	}
	if d, open := instrument.OpenWindow(ev); !open || d != instrument.MaxEventWindow {
		t.Errorf("the open window lasts %v (open %v) after SetWindow, want its own %v", d, open, instrument.MaxEventWindow)
	}
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, instrument.MaxEventWindow + 1} {
		if err := ev.SetWindow(d); !errors.Is(err, instrument.ErrConfig) || !errors.Is(err, stats.ErrOutOfRange) ||
			!strings.Contains(err.Error(), "SetWindow") {
			t.Errorf("SetWindow(%v): %v, want ErrConfig naming SetWindow", d, err)
		}
	}
	ev.Flush()

	// The next window lasts MinEventWindow: its timer records it, where a
	// window of MaxEventWindow would wait a minute. Its 1 ms may be over
	// by the time it is looked at (a loaded machine: the unit tests failed
	// on it so once), so only a window still open is measured here.
	ev.Output(a, time.Now(), 1)
	if d, open := instrument.OpenWindow(ev); open && d != instrument.MinEventWindow {
		t.Errorf("the next window lasts %v, want %v", d, instrument.MinEventWindow)
	}
	deadline := time.Now().Add(20 * time.Second) // far above 1 ms, far below a minute
	for r.Histogram("vllm:iteration_tokens_total", withLabels()...).Count != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the window of the new length was not recorded 20 s after its event")
		}
		time.Sleep(time.Millisecond)
	}

	// Safe for concurrent use with the events (the race detector checks).
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 100 {
			_ = ev.SetWindow(instrument.MinEventWindow + time.Duration(i)*time.Millisecond)
		}
	})
	wg.Go(func() {
		for range 100 {
			ev.Output(a, time.Now(), 1)
		}
	})
	wg.Wait()

	var none *instrument.Events
	if err := none.SetWindow(time.Second); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("nil Events' SetWindow: %v, want ErrUnknownEngine", err)
	}
	_ = rec.Close()
	if err := ev.SetWindow(time.Second); !errors.Is(err, instrument.ErrClosed) {
		t.Errorf("SetWindow after Close: %v, want ErrClosed", err)
	}
}
