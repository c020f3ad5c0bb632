package instrument

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// Errors of the Recorder; stats errors pass through unchanged and match the
// sentinels of package stats.
var (
	// ErrConfig reports an invalid option value at construction.
	ErrConfig = errors.New("instrument: invalid configuration")
	// ErrUnknownEngine reports an engine rank the Recorder does not serve
	// (or a nil Recorder or Engine).
	ErrUnknownEngine = errors.New("instrument: unknown engine")
	// ErrNilStats reports a nil *stats.Iteration, *stats.FinishedRequest or
	// *stats.Scheduler given to a Record method.
	ErrNilStats = errors.New("instrument: nil stats")
	// ErrClosed reports a Record method called on an Engine of a Recorder
	// that was closed (see Recorder.Close).
	ErrClosed = errors.New("instrument: recorder closed")
)

// reservedKeys are attribute keys the Recorder sets itself.
var reservedKeys = []string{KeyModelName, KeyEngine, KeySource, KeyFinishedReason, KeyWaitingReason,
	KeySleepState, KeyPosition, KeyGenAIOperationName, KeyGenAIProviderName, KeyGenAIRequestModel, KeyErrorType,
	KeyGenAIResponseModel, KeyPriority, KeyPolicy, KeyStage, KeyBackend, KeyBackendRole, KeyGenAITokenType, KeyKind,
	KeyServerAddress, KeyServerPort}

// Recorder records engine stats on OpenTelemetry instruments, one set of
// series per data-parallel engine. It is safe for concurrent use. Every
// Record method validates its whole input first and returns nothing:
// invalid input records nothing, is counted on NameInvalidEvents and is
// reported to the error handler (WithErrorHandler).
type Recorder struct {
	inst    *instruments
	engines []*Engine
	life    *lifetime
}

// lifetime is what a Recorder and its Engines share: the callback's
// registration, the series claims and the provider's flush.
type lifetime struct {
	closed  atomic.Bool
	once    sync.Once
	reg     metric.Registration
	release func()                          // releases every claim of the Recorder
	report  func(error)                     // the error handler, see WithErrorHandler; nil is not reported
	flush   func(ctx context.Context) error // the provider's ForceFlush; nil if it has none
}

// close flushes the provider, then unregisters the callback and releases the
// claims, once. Record methods fail from the start: what the flush exports
// is final.
func (l *lifetime) close(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.closed.Store(true)
		if l.flush != nil {
			if ferr := l.flush(ctx); ferr != nil && !shutDown(ferr) {
				err = fmt.Errorf("instrument: flushing the MeterProvider before Close: %w", ferr)
			}
		}
		if l.reg != nil {
			if uerr := l.reg.Unregister(); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
		if l.release != nil {
			l.release()
		}
	})
	return err
}

// flusher is a MeterProvider that exports what it holds on demand, such as
// the SDK's (its periodic readers export).
type flusher interface {
	ForceFlush(ctx context.Context) error
}

// flushOf returns the flush of mp or of a provider it wraps; for the global
// provider, that of the provider set by otel.SetMeterProvider, to which it
// forwards, as found at Close; nil if there is none.
func flushOf(mp metric.MeterProvider) func(ctx context.Context) error {
	if f, ok := find[flusher](mp); ok {
		return f.ForceFlush
	}
	if global := pointerIdentity(globalProvider); global != "" && providerIdentity(mp) == global {
		return func(ctx context.Context) error {
			if f, ok := find[flusher](otel.GetMeterProvider()); ok {
				return f.ForceFlush(ctx)
			}
			return nil
		}
	}
	return nil
}

// shutDown reports a flush error that only says the provider's readers are
// shut down (the SDK's ErrReaderShutdown, which this package cannot import):
// their final export is done, so there is nothing left to flush.
func shutDown(err error) bool {
	if err == nil {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !shutDown(e) {
				return false
			}
		}
		return true
	}
	return err.Error() == "reader is shutdown"
}

