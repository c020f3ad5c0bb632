package instrument

import (
	"slices"
	"strings"
)

// EngineSeries describes one live engine of a SeriesSet as its Recorder
// configured it: what an exporter needs to show the engine's histogram
// series at zero before their first observation, as vLLM does
// (vllm/v1/metrics/loggers.py creates every per-engine child at start-up;
// the OpenTelemetry API cannot create a histogram point without a
// measurement).
type EngineSeries struct {
	// Labels are model_name, engine and the Recorder's constant attributes
	// as Prometheus labels (names translated as the exporter does), sorted
	// by name.
	Labels []Label
	// MaxModelLen is the Recorder's WithMaxModelLen, from which the
	// token-count histograms get their boundaries (see Bounds).
	MaxModelLen int
	// Features are the optional features the Recorder was configured with,
	// whose series exist from start-up; Always is implied and not listed.
	Features []Feature
}

// Label is one Prometheus label of an EngineSeries.
type Label struct{ Name, Value string }

// Has reports whether the engine's series of feature f exist from start-up:
// Always, or an optional feature the Recorder was configured with.
func (e EngineSeries) Has(f Feature) bool { return f == Always || slices.Contains(e.Features, f) }

// Bounds returns the advisory bucket boundaries of histogram d for this
// engine: d.Buckets, or LengthBuckets(MaxModelLen) for a token-count
// histogram. Views may override them.
func (e EngineSeries) Bounds(d Descriptor) []float64 {
	return slices.Clone((&builder{maxModelLen: e.MaxModelLen}).bounds(d))
}

// Engines returns the live engines of the set, one per engine of each live
// Recorder that claimed its series here, sorted by labels. The values are
// copies: changing them changes nothing in the set.
func (s *SeriesSet) Engines() []EngineSeries {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	var out []EngineSeries
	for _, c := range s.claims {
		if c.engine != nil && c.holder.Value() != nil {
			e := *c.engine
			e.Labels, e.Features = slices.Clone(e.Labels), slices.Clone(e.Features)
			out = append(out, e)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b EngineSeries) int {
		return slices.CompareFunc(a.Labels, b.Labels, func(x, y Label) int {
			if c := strings.Compare(x.Name, y.Name); c != 0 {
				return c
			}
			return strings.Compare(x.Value, y.Value)
		})
	})
	return out
}

// Released returns how many engines' claims the set has released since it
// was made (by Recorder.Close, or once an engine's state is garbage). An
// exporter that reads it before gathering its providers and again after
// Engines knows, when both are equal, that every engine whose series it
// gathered is in Engines; when they differ, a Recorder closed in between may
// have left series in the gathering that Engines no longer lists.
func (s *SeriesSet) Released() uint64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

// engineSeriesOf returns the EngineSeries of a claim: nil for the info
// series' claims, which describe no engine's series.
func engineSeriesOf(cfg *config, k seriesKey) *EngineSeries {
	if k.info {
		return nil
	}
	e := &EngineSeries{MaxModelLen: cfg.maxModelLen, Features: configuredFeatures(cfg)}
	for _, kv := range k.engine.base {
		e.Labels = append(e.Labels, Label{Name: promLabel(string(kv.Key)), Value: kv.Value.String()})
	}
	slices.SortFunc(e.Labels, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	return e
}

// configuredFeatures lists the optional features whose series a Recorder's
// options make exist from start-up.
func configuredFeatures(cfg *config) []Feature {
	var fs []Feature
	if cfg.kvConnector {
		fs = append(fs, KVConnector)
	}
	if cfg.specPositions > 0 {
		fs = append(fs, SpecDecoding)
	}
	if cfg.cacheConfig != nil {
		fs = append(fs, CacheConfig)
	}
	if cfg.kvResidency {
		fs = append(fs, KVResidency)
	}
	if cfg.corruption {
		fs = append(fs, Corruption)
	}
	if cfg.priority {
		fs = append(fs, PriorityScheduling)
	}
	if cfg.kvOffload {
		fs = append(fs, KVOffload)
	}
	if cfg.kvOffloadCPU {
		fs = append(fs, KVOffloadCPU)
	}
	if cfg.kvOffloadThreshold {
		fs = append(fs, KVOffloadStoreThreshold)
	}
	if cfg.simpleKVOffload != nil {
		fs = append(fs, SimpleCPUOffload)
	}
	return fs
}
