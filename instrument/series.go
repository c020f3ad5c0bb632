package instrument

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// ErrDuplicateSeries reports a Recorder that would export series another
// live Recorder already exports. On one MeterProvider the SDK would merge
// them silently (counters summed, gauges overwriting each other); on two
// providers read into one Prometheus registry every scrape would fail with
// HTTP 500. NewRecorder returns it instead.
var ErrDuplicateSeries = errors.New("instrument: duplicate series")

// SeriesSet holds the series claimed by the live Recorders of a group of
// MeterProviders whose series are exported together, such as the providers
// read into one Prometheus registry (package exporters keeps one set per
// registry). A claim lasts until its Recorder is closed, or until the
// engine's state is garbage (the Recorder's callback holds it, so that is
// when the MeterProvider itself is garbage): the set holds engine states
// weakly. It is safe for concurrent use; the zero value is an empty set.
type SeriesSet struct {
	mu       sync.Mutex
	claims   map[string]seriesClaim
	released uint64 // engines' claims released, see Released
}

type seriesClaim struct {
	holder   weak.Pointer[engineState]
	provider string        // identity of the holder's MeterProvider
	engine   *EngineSeries // the claiming engine (nil for an info series): see Engines
	inSet    bool          // the Recorder also claimed in its provider's SeriesSet: see CountUnwrapped
}

// NewSeriesSet returns an empty set.
func NewSeriesSet() *SeriesSet { return &SeriesSet{claims: map[string]seriesClaim{}} }

// SeriesSetProvider is an optional interface of a metric.MeterProvider
// whose series are exported together with other providers' (for example
// when several providers are read into one Prometheus registry). NewRecorder
// claims the series of its engines in the provider's SeriesSet, so that two
// Recorders on such providers that would export the same series fail at
// construction with ErrDuplicateSeries instead of making every scrape fail.
// exporters.Setup and exporters.Prometheus.Wrap return such providers.
//
// NewRecorder looks for it on the provider and on the providers it wraps. A
// provider that wraps another should have a method
// Unwrap() metric.MeterProvider returning it, so that Recorders on the
// wrapper and on the provider it wraps are known to share one provider.
type SeriesSetProvider interface {
	metric.MeterProvider
	SeriesSet() *SeriesSet
}

// providerSeries holds the claims of the Recorders of every MeterProvider
// with an identity; its keys start with a namespace of the provider (see
// claimSeries), so only Recorders of one provider meet there.
var providerSeries = NewSeriesSet()

// maxWraps bounds the Unwrap chain followed (a chain that loops ends there).
const maxWraps = 16

// chain returns mp and the providers it wraps, outermost first, following
// their Unwrap() metric.MeterProvider methods.
func chain(mp metric.MeterProvider) []metric.MeterProvider {
	ps := []metric.MeterProvider{mp}
	for len(ps) < maxWraps {
		u, ok := mp.(interface{ Unwrap() metric.MeterProvider })
		if !ok {
			break
		}
		if mp = u.Unwrap(); mp == nil {
			break
		}
		ps = append(ps, mp)
	}
	return ps
}

