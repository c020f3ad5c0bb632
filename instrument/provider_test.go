package instrument_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
)

// inSubprocess runs the calling test alone in a new process of the test
// binary (for tests that set process-wide state that cannot be undone, such
// as otel.SetMeterProvider) and reports whether this is that process.
func inSubprocess(t *testing.T) bool {
	t.Helper()
	const env = "INFERMETRICS_TEST_SUBPROCESS"
	if os.Getenv(env) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("subprocess: %v\n%s", err, out)
	}
	return false
}

// A Recorder on the global provider before otel.SetMeterProvider, and one on
// the provider set afterwards, export into the same provider (the global
// one forwards to it): the second fails with ErrDuplicateSeries, as it does
// through the global provider itself or one obtained before the set.
func TestDuplicateSeriesThroughSetMeterProvider(t *testing.T) {
	if !inSubprocess(t) {
		return
	}
	ctx := context.Background()
	early := otel.GetMeterProvider() // the delegating global provider
	first, err := instrument.NewRecorder(instrument.WithModelName("global-model"), instrument.WithMaxModelLen(4096))
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	pushed := &captureExporter{temporality: metricdata.CumulativeTemporality}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(pushed, sdkmetric.WithInterval(time.Hour))))
	defer mp.Shutdown(ctx)
	otel.SetMeterProvider(mp)

	for name, opts := range map[string][]instrument.Option{
		"the provider set":                    {instrument.WithMeterProvider(mp)},
		"the global provider":                 nil,
		"the global provider obtained before": {instrument.WithMeterProvider(early)},
	} {
		_, err := instrument.NewRecorder(append(opts, instrument.WithModelName("global-model"), instrument.WithMaxModelLen(4096))...)
		if !errors.Is(err, instrument.ErrDuplicateSeries) {
			t.Errorf("%s: %v, want ErrDuplicateSeries", name, err)
		}
	}
	// The token histograms were created through the global provider with
	// the first Recorder's buckets; another model length is refused there too.
	if _, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("other"),
		instrument.WithMaxModelLen(131072)); !errors.Is(err, instrument.ErrConfig) {
		t.Errorf("another max model length on the provider set: %v, want ErrConfig", err)
	}
	// Another model is fine, and everything lands in the provider set.
	other, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("other"),
		instrument.WithMaxModelLen(4096))
	if err != nil {
		t.Fatal(err)
	}
	recordRequests(t, first, 3, 0)
	recordRequests(t, other, 5, 0)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == instrument.NameGenerationTokens {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					total += dp.Value
				}
			}
		}
	}
	if total != 8 {
		t.Errorf("generation tokens in the provider set: %d, want 8", total)
	}
	// Close of the Recorder built on the global provider flushes the
	// provider set.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got, ok := pushed.received(instrument.NameGenerationTokens); !ok || got != 8 {
		t.Errorf("exported by the first Recorder's Close: %v (%v), want 8", got, ok)
	}
	runtime.KeepAlive([]any{first, other})
}

// The SDK keeps one instrument per name on a provider, with the buckets it
// was first created with: a second Recorder's other WithMaxModelLen would be
// ignored (a long prompt would land in +Inf), so it is refused, for as long
// as the provider lives (closing the first Recorder does not free the
// instrument). The same length, and another provider, are fine.
func TestMaxModelLenConflictOnOneProvider(t *testing.T) {
	mp := sdkProvider(t)
	first, err := newOn(mp, "short", instrument.WithMaxModelLen(4096))
	if err != nil {
		t.Fatal(err)
	}
	_, err = newOn(mp, "long", instrument.WithMaxModelLen(131072))
	if !errors.Is(err, instrument.ErrConfig) {
		t.Fatalf("another max model length on the same provider: %v, want ErrConfig", err)
	}
	for _, want := range []string{"131072", "4096", "views.WithBuckets", "MeterProvider"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := newOn(mp, "long", instrument.WithMaxModelLen(131072)); !errors.Is(err, instrument.ErrConfig) {
		t.Errorf("after the first Recorder closed: %v, want ErrConfig", err)
	}
	if _, err := newOn(&sharedProvider{mp, nil}, "long", instrument.WithMaxModelLen(131072)); !errors.Is(err, instrument.ErrConfig) {
		t.Errorf("through a wrapper: %v, want ErrConfig", err)
	}
	if _, err := newOn(mp, "same-length", instrument.WithMaxModelLen(4096)); err != nil {
		t.Errorf("the same max model length: %v", err)
	}
	// A provider of its own gets its own buckets: a 100,000-token prompt
	// lands in the 100,000 bucket, not +Inf.
	h := newHarness(t, instrument.WithMaxModelLen(131072))
	f := validFinished()
	f.PromptTokens, f.PrefillComputedTokens = 100_000, 100_000
	h.engine(0).RecordFinished(context.Background(), &f)
	p := h.collect().get(t, "vllm:request_prompt_tokens", engineLabels("0")...)
	if n := len(p.bounds); n == 0 || p.bounds[n-1] != 100_000 || p.buckets[n-1] != 1 {
		t.Errorf("a 100,000-token prompt on a provider of its own: %v, want it in the bucket up to 100000", p)
	}
}

// onlyMeter is a provider wrapper that a Recorder cannot see through: no
// Unwrap. It still forwards Meter, so its instruments are the SDK's.
type onlyMeter struct{ metric.MeterProvider }

// Instruments shared through an opaque wrapper are caught too.
func TestMaxModelLenConflictThroughOpaqueWrapper(t *testing.T) {
	mp := sdkProvider(t)
	if _, err := newOn(mp, "a", instrument.WithMaxModelLen(4096)); err != nil {
		t.Fatal(err)
	}
	if _, err := newOn(onlyMeter{mp}, "b", instrument.WithMaxModelLen(1024)); !errors.Is(err, instrument.ErrConfig) {
		t.Errorf("through an opaque wrapper: %v, want ErrConfig", err)
	}
	if _, err := newOn(onlyMeter{mp}, "a", instrument.WithMaxModelLen(4096)); !errors.Is(err, instrument.ErrDuplicateSeries) {
		t.Errorf("the same series through an opaque wrapper: %v, want ErrDuplicateSeries", err)
	}
	runtime.KeepAlive(mp)
}