// NewRecorder creates the instruments on the configured MeterProvider and the
// series of every engine at zero.
//
// WithModelName is required. Every other option has a default: the global
// MeterProvider (WithMeterProvider; give the one your exporters read), the
// single engine 0 (WithEngines lists every data-parallel rank), a context
// length of 8192 (WithMaxModelLen) and no optional feature.
//
// It returns an error matching ErrConfig for invalid options, all of them
// joined (errors.Join), and one
// matching ErrDuplicateSeries when a live Recorder already exports the same
// series: one on the same MeterProvider with the same model name, an engine
// rank in common and the same constant attributes, or one on a provider
// exported together with this one (see SeriesSetProvider). A Recorder's
// series stay claimed while they are reported: until Close.
//
// The Recorder registers one callback on the provider, which reports its
// counters and gauges until Close: keep the Recorder as long as the
// provider, and Close it when its engines or model go away (Close flushes
// the provider first, so nothing recorded is lost).
func NewRecorder(opts ...Option) (*Recorder, error) {
	cfg := newConfig(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	meter := scopeMeter(cfg.meterProvider)
	global := viaGlobal(cfg.meterProvider, meter)
	inst, err := newSharedInstruments(meter, cfg.maxModelLen, global)
	if err != nil {
		return nil, err
	}
	report := cfg.errorHandler
	if report == nil {
		report = RateLimited(otel.Handle)
	}
	life := &lifetime{flush: flushOf(cfg.meterProvider), report: (&reporter{handle: report}).report}
	r := &Recorder{inst: inst, life: life}
	lora := &loraStates{}
	admission := newAdmissionState(&cfg)
	for _, rank := range cfg.engines {
		e := newEngine(inst, life, lora, &cfg, rank)
		e.admission = admission
		r.engines = append(r.engines, e)
	}
	release, err := claimSeries(&cfg, meter, global, r.engines)
	if err != nil {
		return nil, err
	}
	life.release = release
	// The callback reports every engine's series until Close, as the SDK
	// keeps reporting a synchronous instrument's series; the claims last as
	// long (see engineState).
	states := make([]*engineState, len(r.engines))
	for i, e := range r.engines {
		states[i] = e.engineState
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, st := range states {
			st.observe(o)
		}
		lora.observe(o, inst.loraInfo, states)
		admission.observe(o, inst.admissionRejections)
		return nil
	}, inst.observed...)
	if err != nil {
		release()
		return nil, fmt.Errorf("instrument: registering the callback: %w", err)
	}
	life.reg = reg
	for _, e := range r.engines {
		e.start(context.Background(), &cfg)
	}
	return r, nil
}

// Close ends the Recorder: it flushes the MeterProvider (when the provider,
// or one it wraps, has a ForceFlush method, as the SDK's has), so that what
// was recorded since the last export is delivered, then unregisters the
// callback that reports the Recorder's counters and gauges, so they leave
// the provider's exports, and releases the Recorder's series claims (see
// ErrDuplicateSeries). So both orders work at the end of a program,
// "defer mp.Shutdown(ctx)" then "defer rec.Close()" included, and so does
// unloading a model while the provider keeps running. A pull reader
// (Prometheus) cannot be flushed: a scrape after Close no longer has the
// counters.
//
// After Close, every Record method of the Recorder and its Engines records
// nothing and reports ErrClosed to the error handler (not counted: the
// counters are no longer exported). Histogram series and
// vllm:cache_config_info already recorded stay in the MeterProvider (the API
// cannot remove them). The flush is bounded by the provider's export timeout; use
// CloseContext to bound it yourself. An error says the flush or the
// unregistering failed; the Recorder is closed all the same. Close is
// idempotent: later calls return nil.
func (r *Recorder) Close() error { return r.CloseContext(context.Background()) }

// CloseContext is Close with a context bounding the provider's flush, an
// export that can take up to the exporter's timeout when the collector does
// not answer.
func (r *Recorder) CloseContext(ctx context.Context) error {
	if r == nil || r.life == nil {
		return nil
	}
	for _, e := range r.engines {
		e.events.close() // the last window, recorded while the Recorder is open
	}
	return r.life.close(ctx)
}

