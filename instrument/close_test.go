package instrument_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// metricNames collects reader and returns the names of its metrics with at
// least one data point.
func metricNames(t *testing.T, reader *sdkmetric.ManualReader) map[string]bool {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			n := 0
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				n = len(d.DataPoints)
			case metricdata.Gauge[int64]:
				n = len(d.DataPoints)
			case metricdata.Gauge[float64]:
				n = len(d.DataPoints)
			case metricdata.Histogram[int64]:
				n = len(d.DataPoints)
			case metricdata.Histogram[float64]:
				n = len(d.DataPoints)
			}
			if n > 0 {
				names[m.Name] = true
			}
		}
	}
	return names
}

// Close unregisters the callback (counters and gauges leave the export),
// makes every Record method return ErrClosed, releases the series claims and
// is idempotent.
func TestRecorderClose(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := newOn(mp, "m", instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	e.RecordIteration(ctx, &stats.Iteration{GenerationTokens: 3})
	if names := metricNames(t, reader); !names[instrument.NameGenerationTokens] || !names[instrument.NameNumRequestsRunning] {
		t.Fatalf("before Close: %v, want the counters and gauges", names)
	}
	if err := rec.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := rec.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	names := metricNames(t, reader)
	if names[instrument.NameGenerationTokens] || names[instrument.NameNumRequestsRunning] {
		t.Errorf("after Close the callback still reports: %v", names)
	}
	if !names[instrument.NameIterationTokens] {
		t.Errorf("after Close: %v, want the recorded histogram kept", names)
	}
	for name, err := range map[string]error{
		"RecordIteration":          instrument.RecordIterationErr(e, ctx, &stats.Iteration{GenerationTokens: 1}),
		"RecordFinished":           instrument.RecordFinishedErr(e, ctx, &stats.FinishedRequest{}),
		"RecordScheduler":          instrument.RecordSchedulerErr(e, ctx, &stats.Scheduler{}),
		"Recorder.RecordIteration": instrument.RecorderRecordIterationErr(rec, ctx, 1, &stats.Iteration{}),
		"Recorder.RecordScheduler": instrument.RecorderRecordSchedulerErr(rec, ctx, 1, &stats.Scheduler{}),
	} {
		if !errors.Is(err, instrument.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	// The claims are released although the Engines are still reachable.
	if _, err := newOn(mp, "m", instrument.WithEngines(0, 1)); err != nil {
		t.Errorf("a new Recorder of the same series after Close: %v", err)
	}
	var nilRec *instrument.Recorder
	if err := nilRec.Close(); err != nil {
		t.Errorf("Close of a nil Recorder: %v", err)
	}
	runtime.KeepAlive(e)
}

// The counters and gauges of an Engine that is no longer reachable keep
// being reported until Close, as the SDK keeps a synchronous instrument's
// series, and so stay claimed.
func TestUnreachableEngineStillReported(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := newOn(mp, "m", instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	e1, err := rec.Engine(1)
	if err != nil {
		t.Fatal(err)
	}
	rec = nil
	runtime.GC()
	e1.RecordIteration(ctx, &stats.Iteration{GenerationTokens: 2})
	if _, err := newOn(mp, "m", instrument.WithEngines(0)); !errors.Is(err, instrument.ErrDuplicateSeries) {
		t.Errorf("engine 0, still reported after its Engine was collected: %v, want ErrDuplicateSeries", err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	engines := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != instrument.NameGenerationTokens {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(instrument.KeyEngine)
				engines[v.AsString()] = dp.Value
			}
		}
	}
	if len(engines) != 2 || engines["0"] != 0 || engines["1"] != 2 {
		t.Errorf("generation tokens by engine = %v, want engine 0 = 0 and engine 1 = 2", engines)
	}
	runtime.KeepAlive(e1)
}
