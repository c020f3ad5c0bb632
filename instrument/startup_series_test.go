package instrument_test

import (
	"reflect"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// SeriesSet.Engines lists each live engine with its labels as exported, its
// max model length and configured features, until its Recorder is closed.
func TestSeriesSetEngines(t *testing.T) {
	set := new(instrument.SeriesSet)
	if got := set.Engines(); len(got) != 0 {
		t.Fatalf("empty set: %v", got)
	}
	mp := &sharedProvider{MeterProvider: sdkProvider(t), set: set}
	a, err := newOn(mp, "a", instrument.WithEngines(1, 0), instrument.WithMaxModelLen(100),
		instrument.WithAttributes(attribute.String("role.name", "decode")),
		instrument.WithKVConnector(), instrument.WithCacheConfig(stats.CacheConfig{"block_size": "16"}))
	if err != nil {
		t.Fatal(err)
	}
	// Another provider of the same registry: one provider refuses two lengths.
	b, err := newOn(&sharedProvider{MeterProvider: sdkProvider(t), set: set}, "b")
	if err != nil {
		t.Fatal(err)
	}
	got := set.Engines()
	want := []instrument.EngineSeries{
		{Labels: []instrument.Label{{"engine", "0"}, {"model_name", "a"}, {"role_name", "decode"}}, MaxModelLen: 100,
			Features: []instrument.Feature{instrument.KVConnector, instrument.CacheConfig}},
		{Labels: []instrument.Label{{"engine", "0"}, {"model_name", "b"}}, MaxModelLen: instrument.DefaultMaxModelLen},
		{Labels: []instrument.Label{{"engine", "1"}, {"model_name", "a"}, {"role_name", "decode"}}, MaxModelLen: 100,
			Features: []instrument.Feature{instrument.KVConnector, instrument.CacheConfig}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Engines() =\n%+v\nwant\n%+v", got, want)
	}
	got[0].Labels[0].Value = "changed"
	if set.Engines()[0].Labels[0].Value != "0" {
		t.Error("Engines returns the set's own slices")
	}

	e := want[0]
	if !e.Has(instrument.Always) || !e.Has(instrument.KVConnector) || e.Has(instrument.KVResidency) {
		t.Errorf("Has: Always %v, KVConnector %v, KVResidency %v", e.Has(instrument.Always),
			e.Has(instrument.KVConnector), e.Has(instrument.KVResidency))
	}
	for _, d := range instrument.Descriptors() {
		switch d.Name {
		case instrument.NameRequestPromptTokens:
			if b := e.Bounds(d); !slices.Equal(b, []float64{1, 2, 5, 10, 20, 50, 100}) {
				t.Errorf("token-count bounds at max model len 100: %v", b)
			}
		case instrument.NameTimeToFirstToken:
			if b := e.Bounds(d); !slices.Equal(b, d.Buckets) {
				t.Errorf("TTFT bounds %v, want %v", b, d.Buckets)
			}
		}
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := set.Engines(); len(got) != 1 || got[0].Labels[1].Value != "b" {
		t.Errorf("after closing a: %+v", got)
	}
	_ = b.Close()
	if got := set.Engines(); len(got) != 0 {
		t.Errorf("after closing both: %+v", got)
	}
}