// validate reports every invalid option, joined (errors.Join), each with an
// error matching ErrConfig and, where one says what is wrong, a sentinel of
// package stats.
func (c *config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	switch {
	case c.modelName == "":
		bad("a model name is required: add WithModelName(the served model name): %w", stats.ErrInvalidLabel)
	case len(c.modelName) > MaxModelNameLen || !utf8.ValidString(c.modelName):
		bad("model name %q must be 1 to %d bytes of UTF-8 (WithModelName): %w",
			c.modelName, MaxModelNameLen, stats.ErrInvalidLabel)
	}
	if len(c.engines) == 0 {
		bad("no engines: give WithEngines at least one rank, or leave it out for the single engine 0")
	}
	for i, rank := range c.engines {
		if rank < 0 {
			bad("engine rank %d (WithEngines) must be 0 or more: %w", rank, stats.ErrNegative)
		}
		if slices.Contains(c.engines[:i], rank) {
			bad("engine rank %d is repeated in WithEngines", rank)
		}
	}
	if c.maxModelLen < 1 {
		bad("max model length %d (WithMaxModelLen) must be 1 or more: %w", c.maxModelLen, stats.ErrOutOfRange)
	}
	if err := checkEventWindow(c.eventWindow, "WithEventWindow"); err != nil {
		errs = append(errs, err)
	}
	if c.loraHistory < 1 || c.loraHistory > MaxLoRAHistory {
		bad("LoRA history %d (WithLoRAHistory) must be 1 to %d: %w", c.loraHistory, MaxLoRAHistory, stats.ErrOutOfRange)
	}
	if c.specPositions < 0 || c.specPositions > maxSpecPositions {
		bad("speculative tokens %d (WithSpecDecoding) must be 0 to %d: %w",
			c.specPositions, maxSpecPositions, stats.ErrOutOfRange)
	}
	exporter := exporterLabels(c.meterProvider)
	keys := make([]string, 0, len(c.attributes))
	for _, kv := range c.attributes {
		key := string(kv.Key)
		if !kv.Valid() || !utf8.ValidString(key) || !utf8.ValidString(kv.Value.String()) {
			bad("attribute %q (WithAttributes) is invalid: want a non-empty UTF-8 key and a UTF-8 value: %w",
				key, stats.ErrInvalidLabel)
			continue
		}
		keys = append(keys, key)
	}
	if err := checkLabelNames(reservedKeys, exporter, keys); err != nil {
		bad("attribute %w (WithAttributes): %w", err, stats.ErrInvalidLabel)
	} else if a := c.attribution; a != nil {
		if len(a.dims) == 0 {
			bad("WithAttribution: an Attribution without dimensions: make it with NewAttribution")
		}
		if err := checkLabelNames(usageKeys(), exporter, append(keys, a.names()...)); err != nil {
			bad("attribute or attribution dimension %w (WithAttributes, WithAttribution): %w", err, stats.ErrInvalidLabel)
		}
	}
	for _, s := range []string{c.genAIOperation, c.genAIProvider} {
		if s == "" || !utf8.ValidString(s) {
			bad("gen_ai attribute value %q (WithGenAI) must be non-empty UTF-8: %w", s, stats.ErrInvalidLabel)
		}
	}
	if c.simpleKVOffload != nil {
		if err := c.simpleKVOffload.Validate(); err != nil {
			bad("WithSimpleKVOffload: %w", err)
		}
	}
	if c.cacheConfig != nil {
		if err := c.cacheConfig.Validate(); err != nil {
			bad("WithCacheConfig: %w", err)
		}
		if err := checkLabelNames([]string{KeyEngine}, exporter, c.cacheConfig.Keys()); err != nil {
			bad("cache config key %w (WithCacheConfig): %w", err, stats.ErrInvalidLabel)
		}
	}
	return errors.Join(errs...)
}

// ReservedLabelsProvider is implemented by a MeterProvider whose exporter adds labels of its own
// (for example resource attributes copied onto every series): ReservedLabels
// returns their Prometheus label names, already translated. NewRecorder
// refuses, with ErrConfig, a constant attribute key or cache configuration key
// exported as one of them, which would fail every scrape. NewRecorder looks
// for it on the provider and on the providers it wraps (see
// SeriesSetProvider).
type ReservedLabelsProvider interface {
	metric.MeterProvider
	ReservedLabels() []string
}

// Labels of the OpenTelemetry Prometheus exporter, refused whatever the
// provider: the overflow series' label (an attribute named so would forge
// that series) and the prefix of the scope labels it adds unless told not to.
const (
	overflowLabel    = "otel_metric_overflow"
	scopeLabelPrefix = "otel_scope_"
)

// exporterLabels returns the labels an exporter of mp adds to every series.
func exporterLabels(mp metric.MeterProvider) []string {
	labels := []string{overflowLabel}
	if rp, ok := find[ReservedLabelsProvider](mp); ok {
		labels = append(labels, rp.ReservedLabels()...)
	}
	return labels
}

