package instrument

import (
	"testing"

	"go.opentelemetry.io/otel/metric/noop"
)

// TestSyntheticFamilies: each family Synthetic serves is the catalog's,
// of its kind and number type, with its label's closed set, and reaches an
// instrument or a cell.
func TestSyntheticFamilies(t *testing.T) {
	inst, err := newInstruments(noop.NewMeterProvider().Meter("test"), DefaultMaxModelLen)
	if err != nil {
		t.Fatal(err)
	}
	e := &engineState{inst: inst}
	for name, f := range syntheticFamilies {
		d := f.d
		paths := 0
		for _, set := range []bool{f.counter != nil, f.int64H != nil, f.float64H != nil} {
			if set {
				paths++
			}
		}
		switch {
		case d.Name != name:
			t.Errorf("%s: no descriptor", name)
		case paths != 1:
			t.Errorf("%s: %d paths, want one", name, paths)
		case f.counter != nil && (d.Kind != Counter || !d.Integer):
			t.Errorf("%s: a counter path to an integer counter's cell, the family is a %s (integer %v)", name, d.Kind, d.Integer)
		case f.int64H != nil && (d.Kind != Histogram || !d.Integer || f.int64H(inst) == nil):
			t.Errorf("%s: an int64 histogram path, the family is a %s (integer %v)", name, d.Kind, d.Integer)
		case f.float64H != nil && (d.Kind != Histogram || d.Integer || f.float64H(inst) == nil):
			t.Errorf("%s: a float64 histogram path, the family is a %s (integer %v)", name, d.Kind, d.Integer)
		case (f.values != nil) != (len(d.Attributes) == 1):
			t.Errorf("%s: label values %q, attributes %q", name, f.values, d.Attributes)
		case f.counter != nil && f.counter(e, len(f.values)-1, -1) == nil:
			t.Errorf("%s: no cell", name)
		}
	}
}
