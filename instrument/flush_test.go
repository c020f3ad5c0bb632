package instrument_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// captureExporter is an in-memory push exporter: it keeps, for each export,
// the total over series of every counter and the total count of every
// histogram (the reader reuses what it exports, so values are copied out).
type captureExporter struct {
	temporality metricdata.Temporality
	mu          sync.Mutex
	exports     []map[string]float64
}

func (c *captureExporter) Temporality(sdkmetric.InstrumentKind) metricdata.Temporality {
	return c.temporality
}

func (c *captureExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

func (c *captureExporter) Export(_ context.Context, rm *metricdata.ResourceMetrics) error {
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += float64(dp.Value)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += float64(dp.Count)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += float64(dp.Count)
				}
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports = append(c.exports, got)
	return nil
}

func (c *captureExporter) ForceFlush(context.Context) error { return nil }
func (c *captureExporter) Shutdown(context.Context) error   { return nil }

// received is what a backend holds of a stream after every export: the last
// exported value with cumulative temporality, the sum of the points with
// delta; ok is false if no export carried it.
func (c *captureExporter) received(name string) (v float64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.exports {
		x, in := e[name]
		if !in {
			continue
		}
		if c.temporality == metricdata.DeltaTemporality {
			v += x
		} else {
			v = x
		}
		ok = true
	}
	return v, ok
}

// pushProvider is a provider whose only reader exports to c when flushed or
// shut down (its interval is an hour).
func pushProvider(c *captureExporter) *sdkmetric.MeterProvider {
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(c, sdkmetric.WithInterval(time.Hour))))
}

// recordRequests records generation tokens and finished requests on engine 0.
func recordRequests(t *testing.T, rec *instrument.Recorder, tokens int64, requests int) {
	t.Helper()
	it := stats.Iteration{GenerationTokens: tokens}
	for range requests {
		it.Finished = append(it.Finished, validFinished())
	}
	rec.RecordIteration(context.Background(), 0, &it)
}

// checkReceived checks what a backend holds of the counters and of one
// histogram fed by the same requests.
func checkReceived(t *testing.T, c *captureExporter, tokens float64, requests float64) {
	t.Helper()
	for name, want := range map[string]float64{
		instrument.NameGenerationTokens:    tokens,
		instrument.NameRequestSuccess:      requests,
		instrument.NameRequestPromptTokens: requests,
	} {
		if got, ok := c.received(name); !ok || got != want {
			t.Errorf("%s received %v (exported: %v), want %v", name, got, ok, want)
		}
	}
}

var temporalities = map[string]metricdata.Temporality{
	"cumulative": metricdata.CumulativeTemporality,
	"delta":      metricdata.DeltaTemporality,
}

// The order a user writes, defer mp.Shutdown then defer rec.Close (Go runs
// Close first), delivers everything recorded: Close flushes the provider
// before its counters leave the exports.
func TestCloseThenShutdownDeliversCounters(t *testing.T) {
	for name, temporality := range temporalities {
		t.Run(name, func(t *testing.T) {
			c := &captureExporter{temporality: temporality}
			func() {
				mp := pushProvider(c)
				defer mp.Shutdown(context.Background())
				rec, err := newOn(mp, model)
				if err != nil {
					t.Fatal(err)
				}
				defer rec.Close()
				recordRequests(t, rec, 7, 2)
			}()
			checkReceived(t, c, 7, 2)
		})
	}
}

// Unloading a model (Close while the provider keeps running) delivers what
// was recorded since the last export.
func TestCloseWhileProviderRunsDeliversLastInterval(t *testing.T) {
	for name, temporality := range temporalities {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := &captureExporter{temporality: temporality}
			mp := pushProvider(c)
			t.Cleanup(func() { _ = mp.Shutdown(ctx) })
			rec, err := newOn(mp, model)
			if err != nil {
				t.Fatal(err)
			}
			recordRequests(t, rec, 5, 1)
			if err := mp.ForceFlush(ctx); err != nil { // a periodic export
				t.Fatal(err)
			}
			recordRequests(t, rec, 3, 2)
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			checkReceived(t, c, 8, 3)
		})
	}
}

// Closing after the provider's shutdown (the order documented before) is
// still quiet: the flush of a shut down provider is not an error.
func TestCloseAfterShutdown(t *testing.T) {
	c := &captureExporter{temporality: metricdata.CumulativeTemporality}
	mp := pushProvider(c)
	rec, err := newOn(mp, model)
	if err != nil {
		t.Fatal(err)
	}
	recordRequests(t, rec, 4, 1)
	if err := mp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Errorf("Close after the provider's Shutdown: %v", err)
	}
	checkReceived(t, c, 4, 1)
}

// A flush that fails is reported by Close, which still closes.
func TestCloseReportsFlushError(t *testing.T) {
	mp := pushProvider(&captureExporter{})
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	flushErr := errors.New("collector unreachable")
	rec, err := newOn(&flushFailing{mp, flushErr}, model)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); !errors.Is(err, flushErr) {
		t.Errorf("Close = %v, want the flush error", err)
	}
	if err := instrument.RecorderRecordIterationErr(rec, context.Background(), 0, &stats.Iteration{}); !errors.Is(err, instrument.ErrClosed) {
		t.Errorf("RecordIteration after a failed flush: %v, want ErrClosed", err)
	}
	if err := rec.CloseContext(context.Background()); err != nil {
		t.Errorf("CloseContext after Close: %v", err)
	}
}

// CloseContext hands its context to the flush, which a provider whose
// collector does not answer needs to end in time.
func TestCloseContextBoundsFlush(t *testing.T) {
	mp := pushProvider(&captureExporter{})
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := newOn(&flushHanging{mp}, model)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rec.CloseContext(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("CloseContext with a canceled context = %v, want context.Canceled", err)
	}
}

// flushHanging is an SDK provider whose ForceFlush ends only with its context.
type flushHanging struct{ *sdkmetric.MeterProvider }

func (f *flushHanging) ForceFlush(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// flushFailing is an SDK provider whose ForceFlush fails.
type flushFailing struct {
	*sdkmetric.MeterProvider
	err error
}

func (f *flushFailing) ForceFlush(context.Context) error { return f.err }