// checkLabelNames reports a key that cannot be a label of its own in a
// Prometheus scrape: one starting with "__" (reserved), one that becomes
// "le" or "quantile" (histogram and summary labels), a scope label of the
// exporter (otel_scope_*) or another label the exporter adds (exporter, see
// exporterLabels), and one that becomes the same label name as a reserved
// key or an earlier key. The OpenTelemetry Prometheus exporter
// merges colliding attributes into one label, joining their values with ';'
// (so "model.name" would corrupt model_name), and a label it adds itself
// fails the whole scrape.
func checkLabelNames(reserved, exporter, keys []string) error {
	owner := map[string]string{"le": "le", "quantile": "quantile"}
	for _, k := range reserved {
		owner[promLabel(k)] = k
	}
	for _, l := range exporter {
		owner[l] = "" // the exporter's
	}
	for _, k := range keys {
		label := promLabel(k)
		if strings.HasPrefix(k, "__") || strings.Trim(label, "_") == "" {
			return fmt.Errorf("%q is not a usable label name", k)
		}
		if strings.HasPrefix(label, scopeLabelPrefix) {
			return fmt.Errorf("%q becomes label %q, the prefix of the exporter's scope labels", k, label)
		}
		if other, taken := owner[label]; taken {
			if other == "" {
				return fmt.Errorf("%q becomes label %q, which the exporter adds", k, label)
			}
			return fmt.Errorf("%q becomes label %q, taken by %q", k, label, other)
		}
		owner[label] = k
	}
	return nil
}

// promLabel returns the Prometheus label name of an attribute key under the
// exporter's default translation: each run of characters other than
// [A-Za-z0-9] becomes one '_', and a name starting with a digit gets "key_".
func promLabel(key string) string {
	var b strings.Builder
	underscore := false
	for _, r := range key {
		if ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	label := b.String()
	if label != "" && '0' <= label[0] && label[0] <= '9' {
		label = "key_" + label
	}
	return label
}

// Engine returns the handle of one data-parallel engine by its rank, one of
// the ranks given to WithEngines (default: 0 alone).
func (r *Recorder) Engine(rank int) (*Engine, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: rank %d of a nil Recorder (use NewRecorder)", ErrUnknownEngine, rank)
	}
	for _, e := range r.engines {
		if e.rank == rank {
			return e, nil
		}
	}
	ranks := make([]int, len(r.engines))
	for i, e := range r.engines {
		ranks[i] = e.rank
	}
	return nil, fmt.Errorf("%w: rank %d; the Recorder serves ranks %v: give every rank to WithEngines",
		ErrUnknownEngine, rank, ranks)
}

// engineOrReport returns the engine of rank, or reports that there is none
// to the Recorder's error handler (nil then).
func (r *Recorder) engineOrReport(rank int, method string) *Engine {
	e, err := r.Engine(rank)
	if err != nil {
		if r != nil && r.life != nil {
			r.life.report(fmt.Errorf("instrument: %s refused: %w", method, err))
		} else {
			unbound(fmt.Errorf("instrument: %s refused: %w", method, err))
		}
	}
	return e
}

// RecordIteration records one step's outputs of an engine, including its
// finished requests. See Engine.RecordIteration. An unknown rank is
// reported to the error handler, and nothing is recorded.
func (r *Recorder) RecordIteration(ctx context.Context, rank int, it *stats.Iteration) {
	if e := r.engineOrReport(rank, "RecordIteration"); e != nil {
		e.RecordIteration(ctx, it)
	}
}

// RecordFinished records one finished request of an engine. See
// Engine.RecordFinished and RecordIteration.
func (r *Recorder) RecordFinished(ctx context.Context, rank int, f *stats.FinishedRequest) {
	if e := r.engineOrReport(rank, "RecordFinished"); e != nil {
		e.RecordFinished(ctx, f)
	}
}

// RecordScheduler records one scheduler step of an engine. See
// Engine.RecordScheduler and RecordIteration.
func (r *Recorder) RecordScheduler(ctx context.Context, rank int, s *stats.Scheduler) {
	if e := r.engineOrReport(rank, "RecordScheduler"); e != nil {
		e.RecordScheduler(ctx, s)
	}
}

// engineLabel is the engine attribute value of a rank.
func engineLabel(rank int) string { return strconv.Itoa(rank) }
