package instrument

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/infermetrics/infermetrics/stats"
)

// Refused input. The Record methods return nothing: a metrics call must not
// change an engine's control flow. Input they refuse records nothing, is
// counted on NameInvalidEvents by kind, and is reported to the Recorder's
// error handler (WithErrorHandler; default otel.Handle, rate-limited by
// RateLimited).

// NameInvalidEvents is the Recorder's own counter of refused input, by kind
// (KeyKind) and engine: a data-quality signal for a dashboard.
const NameInvalidEvents = "infermetrics.invalid_events"

// KeyKind is the attribute of NameInvalidEvents that says what was refused.
const KeyKind = "kind"

// InvalidInput says the invalid events series of a kind appear with the
// first refusal of that kind.
const InvalidInput Feature = HTTPServer + 1

// ErrorReportInterval is the least time between two errors that RateLimited
// passes on: at most one report per second per Recorder reaches the default
// handler, however many events a broken engine sends; the counter counts
// every one.
const ErrorReportInterval = time.Second

var (
	// ErrRecordedTwice reports a stats.Iteration given to RecordIteration a
	// second time without Reset: recording it would count it twice.
	ErrRecordedTwice = errors.New("instrument: iteration recorded twice")
	// ErrFeatureNotConfigured reports feature data (speculative decoding, KV
	// transfers, ...) on a Recorder built without the feature's option: the
	// data is recorded, but the feature's series are missing until then.
	ErrFeatureNotConfigured = errors.New("instrument: feature not configured")
)

// refusal is the kind of a refused input, the KeyKind value.
type refusal uint8

// The kinds beyond stats.EventKinds: the steps and requests of the Record
// methods, and the mistakes the Recorder catches.
const (
	refusedIteration refusal = iota + refusal(len(eventKinds))
	refusedScheduler
	refusedFinished
	refusedRequest
	refusedChunkGap
	refusedPDLegs
	refusedClientRequest
	refusedClientChunkGap
	refusedHTTPRequest
	refusedTwice
	refusedFeature
	refusedValue     // a value beyond its bound, dropped from a request recorded without it
	refusedUnwrapped // an engine an exporter found on a provider it could not complete (CountUnwrapped)
	refusedServerOperation

	numRefusals = iota + len(eventKinds)
)

// eventKinds are the stats events, the first kinds.
var eventKinds = [...]stats.EventKind{stats.KindRequest, stats.KindQueued, stats.KindScheduled,
	stats.KindOutput, stats.KindPreempt, stats.KindFinish}

// refusalLabels are the KeyKind values of the kinds past the stats events.
var refusalLabels = [numRefusals - len(eventKinds)]string{"iteration", "scheduler", "finished_request",
	"observed_request", "chunk_gap", "pd_legs", "client_request", "client_chunk_gap",
	"http_request", "recorded_twice", "feature_not_configured", "value_dropped", "unwrapped_provider",
	"server_operation"}

// String returns the KeyKind value.
func (k refusal) String() string {
	if int(k) < len(eventKinds) {
		return eventKinds[k].String()
	}
	return refusalLabels[int(k)-len(eventKinds)]
}

// refusalKinds lists every KeyKind value, for the catalog.
func refusalKinds() string {
	labels := make([]string, numRefusals)
	for k := range labels {
		labels[k] = refusal(k).String()
	}
	return strings.Join(labels, ", ")
}

// WithErrorHandler sets the function that gets every refused input's error
// (see NameInvalidEvents), synchronously, on the recording goroutine: it
// must be fast and safe for concurrent use. The default is
// RateLimited(otel.Handle). Tests use testutil.StrictErrors.
//
// The handler may call back into the library (Events.Flush, Recorder.Close,
// any Record method or setter): no lock of package instrument is held while
// it runs. It sees the refusal counted and the rest of the input recorded: a
// window of Events is recorded before its refusals are reported, so a Flush
// from the handler records the events that came since; a Close from it
// closes the Recorder, and later calls report ErrClosed. A refusal of the
// handler's own call is reported to it too, from inside itself: at most
// MaxNestedReports deep on a goroutine, and one deeper is counted but not
// reported, so that a handler whose every call back is refused still
// returns. Refusals on other goroutines are each reported, however many
// calls of the handler are in progress.
func WithErrorHandler(h func(error)) Option {
	return optionFunc(func(c *config) { c.errorHandler = h })
}

