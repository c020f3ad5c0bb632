package instrument_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// deadlockTimeout is how long a test waits for a call that deadlocks when
// it fails: a pass returns at once.
const deadlockTimeout = 30 * time.Second

// returns runs f and fails the test when it has not returned after
// deadlockTimeout: it deadlocked.
func returns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(deadlockTimeout):
		t.Fatalf("%s has not returned after %v: deadlocked", what, deadlockTimeout)
	}
}

// callbackRecorder is what a refusal path of TestErrorHandlerCallsBack
// works on: a Recorder whose handler collects every report and, on the
// first, calls back into the library with callback.
type callbackRecorder struct {
	rec      *instrument.Recorder
	e        *instrument.Engine
	ev       *instrument.Events
	mu       sync.Mutex
	reported []error
	called   chan struct{} // closed once the first report's callback returned
}

func newCallbackRecorder(t *testing.T, callback func(c *callbackRecorder), opts ...instrument.Option) *callbackRecorder {
	t.Helper()
	c := &callbackRecorder{called: make(chan struct{})}
	var first atomic.Bool
	handler := instrument.WithErrorHandler(func(err error) {
		c.mu.Lock()
		c.reported = append(c.reported, err)
		c.mu.Unlock()
		if first.CompareAndSwap(false, true) {
			callback(c)
			close(c.called)
		}
	})
	r := testutil.New(t)
	base := []instrument.Option{instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model), handler}
	rec, err := instrument.NewRecorder(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { returns(t, "Close at the end", func() { _ = rec.Close() }) })
	c.rec = rec
	c.e, _ = rec.Engine(0)
	c.ev = c.e.Events()
	return c
}

// reports returns how many reports say want.
func (c *callbackRecorder) reports(want string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, err := range c.reported {
		if strings.Contains(err.Error(), want) {
			n++
		}
	}
	return n
}

// scheduled is a request of c's engine, scheduled at ms(1).
func scheduled() *stats.Timeline {
	tl := stats.NewTimeline(stats.Request{Arrival: t0, PromptTokens: 10})
	tl.Scheduled(ms(1), 0, 0)
	return tl
}

// Defect 10 of issue 32: an error handler that calls back into the
// library (Flush, Close, another Record method) from inside a report
// returned from none of them, on every path where the library reports a
// refusal: the window's refusals were reported with its lock held. Each
// path's refusal is still counted once and reported once, and the refusal
// of the handler's own call is reported too.
func TestErrorHandlerCallsBack(t *testing.T) {
	t.Parallel()
	callbacks := map[string]func(c *callbackRecorder){
		"Flush": func(c *callbackRecorder) { c.ev.Flush() },
		"Close": func(c *callbackRecorder) { _ = c.rec.Close() },
		// refused itself: a nested report, with the Recorder open
		"record": func(c *callbackRecorder) { c.e.RecordChunkGap(context.Background(), -1) },
	}
	paths := []struct {
		name   string
		opts   []instrument.Option
		kind   string // the refusal's kind; "" when it is not counted
		marker string // what its report says
		refuse func(c *callbackRecorder)
	}{
		{"Events window by Flush", []instrument.Option{manualWindows}, "output", "events refused in the step",
			func(c *callbackRecorder) { c.ev.Output(scheduled(), ms(2), 0); c.ev.Flush() }},
		{"Events window by Close", []instrument.Option{manualWindows}, "output", "events refused in the step",
			func(c *callbackRecorder) { c.ev.Output(scheduled(), ms(2), 0); _ = c.rec.Close() }},
		{"Events window by its timer", []instrument.Option{instrument.WithEventWindow(instrument.MinEventWindow)},
			"output", "events refused in the step",
			func(c *callbackRecorder) {
				c.ev.Output(scheduled(), ms(2), 0)
				c.ev.Output(scheduled(), ms(2), 1) // opens the window
				<-c.called
			}},
		{"Events full window", []instrument.Option{manualWindows}, "output", "events refused in the step",
			func(c *callbackRecorder) {
				c.ev.Output(scheduled(), ms(2), 0)
				tl := scheduled()
				for range 1 << 16 { // a TTFT, then inter-token latencies: the window is full
					c.ev.Output(tl, ms(2), 1)
				}
			}},
		{"Events window refused whole", []instrument.Option{manualWindows}, "iteration", "Events refused",
			func(c *callbackRecorder) { // the second window passes the generation tokens' total
				c.ev.Output(scheduled(), ms(2), instrument.MaxTotal/2+1)
				c.ev.Flush()
				c.ev.Output(scheduled(), ms(2), instrument.MaxTotal/2+1)
				c.ev.Flush()
			}},
		{"Events of a closed Recorder", []instrument.Option{manualWindows}, "", "Events.Output refused",
			func(c *callbackRecorder) { _ = c.rec.Close(); c.ev.Output(scheduled(), ms(2), 1) }},
		{"RecordIteration", nil, "iteration", "RecordIteration refused",
			func(c *callbackRecorder) { c.e.RecordIteration(context.Background(), nil) }},
		{"RecordIteration's refused events", nil, "output", "events refused in the step",
			func(c *callbackRecorder) {
				var step stats.Iteration
				step.Output(scheduled(), ms(2), 0)
				c.e.RecordIteration(context.Background(), &step)
			}},
		{"Recorder.RecordIteration of an unknown rank", nil, "", "unknown engine",
			func(c *callbackRecorder) { c.rec.RecordIteration(context.Background(), 7, &stats.Iteration{}) }},
		{"RecordFinished", nil, "finished_request", "RecordFinished refused",
			func(c *callbackRecorder) { c.e.RecordFinished(context.Background(), nil) }},
		{"a setter", nil, "scheduler", "SetKVCacheUsage refused",
			func(c *callbackRecorder) { c.e.SetKVCacheUsage(2) }},
		{"a feature without its option", nil, "feature_not_configured", "WithSpecDecoding",
			func(c *callbackRecorder) {
				c.e.RecordScheduler(context.Background(), &stats.Scheduler{SpecDecoding: &stats.SpecDecoding{}})
			}},
		{"RecordHTTPRequest", nil, "http_request", "RecordHTTPRequest refused",
			func(c *callbackRecorder) {
				c.e.RecordHTTPRequest(context.Background(), "/v1/completions", "POST", 200, -1)
			}},
		{"a Backend", nil, "client_chunk_gap", "Backend.RecordChunkGap refused",
			func(c *callbackRecorder) {
				b, err := c.e.Backend("10.0.0.1:8000", "")
				if err != nil {
					panic(err)
				}
				b.RecordChunkGap(context.Background(), stats.OperationDefault, -1)
			}},
	}
	for _, p := range paths {
		for name, callback := range callbacks {
			t.Run(p.name+"/"+name, func(t *testing.T) {
				c := newCallbackRecorder(t, callback, p.opts...)
				returns(t, "the refused call", func() { p.refuse(c) })
				select {
				case <-c.called:
				case <-time.After(deadlockTimeout):
					t.Fatal("the handler's callback has not returned: deadlocked")
				}
				if n := c.reports(p.marker); n != 1 {
					t.Errorf("the refusal (%q) reported %d times, want once: %v", p.marker, n, c.reported)
				}
				if p.kind != "" {
					if n := instrument.InvalidCount(c.e, p.kind); n != 1 {
						t.Errorf("%s refusals counted %d, want 1", p.kind, n)
					}
				}
				if name == "record" && c.reports("engine 0: RecordChunkGap refused") != 1 {
					t.Errorf("the handler's own refused call is not reported once: %v", c.reported)
				}
				// Every later call returns as well.
				returns(t, "a later Flush", c.ev.Flush)
				returns(t, "a later Close", func() { _ = c.rec.Close() })
			})
		}
	}
}