// find returns the first provider of mp's chain (see chain) implementing T.
func find[T any](mp metric.MeterProvider) (T, bool) {
	for _, p := range chain(mp) {
		if t, ok := p.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// providerIdentity names the provider beneath any wrappers by its dynamic
// type and address; "" for a provider that is not a pointer (such as
// noop.MeterProvider), which has no identity. A claim holds while the
// engine's state is reachable, which the provider's callback keeps so until
// the provider itself is garbage; Engines keep their provider reachable too.
// So a provider's address is not reused while claims under it hold.
func providerIdentity(mp metric.MeterProvider) string {
	ps := chain(mp)
	return pointerIdentity(ps[len(ps)-1])
}

// pointerIdentity names a pointer by its type and address; "" for a value
// that is not a non-nil pointer.
func pointerIdentity(v any) string {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return ""
	}
	return fmt.Sprintf("%s@%#x", rv.Type(), rv.Pointer())
}

// scopeMeter returns the Recorder's meter of a provider. The SDK returns
// the same meter for the same scope, and so does a provider that forwards to
// it (a wrapper without Unwrap, the global provider once set): the meter
// identifies the provider the series go to, as the provider's own address
// does (both are claimed). Instruments keep their meter reachable.
func scopeMeter(mp metric.MeterProvider) metric.Meter {
	return mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
}

// globalProvider is the global MeterProvider as the program started. Until
// otel.SetMeterProvider it keeps what it is given; the first provider set
// gets all of it, and its meters forward there from then on.
var globalProvider = otel.GetMeterProvider()

// viaGlobal reports a Recorder whose series go through the global provider:
// one built on it, or one on the provider it forwards to. Recorders built on
// the global provider before otel.SetMeterProvider end up on the provider set,
// beside the ones built on it afterwards: they meet in one namespace, "global".
// (A Recorder built on a provider before it is set, and one on the global
// provider before the set, cannot be told apart at construction.)
func viaGlobal(mp metric.MeterProvider, meter metric.Meter) bool {
	global := pointerIdentity(globalProvider)
	if global == "" {
		return false
	}
	if providerIdentity(mp) == global {
		return true
	}
	if pointerIdentity(otel.GetMeterProvider()) == global {
		return false // nothing set: the global provider forwards nowhere
	}
	m := pointerIdentity(meter)
	return m != "" && m == pointerIdentity(scopeMeter(globalProvider))
}

// seriesKey is one claim of an engine: key identifies the series in a set.
type seriesKey struct {
	engine *Engine
	key    string
	// info marks the series of an info gauge without model_name (today
	// vllm:cache_config_info, by engine and cache configuration). Recorders
	// of one provider share it harmlessly (the SDK keeps one series, value
	// 1); only a Recorder of another provider in the same set conflicts.
	info bool
	what string // the series, as said in an error
}

// keysOf returns the claims of a Recorder's engines: model_name, engine and
// the constant attributes, by their exported Prometheus label names so that
// attributes that become one label ("role.x" and "role_x") are caught too;
// and the cache configuration info series of each engine.
func keysOf(cfg *config, engines []*Engine) []seriesKey {
	constant := make([]string, 0, len(cfg.attributes))
	for _, kv := range cfg.attributes {
		constant = append(constant, promLabel(string(kv.Key))+"="+strconv.Quote(kv.Value.String()))
	}
	slices.Sort(constant)
	attrs := ""
	if len(constant) > 0 {
		attrs = " and attributes " + strings.Join(constant, ",")
	}
	var config []string
	for _, k := range cfg.cacheConfig.Keys() {
		config = append(config, k+"="+strconv.Quote(cfg.cacheConfig[k]))
	}
	var keys []seriesKey
	for _, e := range engines {
		keys = append(keys, seriesKey{engine: e,
			key:  fmt.Sprintf("model_name=%q,engine=%d,%s", cfg.modelName, e.rank, strings.Join(constant, ",")),
			what: fmt.Sprintf("model_name %q, engine %d%s", cfg.modelName, e.rank, attrs)})
		if cfg.cacheConfig != nil {
			keys = append(keys, seriesKey{engine: e, info: true,
				key:  fmt.Sprintf("%s{engine=%d,%s}", NameCacheConfigInfo, e.rank, strings.Join(config, ",")),
				what: fmt.Sprintf("%s of engine %d with this cache configuration", NameCacheConfigInfo, e.rank)})
		}
	}
	return keys
}

// claimSeries claims the series of a new Recorder's engines, all or none:
// on the provider's own claims, and in its SeriesSet when it has one. It
// returns the function that releases them all (Recorder.Close); they are
// also released once the engines' states are garbage.
func claimSeries(cfg *config, meter metric.Meter, global bool, engines []*Engine) (func(), error) {
	provider := providerIdentity(cfg.meterProvider)
	keys := keysOf(cfg, engines)
	type placed struct {
		set    *SeriesSet
		prefix string
		keys   []seriesKey
		where  string
	}
	var sets []placed
	// Info series merge harmlessly on one provider: not claimed there. The
	// namespaces of one provider: its address, its meter's, and the global
	// provider's when it forwards there.
	own := slices.DeleteFunc(slices.Clone(keys), func(k seriesKey) bool { return k.info })
	if provider != "" {
		sets = append(sets, placed{providerSeries, "provider " + provider + "|", own, "on this MeterProvider"})
	}
	if m := pointerIdentity(meter); m != "" {
		sets = append(sets, placed{providerSeries, "meter " + m + "|", own, "on this MeterProvider"})
	}
	if global {
		sets = append(sets, placed{providerSeries, "global|", own,
			"on this MeterProvider (through the global MeterProvider, which forwards to the provider set by otel.SetMeterProvider)"})
	}
	sp, inSet := find[SeriesSetProvider](cfg.meterProvider)
	if inSet = inSet && sp.SeriesSet() != nil; inSet {
		sets = append(sets, placed{sp.SeriesSet(), "", keys, "on a MeterProvider exported together with this one"})
	}
	locked := map[*SeriesSet]bool{}
	for _, p := range sets { // providerSeries first: one lock order
		if locked[p.set] {
			continue
		}
		locked[p.set] = true
		p.set.mu.Lock()
		defer p.set.mu.Unlock()
		if p.set.claims == nil {
			p.set.claims = map[string]seriesClaim{}
		}
	}
	for _, p := range sets {
		for _, k := range p.keys {
			c, taken := p.set.claims[p.prefix+k.key]
			if taken && c.holder.Value() != nil && (!k.info || c.provider != provider) {
				return nil, fmt.Errorf("%w: %s is already exported by a live Recorder %s; "+
					"give each Recorder its own model name, engines or constant attributes (WithAttributes)",
					ErrDuplicateSeries, k.what, p.where)
			}
		}
	}
	type release struct {
		set *SeriesSet
		key string
		wp  weak.Pointer[engineState]
	}
	held := map[*engineState][]release{}
	for _, p := range sets {
		for _, k := range p.keys {
			st := k.engine.engineState
			wp := weak.Make(st)
			p.set.claims[p.prefix+k.key] = seriesClaim{holder: wp, provider: provider, engine: engineSeriesOf(cfg, k), inSet: inSet}
			held[st] = append(held[st], release{p.set, p.prefix + k.key, wp})
		}
	}
	free := func(rs []release) {
		for _, r := range rs {
			r.set.mu.Lock()
			if c := r.set.claims[r.key]; c.holder == r.wp {
				if c.engine != nil {
					r.set.released++
				}
				delete(r.set.claims, r.key)
			}
			r.set.mu.Unlock()
		}
	}
	var all []release
	for e, rs := range held {
		runtime.AddCleanup(e, free, rs)
		all = append(all, rs...)
	}
	return func() { free(all) }, nil
}

// tokenBuckets remembers the max model length whose buckets each provider's
// token-count histograms were created with. The SDK keeps one instrument per
// name on a provider, with the boundaries it was first created with (advisory
// boundaries are not part of its key), so a later Recorder's other
// WithMaxModelLen would be silently ignored. Lengths are kept by instrument,
// held weakly (the provider keeps it as long as it lives), and under "global"
// for the global provider, whose instruments are created on the provider set
// with the buckets they were first given.
var tokenBuckets = struct {
	sync.Mutex
	byInstrument map[weak.Pointer[byte]]int
	global       int
}{byInstrument: map[weak.Pointer[byte]]int{}}

// newSharedInstruments creates the instruments on meter and refuses, with
// ErrConfig, a max model length whose buckets differ from those the
// provider's token histograms already have.
func newSharedInstruments(meter metric.Meter, maxModelLen int, global bool) (*instruments, error) {
	tokenBuckets.Lock()
	defer tokenBuckets.Unlock()
	inst, err := newInstruments(meter, maxModelLen)
	if err != nil {
		return nil, err
	}
	key, keyed := weakKey(inst.requestPrompt)
	var had []int
	if n := tokenBuckets.byInstrument[key]; keyed && n != 0 {
		had = append(had, n)
	}
	if n := tokenBuckets.global; global && n != 0 {
		had = append(had, n)
	}
	want := LengthBuckets(maxModelLen)
	for _, n := range had {
		if have := LengthBuckets(n); !slices.Equal(have, want) {
			return nil, fmt.Errorf("%w: max model length %d needs token histogram buckets up to %v, but the token "+
				"histograms of this MeterProvider already have those of max model length %d, up to %v (the SDK keeps "+
				"one instrument per name, with the buckets it was created with): give every Recorder of a "+
				"MeterProvider the same WithMaxModelLen (views.WithBuckets sets other buckets for all of them), or "+
				"give each model length its own MeterProvider",
				ErrConfig, maxModelLen, slices.Max(append(want, 0)), n, slices.Max(append(have, 0)))
		}
	}
	for k := range tokenBuckets.byInstrument {
		if k.Value() == nil {
			delete(tokenBuckets.byInstrument, k)
		}
	}
	if keyed {
		tokenBuckets.byInstrument[key] = maxModelLen
	}
	if global {
		tokenBuckets.global = maxModelLen
	}
	return inst, nil
}

// weakKey returns a weak pointer to what an instrument points to; false for
// an instrument that is not a pointer to a value (such as a no-op one).
func weakKey(v any) (weak.Pointer[byte], bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Type().Elem().Size() == 0 {
		return weak.Pointer[byte]{}, false
	}
	return weak.Make((*byte)(rv.UnsafePointer())), true
}

// CountUnwrapped counts one event of kind unwrapped_provider on
// NameInvalidEvents of each live engine of model modelName and engine label
// value engine whose Recorder's provider has no SeriesSet (see
// SeriesSetProvider): an exporter that finds such an engine's series in its
// scrape cannot show its histograms at zero from start-up. It returns the
// engines counted. exporters.Prometheus's handler calls it once per engine
// it reports.
func CountUnwrapped(modelName, engine string) int {
	var found []*engineState
	providerSeries.mu.Lock()
	for _, c := range providerSeries.claims {
		if c.inSet || c.engine == nil {
			continue
		}
		st := c.holder.Value()
		if st == nil || slices.Contains(found, st) {
			continue
		}
		if labelValue(c.engine.Labels, KeyModelName) == modelName && labelValue(c.engine.Labels, KeyEngine) == engine {
			found = append(found, st)
		}
	}
	providerSeries.mu.Unlock()
	for _, st := range found {
		st.c.invalid[refusedUnwrapped].Add(1)
	}
	return len(found)
}

// labelValue returns the value of the label named name, "" when absent.
func labelValue(labels []Label, name string) string {
	for _, l := range labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}