// MaxNestedReports bounds how deep a Recorder's error handler is called from
// inside itself (see WithErrorHandler): a handler whose call back into the
// library is refused is called again, on the same goroutine, from inside
// its own call, and without a bound one that does so on every report would
// never return. Calls on other goroutines are not bounded by it: each of
// their refusals reaches the handler, however many run at once.
const MaxNestedReports = 256

// reporter is a Recorder's error handler with that bound.
type reporter struct {
	handle func(error)
}

// handlerCalls is the calls of every Recorder's handler in progress, on any
// goroutine: while there are none, no report is nested, and report needs
// not read its stack.
var handlerCalls atomic.Int32

func (r *reporter) report(err error) {
	if err == nil {
		return
	}
	if handlerCalls.Load() > 0 && handlerDepth() >= MaxNestedReports {
		return
	}
	handlerCalls.Add(1)
	defer handlerCalls.Add(-1)
	r.call(err)
}

// call calls the handler: its frames on a goroutine's stack are the
// handler's calls in progress there (handlerDepth).
//
//go:noinline
func (r *reporter) call(err error) { r.handle(err) }

// callEntry is the entry of reporter.call, which handlerDepth looks for.
var callEntry = runtime.FuncForPC(reflect.ValueOf((*reporter).call).Pointer()).Entry()

// handlerDepth returns how many calls of a handler are in progress on the
// calling goroutine, up to MaxNestedReports: the frames of reporter.call
// on its stack. Go has no goroutine-local state; the stack is the
// goroutine's own.
func handlerDepth() int {
	var pcs [64]uintptr
	depth := 0
	for skip := 2; ; skip += len(pcs) {
		n := runtime.Callers(skip, pcs[:])
		for _, pc := range pcs[:n] {
			if f := runtime.FuncForPC(pc - 1); f != nil && f.Entry() == callEntry {
				if depth++; depth == MaxNestedReports {
					return depth
				}
			}
		}
		if n < len(pcs) {
			return depth
		}
	}
}

// RateLimited returns a handler that passes to h at most one error per
// ErrorReportInterval and drops the others, saying in the next error it
// passes how many it dropped. It is safe for concurrent use.
func RateLimited(h func(error)) func(error) {
	l := &limiter{handle: h, now: time.Now}
	return l.report
}

// limiter is RateLimited's state.
type limiter struct {
	handle  func(error)
	now     func() time.Time // time.Now; tests set it
	mu      sync.Mutex
	next    time.Time // the earliest time of the next report
	dropped int64
}

func (l *limiter) report(err error) {
	l.mu.Lock()
	now := l.now()
	if now.Before(l.next) {
		l.dropped++
		l.mu.Unlock()
		return
	}
	l.next = now.Add(ErrorReportInterval)
	dropped := l.dropped
	l.dropped = 0
	l.mu.Unlock()
	if dropped > 0 {
		err = fmt.Errorf("%w (and %d more refused since the previous report, not shown: at most one report per %v)",
			err, dropped, ErrorReportInterval)
	}
	l.handle(err)
}

// unbound reports the refusals of a nil or zero Engine or Backend, which
// have no Recorder: to otel.Handle, rate-limited.
var unbound = RateLimited(func(err error) { otel.Handle(err) })

// refuse counts and reports a refused input of kind k, with the engine and
// the method that refused it. Input to a closed Recorder is reported only:
// its counters are no longer exported. It must be called with no lock of
// the library held (see WithErrorHandler): under one, count the refusal
// with counted and report its error once the lock is released.
func (e *Engine) refuse(k refusal, method string, err error) {
	if e == nil || e.engineState == nil || e.life == nil {
		unbound(fmt.Errorf("instrument: %s refused: %w", method, err))
		return
	}
	e.life.report(e.counted(k, method, err))
}

// counted counts a refused input of kind k and returns the error that
// reports it.
func (e *Engine) counted(k refusal, method string, err error) error {
	if !errors.Is(err, ErrClosed) {
		e.c.invalid[k].Add(1)
	}
	switch k {
	case refusedFeature:
		return fmt.Errorf("instrument: engine %d: %w", e.rank, err)
	case refusedValue: // the rest was recorded
		return fmt.Errorf("instrument: engine %d: %s: %w", e.rank, method, err)
	}
	return fmt.Errorf("instrument: engine %d: %s refused: %w", e.rank, method, err)
}

