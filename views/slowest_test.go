package views_test

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
	"github.com/infermetrics/infermetrics/views"
)

const ttftFamily = "vllm:time_to_first_token_seconds"

// requestContext returns a context with a sampled span whose trace ID
// encodes n.
func requestContext(n uint64) (context.Context, trace.TraceID) {
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[8:], n+1)
	sid := trace.SpanID{1}
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})), tid
}

// ttftRun records TTFTs with sampled spans, 100 per iteration, on a
// Recorder with the given views, and collects them from reader.
type ttftRun struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	rec    *instrument.Recorder
	next   uint64 // the next request number (trace ID)
}

func newTTFTRun(t *testing.T, vs []sdkmetric.View, readerOpts ...sdkmetric.ManualReaderOption) *ttftRun {
	t.Helper()
	reader := sdkmetric.NewManualReader(readerOpts...)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName(modelName),
		testutil.StrictErrors(t))
	if err != nil {
		t.Fatal(err)
	}
	return &ttftRun{t: t, reader: reader, rec: rec}
}

// record records the values, request n's TTFT with trace ID n, and returns
// the trace ID of each value.
func (r *ttftRun) record(values []float64) []trace.TraceID {
	r.t.Helper()
	ids := make([]trace.TraceID, len(values))
	for start := 0; start < len(values); start += 100 {
		end := min(start+100, len(values))
		it := stats.Iteration{GenerationTokens: int64(end - start), TTFT: values[start:end]}
		for i := start; i < end; i++ {
			var ctx context.Context
			ctx, ids[i] = requestContext(r.next)
			r.next++
			it.TTFTContexts = append(it.TTFTContexts, ctx)
		}
		r.rec.RecordIteration(context.Background(), 0, &it)
	}
	return ids
}

// exemplars collects and returns the TTFT family's exemplars, with the
// aggregation it has ("explicit" or "exponential").
func (r *ttftRun) exemplars() ([]metricdata.Exemplar[float64], string) {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != ttftFamily {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				return d.DataPoints[0].Exemplars, "explicit"
			case metricdata.ExponentialHistogram[float64]:
				return d.DataPoints[0].Exemplars, "exponential"
			default:
				r.t.Fatalf("%s: %T", ttftFamily, m.Data)
			}
		}
	}
	r.t.Fatalf("no %s stream", ttftFamily)
	return nil, ""
}

// hasTrace reports whether an exemplar of value v names the trace.
func hasTrace(exs []metricdata.Exemplar[float64], tid trace.TraceID, v float64) bool {
	return slices.ContainsFunc(exs, func(e metricdata.Exemplar[float64]) bool {
		return trace.TraceID(e.TraceID) == tid && e.Value == v
	})
}

// typicalTTFTs returns n TTFTs from 20 ms to 3 s, fixed by the seed.
func typicalTTFTs(n int, seed uint64) []float64 {
	rnd := rand.New(rand.NewPCG(seed, 19))
	out := make([]float64, n)
	for i := range out {
		out[i] = 0.02 * math.Pow(150, rnd.Float64())
	}
	return out
}

// Of 2,000 requests with sampled spans, the one slow request is always an
// exemplar of TTFT, native or classic, wherever it comes in the interval;
// with the exponential aggregation the SDK's own reservoir keeps 20 of the
// 2,000 at random.
func TestSlowestRequestIsAnExemplar(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []views.Option
		agg  string
	}{
		{"classic", nil, "explicit"},
		{"native", []views.Option{views.WithExponentialLatency()}, "exponential"},
	} {
		for _, at := range []int{0, 777, 1999} {
			vs, err := views.VLLM(c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			run := newTTFTRun(t, vs)
			values := typicalTTFTs(2000, uint64(at))
			values[at] = 30
			ids := run.record(values)
			exs, agg := run.exemplars()
			if agg != c.agg {
				t.Fatalf("%s: %s aggregation, want %s", c.name, agg, c.agg)
			}
			if !hasTrace(exs, ids[at], 30) {
				t.Errorf("%s, slow request %d of 2000: not among the %d exemplars", c.name, at, len(exs))
			}
			if len(exs) < 5 {
				t.Errorf("%s: %d exemplars, want one per bucket or doubling the values fell in", c.name, len(exs))
			}
		}
	}
}

