package prometheus

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/infermetrics/infermetrics/exporters/internal/exportertest"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// protobufAccept is the Accept header of Prometheus 2.42 started with
// --enable-feature=native-histograms.
const protobufAccept = exportertest.ProtobufAccept

const ttftFamily = "vllm:time_to_first_token_seconds"

// nativeProvider wires a provider with views.VLLM(opts...) and a Recorder
// of engines 0 and 1 on it, as Setup does; withViews tells the handler the
// views.
func nativeProvider(t testing.TB, withViews bool, opts ...views.Option) (*Exporter, *instrument.Recorder) {
	t.Helper()
	vs, err := views.VLLM(opts...)
	if err != nil {
		t.Fatal(err)
	}
	var popts []Option
	if withViews {
		popts = append(popts, WithProviderViews(vs...))
	}
	prom, err := New(popts...)
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(mp)), instrument.WithModelName("m"),
		instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	return prom, rec
}

// protobufFamilies scrapes prom's handler with the protobuf Accept header
// and decodes the families by name (the series of a family's messages
// together).
func protobufFamilies(t *testing.T, prom *Exporter) map[string]*dto.MetricFamily {
	t.Helper()
	out := map[string]*dto.MetricFamily{}
	for _, mf := range protobufMessages(t, prom) {
		if prev := out[mf.GetName()]; prev != nil {
			prev.Metric = append(prev.Metric, mf.Metric...)
			continue
		}
		out[mf.GetName()] = mf
	}
	return out
}

// protobufMessages scrapes prom's handler with the protobuf Accept header
// and decodes its family messages in order.
func protobufMessages(t *testing.T, prom *Exporter) []*dto.MetricFamily {
	t.Helper()
	return exportertest.ScrapeProtobuf(t, prom.Handler)
}

// engineHistogram returns the histogram of engine's series in mf.
func engineHistogram(t *testing.T, mf *dto.MetricFamily, engine string) *dto.Histogram {
	t.Helper()
	for _, m := range mf.GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == instrument.KeyEngine && l.GetValue() == engine {
				return m.GetHistogram()
			}
		}
	}
	t.Fatalf("%s has no series of engine %s: %v", mf.GetName(), engine, mf.GetMetric())
	return nil
}

// isNative reports whether Prometheus ingests h as a native histogram: a
// schema and a zero threshold, a zero count or a span (its own test).
func isNative(h *dto.Histogram) bool {
	return h.Schema != nil && (h.GetZeroThreshold() > 0 || h.GetZeroCount() > 0 || len(h.PositiveSpan) > 0 || len(h.NegativeSpan) > 0)
}

// A family exported with the exponential aggregation is a native histogram
// in the protobuf scrape: at zero from start-up for every engine (schema 8,
// the finest Prometheus serves, zero threshold 0, one empty span), then with
// the observations' spans; the other histogram families keep their buckets.
func TestNativeHistogramsProtobuf(t *testing.T) {
	prom, rec := nativeProvider(t, true, views.WithExponential(ttftFamily))
	before := protobufFamilies(t, prom)
	mf := before[ttftFamily]
	if mf == nil {
		t.Fatalf("%s missing from the first scrape", ttftFamily)
	}
	for _, engine := range []string{"0", "1"} {
		h := engineHistogram(t, mf, engine)
		if !isNative(h) || h.GetSchema() != maxNativeSchema || h.GetZeroThreshold() != 0 || h.GetSampleCount() != 0 ||
			len(h.Bucket) != 0 || len(h.PositiveSpan) != 1 || h.PositiveSpan[0].GetLength() != 0 {
			t.Errorf("engine %s before any TTFT: %v, want a zero native histogram of schema %d", engine, h, maxNativeSchema)
		}
	}

	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	ttfts := []float64{0.05, 0.2, 1.5, 12}
	it := &stats.Iteration{TTFT: ttfts}
	e.RecordIteration(context.Background(), it)
	after := protobufFamilies(t, prom)
	h := engineHistogram(t, after[ttftFamily], "0")
	if !isNative(h) || h.GetSampleCount() != uint64(len(ttfts)) || len(h.PositiveSpan) == 0 || len(h.PositiveDelta) == 0 ||
		h.GetSchema() > maxNativeSchema || h.GetSchema() < 0 || h.GetZeroThreshold() != 0 || len(h.Bucket) != 0 {
		t.Errorf("engine 0 after %d TTFTs: %v, want a native histogram with spans, schema 0..8, zero threshold 0", len(ttfts), h)
	}
	// Engine 1 is still at zero, at engine 0's schema.
	if z := engineHistogram(t, after[ttftFamily], "1"); !isNative(z) || z.GetSampleCount() != 0 || z.GetSchema() != h.GetSchema() {
		t.Errorf("engine 1 without TTFTs: %v, want a zero native histogram of schema %d", z, h.GetSchema())
	}
	// A classic family beside it keeps its buckets and no schema.
	if c := engineHistogram(t, after["vllm:e2e_request_latency_seconds"], "0"); c.Schema != nil || len(c.Bucket) == 0 {
		t.Errorf("vllm:e2e_request_latency_seconds: %v, want classic buckets", c)
	}
	t.Logf("TTFT of engine 0: schema %d, spans %v, deltas %v", h.GetSchema(), h.PositiveSpan, h.PositiveDelta)
}