// A handler whose every call back is refused is called again from inside
// itself: MaxNestedReports deep, then the report is dropped and the calls
// return. Every refusal is counted, the dropped one included.
func TestErrorHandlerRecursion(t *testing.T) {
	var c *callbackRecorder
	calls := 0
	r := testutil.New(t)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model),
		manualWindows, instrument.WithErrorHandler(func(error) {
			calls++
			c.ev.Output(scheduled(), ms(2), 0) // refused when the window is recorded, at the Flush
			c.ev.Flush()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { returns(t, "Close", func() { _ = rec.Close() }) })
	e, _ := rec.Engine(0)
	c = &callbackRecorder{rec: rec, e: e, ev: e.Events()}
	returns(t, "the refused call", func() { c.ev.Output(scheduled(), ms(2), 0); c.ev.Flush() })
	if calls != instrument.MaxNestedReports {
		t.Errorf("the handler was called %d times, want MaxNestedReports (%d)", calls, instrument.MaxNestedReports)
	}
	if n := instrument.InvalidCount(e, "output"); n != int64(calls)+1 {
		t.Errorf("%d refusals counted, want %d: the first and one per call", n, calls+1)
	}

	// After Close, a handler that calls Flush on each report is refused
	// each time (ErrClosed), and ends too.
	closed := 0
	rec2, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName("other"),
		instrument.WithErrorHandler(func(err error) {
			if !errors.Is(err, instrument.ErrClosed) {
				t.Errorf("report %v, want ErrClosed", err)
			}
			closed++
			c.ev.Flush()
		}))
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := rec2.Engine(0)
	c = &callbackRecorder{ev: e2.Events()}
	_ = rec2.Close()
	returns(t, "a Flush after Close", c.ev.Flush)
	if closed != instrument.MaxNestedReports {
		t.Errorf("the handler was called %d times after Close, want %d", closed, instrument.MaxNestedReports)
	}
}

// MaxNestedReports bounds nesting, not concurrency: more refusals than it
// on as many goroutines, each while the handler is still busy with the
// others, each reach the handler. The handler holds every call until all
// the refused calls are either in it or have returned, so the test waits
// for no time: before the fix, 44 of 300 returned unreported.
func TestErrorHandlerConcurrentReports(t *testing.T) {
	const goroutines = instrument.MaxNestedReports + 44
	in, returned, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var handled atomic.Int64
	r := testutil.New(t)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model),
		instrument.WithErrorHandler(func(error) {
			handled.Add(1)
			in <- struct{}{}
			<-release
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { returns(t, "Close", func() { _ = rec.Close() }) })
	e, _ := rec.Engine(0)
	var wg sync.WaitGroup
	var early atomic.Int64 // refused calls that returned before the handler was released
	for range goroutines {
		wg.Go(func() {
			e.SetKVCacheUsage(2) // refused: a fraction above 1
			select {
			case <-release:
			default:
				early.Add(1)
				returned <- struct{}{}
			}
		})
	}
	timeout := time.After(deadlockTimeout)
	for range goroutines {
		select {
		case <-in:
		case <-returned:
		case <-timeout:
			t.Fatal("the refused calls neither reached the handler nor returned: deadlocked")
		}
	}
	close(release)
	wg.Wait()
	if got := handled.Load(); got != goroutines || early.Load() != 0 {
		t.Errorf("%d concurrent refusals: the handler got %d, %d returned unreported; want all %d reported",
			goroutines, got, early.Load(), goroutines)
	}
	if n := instrument.InvalidCount(e, "scheduler"); n != goroutines {
		t.Errorf("%d refusals counted, want %d", n, goroutines)
	}
}