// An interval ends at each collection: the slowest request of the second
// interval is an exemplar though the first had a slower one in the same
// bucket and doubling (cumulative temporality keeps the reservoir), and
// with delta temporality too.
func TestSlowestPerInterval(t *testing.T) {
	delta := sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality })
	for _, c := range []struct {
		name   string
		opts   []views.Option
		reader []sdkmetric.ManualReaderOption
	}{
		{"classic cumulative", nil, nil},
		{"native cumulative", []views.Option{views.WithExponentialLatency()}, nil},
		{"classic delta", nil, []sdkmetric.ManualReaderOption{delta}},
		{"native delta", []views.Option{views.WithExponentialLatency()}, []sdkmetric.ManualReaderOption{delta}},
	} {
		vs, err := views.VLLM(c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		run := newTTFTRun(t, vs, c.reader...)
		first := typicalTTFTs(500, 1)
		first[100] = 30 // in TTFT's bucket (20, 40] and in [16, 32)
		ids := run.record(first)
		if exs, _ := run.exemplars(); !hasTrace(exs, ids[100], 30) {
			t.Errorf("%s: first interval's slowest missing", c.name)
		}
		second := typicalTTFTs(500, 2)
		second[400] = 25 // the same bucket and doubling, slower than every other of this interval
		second[10] = 21  // the same, earlier, faster
		ids = run.record(second)
		exs, _ := run.exemplars()
		if !hasTrace(exs, ids[400], 25) {
			t.Errorf("%s: second interval's slowest (25 s) missing from %v", c.name, values(exs))
		}
		if hasTrace(exs, ids[10], 21) {
			t.Errorf("%s: 21 s kept beside the slower 25 s of its range", c.name)
		}
		for i := 1; i < len(exs); i++ {
			if exs[i].Time.Before(exs[i-1].Time) {
				t.Errorf("%s: exemplars out of time order: %v before %v", c.name, exs[i-1].Time, exs[i].Time)
			}
		}
	}
}

func values(exs []metricdata.Exemplar[float64]) []float64 {
	var out []float64
	for _, e := range exs {
		out = append(out, e.Value)
	}
	return out
}

// The reservoir itself: the slowest of each range, in time order, without
// attributes; NaN never kept; int64 values compared as numbers; an empty
// interval returns what the last kept.
func TestSlowestExemplarsReservoir(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	collect := func(r exemplar.Reservoir) []exemplar.Exemplar {
		var out []exemplar.Exemplar
		r.Collect(&out)
		return out
	}
	t.Run("explicit", func(t *testing.T) {
		r := views.SlowestExemplars(sdkmetric.AggregationExplicitBucketHistogram{Boundaries: []float64{10, 1}})(attribute.Set{})
		ctx, tid := requestContext(7)
		dropped := []attribute.KeyValue{attribute.String("engine", "0")}
		r.Offer(context.Background(), base, exemplar.NewValue(0.5), dropped)
		r.Offer(ctx, base.Add(2*time.Second), exemplar.NewValue(0.9), dropped)
		r.Offer(context.Background(), base.Add(3*time.Second), exemplar.NewValue(0.7), dropped)
		r.Offer(context.Background(), base.Add(time.Second), exemplar.NewValue(50.0), dropped)
		r.Offer(context.Background(), base.Add(4*time.Second), exemplar.NewValue(math.NaN()), dropped)
		got := collect(r)
		if len(got) != 2 || got[0].Value.Float64() != 50 || got[1].Value.Float64() != 0.9 {
			t.Fatalf("got %v, want 50 (t+1s) then 0.9 (t+2s)", got)
		}
		if trace.TraceID(got[1].TraceID) != tid || len(got[0].TraceID) != 0 || len(got[1].FilteredAttributes) != 0 {
			t.Errorf("got trace %x and %x, attributes %v; want %s, none and none", got[1].TraceID, got[0].TraceID,
				got[1].FilteredAttributes, tid)
		}
		if again := collect(r); len(again) != 2 {
			t.Errorf("an interval without measurements returned %d exemplars, want the 2 kept", len(again))
		}
	})
	t.Run("doublings, int64", func(t *testing.T) {
		r := views.SlowestExemplars(sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20})(attribute.Set{})
		for i, v := range []int64{3, 2, 5, 6, 4, 1 << 40} {
			r.Offer(context.Background(), base.Add(time.Duration(i)*time.Second), exemplar.NewValue(v), nil)
		}
		var got []int64
		for _, e := range collect(r) {
			got = append(got, e.Value.Int64())
		}
		// [2, 4) keeps 3, [4, 8) keeps 6, and 2^40 shares the last range.
		if want := []int64{3, 6, 1 << 40}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

// WithSDKExemplarReservoirs gives the latency families the SDK's reservoir
// back: with the exponential aggregation it keeps at most 20.
func TestWithSDKExemplarReservoirs(t *testing.T) {
	vs, err := views.VLLM(views.WithExponentialLatency(), views.WithSDKExemplarReservoirs())
	if err != nil {
		t.Fatal(err)
	}
	run := newTTFTRun(t, vs)
	// 100 values in one doubling: SlowestExemplars would keep one of them.
	values := make([]float64, 100)
	for i := range values {
		values[i] = 1 + float64(i)/200
	}
	run.record(values)
	if exs, _ := run.exemplars(); len(exs) != 20 {
		t.Errorf("%d exemplars, want the SDK's 20", len(exs))
	}
}
