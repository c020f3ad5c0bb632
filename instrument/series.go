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
	mu     sync.Mutex
	claims map[string]seriesClaim
}

type seriesClaim struct {
	holder   weak.Pointer[engineState]
	provider string        // identity of the holder's MeterProvider
	engine   *EngineSeries // the claiming engine (nil for an info series): see Engines
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
// A provider that wraps another should also have a method
// Unwrap() metric.MeterProvider returning it, so that Recorders on the
// wrapper and on the provider it wraps are known to share one provider.
type SeriesSetProvider interface {
	metric.MeterProvider
	SeriesSet() *SeriesSet
}

// providerSeries holds the claims of the Recorders of every MeterProvider
// with an identity (see providerIdentity); its keys start with that
// identity, so only Recorders of one provider meet there.
var providerSeries = NewSeriesSet()

// providerIdentity names the provider beneath any wrappers by its dynamic
// type and address; "" for a provider that is not a pointer (such as
// noop.MeterProvider), which has no identity. A claim holds while the
// engine's state is reachable, which the provider's callback keeps so until
// the provider itself is garbage; Engines keep their provider reachable too.
// So a provider's address is not reused while claims under it hold.
func providerIdentity(mp metric.MeterProvider) string {
	for {
		u, ok := mp.(interface{ Unwrap() metric.MeterProvider })
		if !ok {
			break
		}
		inner := u.Unwrap()
		if inner == nil || inner == mp {
			break
		}
		mp = inner
	}
	v := reflect.ValueOf(mp)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return ""
	}
	return fmt.Sprintf("%s@%#x", v.Type(), v.Pointer())
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
		constant = append(constant, promLabel(string(kv.Key))+"="+strconv.Quote(kv.Value.Emit()))
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
func claimSeries(cfg *config, engines []*Engine) (func(), error) {
	provider := providerIdentity(cfg.meterProvider)
	keys := keysOf(cfg, engines)
	type placed struct {
		set    *SeriesSet
		prefix string
		keys   []seriesKey
		where  string
	}
	var sets []placed
	if provider != "" {
		// Info series merge harmlessly on one provider: not claimed here.
		own := slices.DeleteFunc(slices.Clone(keys), func(k seriesKey) bool { return k.info })
		sets = append(sets, placed{providerSeries, provider + "|", own, "on this MeterProvider"})
	}
	if sp, ok := cfg.meterProvider.(SeriesSetProvider); ok && sp.SeriesSet() != nil {
		sets = append(sets, placed{sp.SeriesSet(), "", keys, "on a MeterProvider exported together with this one"})
	}
	for _, p := range sets {
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
			p.set.claims[p.prefix+k.key] = seriesClaim{holder: wp, provider: provider, engine: engineSeriesOf(cfg, k)}
			held[st] = append(held[st], release{p.set, p.prefix + k.key, wp})
		}
	}
	free := func(rs []release) {
		for _, r := range rs {
			r.set.mu.Lock()
			if r.set.claims[r.key].holder == r.wp {
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