// eventsRefused counts the events a step's Timelines and Iteration refused
// (stats.Iteration.Refused), and returns the error that reports them, once
// for the step.
func (e *Engine) eventsRefused(r stats.Refusals) error {
	var by []string
	for k, ek := range eventKinds {
		if n := r.Count(ek); n > 0 {
			e.c.invalid[k].Add(n)
			by = append(by, fmt.Sprintf("%s %d", ek, n))
		}
	}
	return fmt.Errorf("instrument: engine %d: %d events refused in the step (%s), the first: %w",
		e.rank, r.Total(), strings.Join(by, ", "), r.Err())
}

// reports are the errors a recording counted, for the error handler: its
// caller reports them once it holds no lock of the library.
type reports [2]error

// report hands each error of rs to the error handler (none are for a nil
// or zero Engine, which records nothing).
func (e *Engine) report(rs reports) {
	for _, err := range rs {
		if err != nil {
			e.life.report(err)
		}
	}
}

// features are the optional data of a step the Recorder reports once when
// its option is missing (see checkFeatures).
const (
	featSpecDecoding = iota
	featKVConnector
	featKVConsumer
	featKVResidency
	featKVOffload
	featKVOffloadCPU
	featCorruption
	featSimpleKVOffload
	featKVOffloadStoreThreshold
	numFeatures
)

// featureOptions are, by feature, the field that carries its data and the
// option that declares it.
var featureOptions = [numFeatures][2]string{
	{"Scheduler.SpecDecoding", "WithSpecDecoding(k)"},
	{"Scheduler.KVTransfer", "WithKVConnector()"},
	{"Scheduler.KVFetch", "WithKVConsumer()"},
	{"Scheduler.Evictions", "WithKVResidency()"},
	{"Scheduler.KVOffload", "WithKVOffload()"},
	{"Scheduler.KVOffload.CPU", "WithKVOffloadCPU()"},
	{"Iteration.CorruptedRequests", "WithCorruptionDetection()"},
	{"Scheduler.SimpleKVOffload", "WithSimpleKVOffload(cfg)"},
	{"Scheduler.KVOffload.CPU.StoresSkipped", "WithKVOffloadStoreThreshold(n)"},
}

// unconfigured counts, once per engine and feature, data of a feature the
// Recorder was not told about, and returns the error that reports it (nil
// after the first): its series then appear with the first non-zero value
// instead of at zero from start-up, and a dashboard's rate misses that
// first value. The data itself is recorded.
func (e *Engine) unconfigured(f int) error {
	if !e.warned[f].CompareAndSwap(false, true) {
		return nil
	}
	field, option := featureOptions[f][0], featureOptions[f][1]
	return e.counted(refusedFeature, "", fmt.Errorf("%w: %s is set, but NewRecorder was not given %s: "+
		"add %s so that its series exist at zero from start-up (the data is recorded)", ErrFeatureNotConfigured,
		field, option, option))
}

// checkFeatures reports a step's feature data without its option.
func (e *Engine) checkFeatures(s *stats.Scheduler) {
	report := func(f int) { e.life.report(e.unconfigured(f)) }
	if s.SpecDecoding != nil && e.specPositions == 0 {
		report(featSpecDecoding)
	}
	if s.KVTransfer != nil && !e.kvConnector {
		report(featKVConnector)
	}
	if s.KVFetch != nil && !e.kvConsumer {
		report(featKVConsumer)
	}
	if len(s.Evictions) > 0 && !e.kvResidency {
		report(featKVResidency)
	}
	if s.KVOffload != nil && !e.off.on {
		report(featKVOffload)
	}
	if s.KVOffload != nil && s.KVOffload.CPU != nil && !e.off.cpu {
		report(featKVOffloadCPU)
	}
	if s.SimpleKVOffload != nil && !e.off.simple.on {
		report(featSimpleKVOffload)
	}
	if k := s.KVOffload; k != nil && k.CPU != nil && k.CPU.StoresSkipped > 0 && !e.off.threshold {
		report(featKVOffloadStoreThreshold)
	}
}
