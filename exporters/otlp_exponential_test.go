package exporters

import (
	"context"
	"strings"
	"testing"
	"time"

	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

const ttftFamily = "vllm:time_to_first_token_seconds"

// OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION makes the OTLP
// reader, and only it, aggregate every histogram without a view aggregation
// exponentially: in one Setup the same TTFTs reach OTLP as an exponential
// histogram and the scrape with vLLM's classic buckets.
func TestOTLPExponentialFromEnv(t *testing.T) {
	cleanEnv(t)
	recv := startReceiver(t)
	t.Setenv(EnvOTLPProtocol, "grpc")
	t.Setenv(EnvOTLPMetricsEndpoint, "http://"+recv.addr)
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "base2_exponential_bucket_histogram")
	ctx := context.Background()
	p, err := Setup(ctx, WithOTLP(WithInterval(time.Hour)), WithoutProcessMetrics())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(ctx)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	e, _ := rec.Engine(0)
	e.RecordIteration(ctx, &stats.Iteration{TTFT: []float64{0.05, 0.2, 1.5}})
	if err := p.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	var exp *metricpb.ExponentialHistogramDataPoint
	for _, req := range recv.requests() {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() == ttftFamily && m.GetExponentialHistogram() != nil {
						exp = m.GetExponentialHistogram().GetDataPoints()[0]
					}
				}
			}
		}
	}
	if exp == nil || exp.GetCount() != 3 || len(exp.GetPositive().GetBucketCounts()) == 0 {
		t.Errorf("OTLP %s: %v, want an exponential histogram of 3 observations", ttftFamily, exp)
	}
	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 || !strings.Contains(body, ttftFamily+`_bucket{engine="0",model_name="m",le="0.1"} 1`) {
		t.Errorf("scrape (HTTP %d) lacks the classic bucket le=\"0.1\" of %s:\n%s", code, ttftFamily, body)
	}
}