// In the protobuf scrape, a histogram series with native exemplars starts
// a family message of its own, so that Prometheus's parser, which does not
// reset its place in the exemplar list between the series of one message,
// reads every series' exemplars; series without exemplars stay in the
// message before them, and the text scrape keeps one family.
func TestNativeExemplarSeriesStartAMessage(t *testing.T) {
	sampled := func(b byte) context.Context {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{b}, SpanID: trace.SpanID{b}, TraceFlags: trace.FlagsSampled})
		return trace.ContextWithSpanContext(context.Background(), sc)
	}
	for _, tc := range []struct {
		name     string
		recorded []int // engines that record a TTFT within a sampled span
		messages int   // TTFT messages
	}{
		{"none", nil, 1},
		{"one", []int{1}, 0}, // 1 or 2, by the place of its series
		{"both", []int{0, 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prom, rec := nativeProvider(t, true, views.WithExponential(ttftFamily))
			for _, engine := range tc.recorded {
				e, err := rec.Engine(engine)
				if err != nil {
					t.Fatal(err)
				}
				e.RecordIteration(sampled(byte(engine+1)), &stats.Iteration{TTFT: []float64{0.1, 3}})
			}
			var msgs []*dto.MetricFamily
			for _, mf := range protobufMessages(t, prom) {
				if mf.GetName() == ttftFamily {
					msgs = append(msgs, mf)
				}
			}
			if len(msgs) == 0 || (tc.messages > 0 && len(msgs) != tc.messages) {
				t.Fatalf("%d TTFT messages, want %d", len(msgs), tc.messages)
			}
			withExemplars := map[string]bool{}
			for k, mf := range msgs {
				if mf.GetType() != msgs[0].GetType() || mf.GetHelp() != msgs[0].GetHelp() || mf.GetHelp() == "" {
					t.Errorf("TTFT message %d: type %v, help %q; the first: %v, %q", k, mf.GetType(), mf.GetHelp(), msgs[0].GetType(), msgs[0].GetHelp())
				}
				for i, m := range mf.Metric {
					has := len(m.GetHistogram().GetExemplars()) > 0
					if i > 0 && has {
						t.Errorf("TTFT message %d: its series %d carries native exemplars; only a message's first may", k, i)
					}
					if k > 0 && i == 0 && !has {
						t.Errorf("TTFT message %d starts with a series without exemplars: it belongs to the message before", k)
					}
					for _, l := range m.Label {
						if l.GetName() == instrument.KeyEngine {
							if _, dup := withExemplars[l.GetValue()]; dup {
								t.Errorf("engine %s: two TTFT series", l.GetValue())
							}
							withExemplars[l.GetValue()] = has
						}
					}
				}
			}
			want := map[string]bool{"0": false, "1": false}
			for _, e := range tc.recorded {
				want[strconv.Itoa(e)] = true
			}
			if fmt.Sprint(withExemplars) != fmt.Sprint(want) {
				t.Errorf("TTFT series with exemplars by engine %v, want %v", withExemplars, want)
			}
			_, text, _ := scrape(t, prom.Handler, "text/plain")
			if n := strings.Count(text, "# TYPE "+ttftFamily+" "); n != 1 {
				t.Errorf("text scrape: %d TYPE lines of %s, want 1", n, ttftFamily)
			}
		})
	}
}

// Without the views the handler learns a family is native from its first
// gathered series: other engines' zero series follow it.
func TestNativeHistogramsWithoutProviderViews(t *testing.T) {
	prom, rec := nativeProvider(t, false, views.WithExponential(ttftFamily))
	e, err := rec.Engine(1)
	if err != nil {
		t.Fatal(err)
	}
	e.RecordIteration(context.Background(), &stats.Iteration{TTFT: []float64{0.3}})
	if z := engineHistogram(t, protobufFamilies(t, prom)[ttftFamily], "0"); !isNative(z) || z.GetSampleCount() != 0 || len(z.Bucket) != 0 {
		t.Errorf("engine 0 without TTFTs: %v, want a zero native histogram", z)
	}
}

// A text scrape shows a native-only family as its count, its sum and one
// le="+Inf" bucket: enough for rates and means, not for quantiles.
func TestNativeHistogramsInText(t *testing.T) {
	prom, rec := nativeProvider(t, true, views.WithExponential(ttftFamily))
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	e.RecordIteration(context.Background(), &stats.Iteration{TTFT: []float64{0.05, 0.2}})
	body := scrapeOK(t, prom)
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, ttftFamily+"_") && strings.Contains(l, `engine="0"`) {
			lines = append(lines, l)
		}
	}
	want := []string{
		`vllm:time_to_first_token_seconds_bucket{engine="0",model_name="m",le="+Inf"} 2`,
		`vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.25`,
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 2`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("text scrape of a native family:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
