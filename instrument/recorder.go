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
	KeyStage}

// Recorder records engine stats on OpenTelemetry instruments, one set of
// series per data-parallel engine. It is safe for concurrent use. Every
// Record method validates its whole input first: on an error nothing is
// recorded.
type Recorder struct {
	inst    *instruments
	engines []*Engine
	life    *lifetime
}

// lifetime is what a Recorder and its Engines share: the callback's
// registration and the series claims.
type lifetime struct {
	closed  atomic.Bool
	once    sync.Once
	reg     metric.Registration
	release func() // releases every claim of the Recorder
}

// close unregisters the callback and releases the claims, once.
func (l *lifetime) close() error {
	var err error
	l.once.Do(func() {
		l.closed.Store(true)
		if l.reg != nil {
			err = l.reg.Unregister()
		}
		if l.release != nil {
			l.release()
		}
	})
	return err
}

// NewRecorder creates the instruments on the configured MeterProvider and the
// series of every engine at zero.
//
// It returns an error matching ErrConfig for an invalid option, and one
// matching ErrDuplicateSeries when a live Recorder already exports the same
// series: one on the same MeterProvider with the same model name, an engine
// rank in common and the same constant attributes, or one on a provider
// exported together with this one (see SeriesSetProvider). A Recorder's
// series stay claimed while they are reported: until Close.
//
// The Recorder registers one callback on the provider, which reports its
// counters and gauges until Close: keep the Recorder as long as the
// provider, and Close it when its engines or model go away.
func NewRecorder(opts ...Option) (*Recorder, error) {
	cfg := newConfig(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	meter := cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	inst, err := newInstruments(meter, cfg.maxModelLen)
	if err != nil {
		return nil, err
	}
	life := &lifetime{}
	r := &Recorder{inst: inst, life: life}
	for _, rank := range cfg.engines {
		r.engines = append(r.engines, newEngine(inst, life, &cfg, rank))
	}
	release, err := claimSeries(&cfg, r.engines)
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

// Close unregisters the callback that reports the Recorder's counters and
// gauges, so they leave the MeterProvider's exports, and releases the
// Recorder's series claims (see ErrDuplicateSeries). After Close, every
// Record method of the Recorder and its Engines returns an error matching
// ErrClosed and records nothing. Histogram and info gauge series already
// recorded stay in the MeterProvider (the API cannot remove them). Close is
// idempotent: later calls return nil. At the end of a program, shut the
// MeterProvider down (its final flush) before closing the Recorder, or the
// flush will not carry its counters and gauges.
func (r *Recorder) Close() error {
	if r == nil || r.life == nil {
		return nil
	}
	return r.life.close()
}

// validate reports an invalid option with an error matching ErrConfig and,
// where one says what is wrong, a sentinel of package stats.
func (c *config) validate() error {
	if c.modelName == "" || len(c.modelName) > MaxModelNameLen || !utf8.ValidString(c.modelName) {
		return fmt.Errorf("%w: model name %q must be 1 to %d bytes of UTF-8: %w",
			ErrConfig, c.modelName, MaxModelNameLen, stats.ErrInvalidLabel)
	}
	if len(c.engines) == 0 {
		return fmt.Errorf("%w: no engines", ErrConfig)
	}
	for i, rank := range c.engines {
		if rank < 0 {
			return fmt.Errorf("%w: engine rank %d: %w", ErrConfig, rank, stats.ErrNegative)
		}
		if slices.Contains(c.engines[:i], rank) {
			return fmt.Errorf("%w: engine rank %d is repeated", ErrConfig, rank)
		}
	}
	if c.maxModelLen < 1 {
		return fmt.Errorf("%w: max model length %d must be positive: %w", ErrConfig, c.maxModelLen, stats.ErrOutOfRange)
	}
	if c.specPositions < 0 || c.specPositions > maxSpecPositions {
		return fmt.Errorf("%w: speculative tokens %d must be 0 to %d: %w",
			ErrConfig, c.specPositions, maxSpecPositions, stats.ErrOutOfRange)
	}
	keys := make([]string, 0, len(c.attributes))
	for _, kv := range c.attributes {
		key := string(kv.Key)
		if !kv.Valid() || !utf8.ValidString(key) || !utf8.ValidString(kv.Value.Emit()) {
			return fmt.Errorf("%w: attribute %q is invalid: %w", ErrConfig, key, stats.ErrInvalidLabel)
		}
		keys = append(keys, key)
	}
	if err := checkLabelNames(reservedKeys, keys); err != nil {
		return fmt.Errorf("%w: attribute %w: %w", ErrConfig, err, stats.ErrInvalidLabel)
	}
	for _, s := range []string{c.genAIOperation, c.genAIProvider} {
		if s == "" || !utf8.ValidString(s) {
			return fmt.Errorf("%w: gen_ai attribute value %q: %w", ErrConfig, s, stats.ErrInvalidLabel)
		}
	}
	if c.cacheConfig != nil {
		if err := c.cacheConfig.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if err := checkLabelNames([]string{KeyEngine}, c.cacheConfig.Keys()); err != nil {
			return fmt.Errorf("%w: cache config key %w: %w", ErrConfig, err, stats.ErrInvalidLabel)
		}
	}
	return nil
}

// checkLabelNames reports a key that cannot be a label of its own in a
// Prometheus scrape: one starting with "__" (reserved), one that becomes
// "le" or "quantile" (histogram and summary labels), and one that becomes the
// same label name as a reserved key or an earlier key. The OpenTelemetry
// Prometheus exporter merges colliding attributes into one label, joining
// their values with ';' (so "model.name" would corrupt model_name), and a
// reserved name fails the whole scrape.
func checkLabelNames(reserved, keys []string) error {
	owner := map[string]string{"le": "le", "quantile": "quantile"}
	for _, k := range reserved {
		owner[promLabel(k)] = k
	}
	for _, k := range keys {
		label := promLabel(k)
		if strings.HasPrefix(k, "__") || strings.Trim(label, "_") == "" {
			return fmt.Errorf("%q is not a usable label name", k)
		}
		if other, taken := owner[label]; taken {
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

// Engine returns the handle of one data-parallel engine by its rank.
func (r *Recorder) Engine(rank int) (*Engine, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: rank %d of a nil Recorder", ErrUnknownEngine, rank)
	}
	for _, e := range r.engines {
		if e.rank == rank {
			return e, nil
		}
	}
	return nil, fmt.Errorf("%w: rank %d", ErrUnknownEngine, rank)
}

// RecordIteration records one step's outputs of an engine, including its
// finished requests. See Engine.RecordIteration.
func (r *Recorder) RecordIteration(ctx context.Context, rank int, it *stats.Iteration) error {
	e, err := r.Engine(rank)
	if err != nil {
		return err
	}
	return e.RecordIteration(ctx, it)
}

// RecordFinished records one finished request of an engine.
func (r *Recorder) RecordFinished(ctx context.Context, rank int, f *stats.FinishedRequest) error {
	e, err := r.Engine(rank)
	if err != nil {
		return err
	}
	return e.RecordFinished(ctx, f)
}

// RecordScheduler records one scheduler step of an engine.
func (r *Recorder) RecordScheduler(ctx context.Context, rank int, s *stats.Scheduler) error {
	e, err := r.Engine(rank)
	if err != nil {
		return err
	}
	return e.RecordScheduler(ctx, s)
}

// engineLabel is the engine attribute value of a rank.
func engineLabel(rank int) string { return strconv.Itoa(rank) }
