package instrument_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// newOn builds a Recorder on mp.
func newOn(mp metric.MeterProvider, name string, opts ...instrument.Option) (*instrument.Recorder, error) {
	return instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(mp), instrument.WithModelName(name)}, opts...)...)
}

func sdkProvider(t *testing.T) *sdkmetric.MeterProvider {
	t.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

// Two Recorders that would export the same series on one MeterProvider fail
// at construction: the SDK would merge them silently.
func TestDuplicateSeriesOnOneProvider(t *testing.T) {
	mp := sdkProvider(t)
	first, err := newOn(mp, "llama", instrument.WithEngines(0, 1), instrument.WithAttributes(attribute.String("role", "decode")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = newOn(mp, "llama", instrument.WithEngines(1, 2), instrument.WithAttributes(attribute.String("role", "decode")))
	if !errors.Is(err, instrument.ErrDuplicateSeries) {
		t.Fatalf("same model, engine 1 again: %v, want ErrDuplicateSeries", err)
	}
	for _, want := range []string{`"llama"`, "engine 1", `role="decode"`, "this MeterProvider"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	// Series of their own: other engines, attributes, models; attributes
	// that become the same Prometheus label do not count as others.
	for name, opts := range map[string][]instrument.Option{
		"other engines":   {instrument.WithEngines(2, 3), instrument.WithAttributes(attribute.String("role", "decode"))},
		"other role":      {instrument.WithEngines(0, 1), instrument.WithAttributes(attribute.String("role", "prefill"))},
		"no attributes":   {instrument.WithEngines(0, 1)},
		"other attribute": {instrument.WithEngines(0, 1), instrument.WithAttributes(attribute.String("role", "decode"), attribute.String("zone", "a"))},
	} {
		if _, err := newOn(mp, "llama", opts...); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	pods, err := newOn(mp, "pods", instrument.WithAttributes(attribute.String("k8s.pod", "p1")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newOn(mp, "pods", instrument.WithAttributes(attribute.String("k8s_pod", "p1"))); !errors.Is(err, instrument.ErrDuplicateSeries) {
		t.Errorf("k8s_pod after k8s.pod, both exported as k8s_pod: %v, want ErrDuplicateSeries", err)
	}
	runtime.KeepAlive(pods)
	// Another provider is another namespace, as is a no-op provider.
	if _, err := newOn(sdkProvider(t), "llama", instrument.WithEngines(0, 1), instrument.WithAttributes(attribute.String("role", "decode"))); err != nil {
		t.Errorf("another provider: %v", err)
	}
	for range 2 {
		if _, err := newOn(noop.NewMeterProvider(), "llama"); err != nil {
			t.Errorf("no-op provider: %v", err)
		}
	}
	runtime.KeepAlive(first)
}

// The global provider is one provider too. (The test closes its Recorder:
// the global provider outlives it, and -count=2 runs it again.)
func TestDuplicateSeriesOnGlobalProvider(t *testing.T) {
	first, err := instrument.NewRecorder(instrument.WithModelName("global-dup"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close() })
	if _, err := instrument.NewRecorder(instrument.WithMeterProvider(otel.GetMeterProvider()), instrument.WithModelName("global-dup")); !errors.Is(err, instrument.ErrDuplicateSeries) {
		t.Errorf("second Recorder on the global provider: %v, want ErrDuplicateSeries", err)
	}
	runtime.KeepAlive(first)
}

// A claim lasts as long as its series are reported: a Recorder dropped
// without Close is still reported by its callback, so its series stay
// claimed; Close releases them.
func TestDuplicateSeriesHeldUntilClose(t *testing.T) {
	mp := sdkProvider(t)
	func() {
		if _, err := newOn(mp, "m", instrument.WithEngines(0, 1)); err != nil {
			t.Fatal(err)
		}
	}()
	runtime.GC()
	runtime.GC()
	if _, err := newOn(mp, "m", instrument.WithEngines(1)); !errors.Is(err, instrument.ErrDuplicateSeries) {
		t.Errorf("a dropped but still reported Recorder's series: %v, want ErrDuplicateSeries", err)
	}
	r, err := newOn(mp, "other", instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := newOn(mp, "other", instrument.WithEngines(0, 1)); err != nil {
		t.Errorf("the series of a closed Recorder: %v", err)
	}
}

// sharedProvider is what a provider read into a shared registry looks like
// to the Recorder (package exporters has the real one).
type sharedProvider struct {
	metric.MeterProvider
	set *instrument.SeriesSet
}

func (s *sharedProvider) SeriesSet() *instrument.SeriesSet { return s.set }
func (s *sharedProvider) Unwrap() metric.MeterProvider     { return s.MeterProvider }

// Providers sharing a SeriesSet: the same series from two providers fail
// (in one Prometheus registry the scrape would fail); info series too, but
// only across providers.
func TestDuplicateSeriesAcrossProviders(t *testing.T) {
	set := new(instrument.SeriesSet) // the zero value is an empty set
	mp1, mp2 := sdkProvider(t), sdkProvider(t)
	p1, p2 := &sharedProvider{mp1, set}, &sharedProvider{mp2, set}
	cache := instrument.WithCacheConfig(stats.CacheConfig{"block_size": "16"})
	first, err := newOn(p1, "prefill-model", cache)
	if err != nil {
		t.Fatal(err)
	}
	_, err = newOn(p2, "prefill-model")
	if !errors.Is(err, instrument.ErrDuplicateSeries) || !strings.Contains(err.Error(), "exported together") {
		t.Errorf("same model on another provider of the set: %v, want ErrDuplicateSeries", err)
	}
	// vllm:cache_config_info has engine and the configuration only.
	_, err = newOn(p2, "decode-model", cache)
	if !errors.Is(err, instrument.ErrDuplicateSeries) || !strings.Contains(err.Error(), instrument.NameCacheConfigInfo) {
		t.Errorf("same cache config info on another provider: %v, want ErrDuplicateSeries", err)
	}
	for name, r := range map[string]func() (*instrument.Recorder, error){
		"another model, no cache config": func() (*instrument.Recorder, error) { return newOn(p2, "decode-model") },
		"another cache config": func() (*instrument.Recorder, error) {
			return newOn(p2, "other", instrument.WithCacheConfig(stats.CacheConfig{"block_size": "32"}))
		},
		"same info on the same provider": func() (*instrument.Recorder, error) { return newOn(p1, "second-model", cache) },
	} {
		if _, err := r(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The raw provider under a wrapper is the same provider.
	if _, err := newOn(mp1, "prefill-model"); !errors.Is(err, instrument.ErrDuplicateSeries) {
		t.Errorf("the wrapped provider itself: %v, want ErrDuplicateSeries", err)
	}
	runtime.KeepAlive(first)
}

// Racing constructions of the same series: exactly one wins.
func TestDuplicateSeriesConcurrent(t *testing.T) {
	mp := sdkProvider(t)
	var won atomic.Int32
	var wg sync.WaitGroup
	keep := make([]*instrument.Recorder, 8)
	for i := range keep {
		wg.Go(func() {
			r, err := newOn(mp, "race", instrument.WithEngines(0, 1))
			switch {
			case err == nil:
				won.Add(1)
				keep[i] = r
			case !errors.Is(err, instrument.ErrDuplicateSeries):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d constructions succeeded, want 1", won.Load())
	}
	runtime.KeepAlive(keep)
}
