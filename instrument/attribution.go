package instrument

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/infermetrics/infermetrics/stats"
)

// Attribution values of our own: a dimension's value takes one of them when
// the request gave none, gave one that cannot be a label, or gave a new one
// past the dimension's cap. A request value equal to one of them is
// AttributionInvalid, so that each keeps its meaning.
const (
	AttributionNone     = "_none"
	AttributionInvalid  = "_invalid"
	AttributionOverflow = "_overflow"
)

// Bounds of attribution.
const (
	// DefaultMaxValues is a Dimension's cap on distinct values when its
	// MaxValues is 0.
	DefaultMaxValues = 100
	// MaxMaxValues is the largest MaxValues accepted.
	MaxMaxValues = 10000
	// MaxDimensions is the most dimensions of an Attribution.
	MaxDimensions = 4
	// MaxAttributionValueLen is the longest value kept, in bytes; a longer
	// one is AttributionInvalid.
	MaxAttributionValueLen = 128
	// CombinationsPerValue is the cap on combinations of values, per value
	// of the largest dimension's cap (see NewAttribution).
	CombinationsPerValue = 2
)

// KeyDimension is the attribute of NameAttributionOverflow that names the
// dimension whose value overflowed, or OverflowCombinations.
const KeyDimension = "dimension"

// OverflowCombinations is the KeyDimension value of the requests whose
// combination of values was past the cap on combinations: all their
// dimensions were recorded as AttributionOverflow.
const OverflowCombinations = "_combinations"

// Dimension is one attribution dimension: the attribute its values are
// recorded under on the usage families, and the most distinct values it
// keeps (0: DefaultMaxValues). New values past the cap are recorded as
// AttributionOverflow and counted on NameAttributionOverflow.
type Dimension struct {
	Name      string
	MaxValues int
}

// Attribution is a set of attribution dimensions with their caps: who a
// request is recorded for on the usage families (a tenant, a user, an API
// key's hash, ...), beside its model. Give it to WithAttribution. One
// Attribution is shared by every Recorder of a process: its caps bound the
// distinct values, and combinations of values, over all of them. It is safe
// for concurrent use.
type Attribution struct {
	dims   []Dimension
	values []boundedSet[string]
	combos boundedSet[combo]
}

// combo is one combination of bounded values, by dimension; the dimensions
// past an Attribution's are "".
type combo [MaxDimensions]string

// NewAttribution returns the dimensions' Attribution. Each name must be a
// label of its own in every export: UTF-8, not starting with '_', and not
// exported as the same Prometheus label as another dimension or as a label
// the Recorder sets (model_name, engine, kind, finished_reason, error.type,
// dimension, ...) or the exporter adds (otel_scope_*,
// otel_metric_overflow); NewRecorder checks them against the Recorder's
// constant attributes and its exporter's labels too. MaxValues must be 0
// (DefaultMaxValues) to MaxMaxValues; at most MaxDimensions dimensions.
//
// The combinations of values are capped too, at CombinationsPerValue times
// the largest MaxValues (200 with the defaults): a request whose combination
// is new past the cap is recorded with every dimension AttributionOverflow.
// So each usage family holds, per Recorder, at most that many combinations
// (and the overflowed one) times its other attributes' values.
//
// Errors match ErrConfig and, for a name, stats.ErrInvalidLabel.
func NewAttribution(dims ...Dimension) (*Attribution, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if len(dims) == 0 || len(dims) > MaxDimensions {
		bad("%d attribution dimensions: want 1 to %d", len(dims), MaxDimensions)
	}
	a := &Attribution{dims: slices.Clone(dims)}
	names := make([]string, 0, len(dims))
	largest := 0
	for i := range a.dims {
		d := &a.dims[i]
		if d.MaxValues == 0 {
			d.MaxValues = DefaultMaxValues
		}
		if d.MaxValues < 1 || d.MaxValues > MaxMaxValues {
			bad("dimension %q: MaxValues %d: want 0 (default %d) to %d: %w", d.Name, d.MaxValues,
				DefaultMaxValues, MaxMaxValues, stats.ErrOutOfRange)
		}
		if err := checkDimensionName(d.Name); err != nil {
			bad("dimension %w: %w", err, stats.ErrInvalidLabel)
			continue
		}
		names = append(names, d.Name)
		largest = max(largest, d.MaxValues)
	}
	if err := checkLabelNames(usageKeys(), []string{overflowLabel}, names); err != nil {
		bad("dimension %w: %w", err, stats.ErrInvalidLabel)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	a.values = make([]boundedSet[string], len(a.dims))
	for i, d := range a.dims {
		a.values[i].max = d.MaxValues
	}
	a.combos.max = CombinationsPerValue * largest
	return a, nil
}

// checkDimensionName refuses a name that cannot be a dimension's whatever
// the other labels: empty, not UTF-8, or starting with '_' (values and
// labels starting so are the library's).
func checkDimensionName(name string) error {
	if name == "" || !utf8.ValidString(name) || strings.HasPrefix(name, "_") {
		return fmt.Errorf("%q: want a non-empty UTF-8 name not starting with '_'", name)
	}
	return nil
}

// usageKeys are the attribute keys a dimension may not take: every key the
// Recorder sets, those of the usage families included.
func usageKeys() []string { return withKeys(reservedKeys, KeyDimension) }

// Dimensions returns the dimensions, with their caps as applied.
func (a *Attribution) Dimensions() []Dimension {
	if a == nil {
		return nil
	}
	return slices.Clone(a.dims)
}

// MaxCombinations returns the cap on combinations of values (see
// NewAttribution).
func (a *Attribution) MaxCombinations() int {
	if a == nil {
		return 0
	}
	return a.combos.max
}

// names returns the dimensions' attribute keys.
func (a *Attribution) names() []string {
	out := make([]string, len(a.dims))
	for i, d := range a.dims {
		out[i] = d.Name
	}
	return out
}

// boundValue returns v as a label value: AttributionNone for "",
// AttributionInvalid for one longer than MaxAttributionValueLen, not UTF-8,
// or equal to a value of our own.
func boundValue(v string) string {
	switch {
	case v == "":
		return AttributionNone
	case len(v) > MaxAttributionValueLen || !utf8.ValidString(v) ||
		v == AttributionNone || v == AttributionInvalid || v == AttributionOverflow:
		return AttributionInvalid
	}
	return v
}

// fold returns the combination values are recorded under: each bounded,
// and AttributionOverflow where new past its dimension's cap; every
// dimension AttributionOverflow when the combination is new past the cap
// on combinations. over has bit i set for each dimension i whose value
// overflowed, and bit len(a.dims) when the combination did. values holds
// at most one value per dimension (a missing one is "").
func (a *Attribution) fold(values []string) (c combo, over uint) {
	for i := range a.dims {
		v := ""
		if i < len(values) {
			v = values[i]
		}
		v = boundValue(v)
		if v != AttributionNone && v != AttributionInvalid && !a.values[i].admit(v, strings.Clone) {
			v, over = AttributionOverflow, over|1<<i
		}
		c[i] = v
	}
	if !a.overflowed(c) && !a.combos.admit(c, ownCombo) {
		for i := range a.dims {
			c[i] = AttributionOverflow
		}
		over |= 1 << len(a.dims)
	}
	return c, over
}

// overflowed reports the combination of every dimension overflowed, which
// is outside the cap on combinations.
func (a *Attribution) overflowed(c combo) bool {
	for i := range a.dims {
		if c[i] != AttributionOverflow {
			return false
		}
	}
	return true
}

// boundedSet is a set of at most max keys: one dimension's values, or the
// combinations of values.
type boundedSet[K comparable] struct {
	mu  sync.RWMutex
	m   map[K]struct{}
	max int
}

// admit reports whether k is in the set, adding own(k), a copy that holds
// none of the request's memory, when there is room. A known key takes a
// read lock and allocates nothing.
func (s *boundedSet[K]) admit(k K, own func(K) K) bool {
	s.mu.RLock()
	_, ok := s.m[k]
	s.mu.RUnlock()
	if ok {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; ok {
		return true
	}
	if len(s.m) >= s.max {
		return false
	}
	if s.m == nil {
		s.m = map[K]struct{}{}
	}
	s.m[own(k)] = struct{}{}
	return true
}

// ownCombo returns c with each value copied.
func ownCombo(c combo) combo {
	for i := range c {
		c[i] = strings.Clone(c[i])
	}
	return c
}
