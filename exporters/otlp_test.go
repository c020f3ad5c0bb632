package exporters

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
)

// cleanEnv clears every variable this package or the OTLP exporter reads,
// so that the tests do not depend on the caller's environment.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{
		EnvSDKDisabled, EnvMetricsExporter, EnvServiceName, EnvResourceAttributes,
		EnvMetricExportInterval, EnvMetricExportTimeout, EnvTemporalityPreference,
		EnvOTLPEndpoint, EnvOTLPMetricsEndpoint, EnvOTLPProtocol, EnvOTLPMetricsProtocol,
		"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_METRICS_INSECURE",
		"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
		"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
		"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
		"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
	} {
		t.Setenv(k, "")
	}
}

type counterPoint struct {
	temporality metricpb.AggregationTemporality
	value       int64
}

// counterPoints returns the points of the int counter name, one per export.
func counterPoints(r *receiver, name string) []counterPoint {
	var out []counterPoint
	for _, req := range r.requests() {
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if m.GetName() != name || m.GetSum() == nil {
						continue
					}
					for _, dp := range m.GetSum().GetDataPoints() {
						out = append(out, counterPoint{m.GetSum().GetAggregationTemporality(), dp.GetAsInt()})
					}
				}
			}
		}
	}
	return out
}

// exportTwice records 5 then 3 on a counter named "c", flushing after each,
// and shuts the provider down.
func exportTwice(t *testing.T, reader sdkmetric.Reader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c, err := mp.Meter("test").Int64Counter("c")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 5)
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatalf("first flush: %v", err)
	}
	c.Add(ctx, 3)
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatalf("second flush: %v", err)
	}
	if err := mp.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestOTLPEndpointFromEnv(t *testing.T) {
	cleanEnv(t)
	recv := startReceiver(t)
	t.Setenv(EnvOTLPProtocol, "grpc")
	t.Setenv(EnvOTLPMetricsEndpoint, "http://"+recv.addr) // http:// means insecure
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=env")
	r, err := NewOTLP(context.Background(), WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	exportTwice(t, r)
	got := counterPoints(recv, "c")
	// Cumulative by default; the shutdown export repeats the total.
	if len(got) < 2 || got[0] != (counterPoint{metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE, 5}) ||
		got[1] != (counterPoint{metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE, 8}) {
		t.Errorf("points = %v, want cumulative 5 then 8", got)
	}
	if h := recv.lastHeaders().Get("x-tenant"); len(h) != 1 || h[0] != "env" {
		t.Errorf("x-tenant header = %v, want [env]", h)
	}
}

func TestOTLPTemporalityFromEnv(t *testing.T) {
	cleanEnv(t)
	recv := startReceiver(t)
	t.Setenv(EnvOTLPProtocol, "grpc")
	t.Setenv(EnvOTLPMetricsEndpoint, "http://"+recv.addr)
	t.Setenv(EnvTemporalityPreference, "delta")
	r, err := NewOTLP(context.Background(), WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	exportTwice(t, r)
	got := counterPoints(recv, "c")
	delta := metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
	if len(got) < 2 || got[0] != (counterPoint{delta, 5}) || got[1] != (counterPoint{delta, 3}) {
		t.Errorf("points = %v, want delta 5 then 3", got)
	}
}

func TestOTLPOptionsOverrideEnv(t *testing.T) {
	cleanEnv(t)
	recv := startReceiver(t)
	// The environment points at a closed port and asks for delta and other
	// headers; the options win.
	t.Setenv(EnvOTLPMetricsEndpoint, "http://"+closedAddr(t))
	t.Setenv(EnvTemporalityPreference, "delta")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-tenant=env")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip")
	r, err := NewOTLP(context.Background(),
		WithProtocol(ProtocolGRPC), WithEndpoint(recv.addr), WithInsecure(), WithInterval(time.Hour),
		WithTemporality(Cumulative), WithHeaders(map[string]string{"x-tenant": "code"}),
		WithCompression("none"))
	if err != nil {
		t.Fatal(err)
	}
	exportTwice(t, r)
	got := counterPoints(recv, "c")
	cumulative := metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
	if len(got) < 2 || got[0] != (counterPoint{cumulative, 5}) || got[1] != (counterPoint{cumulative, 8}) {
		t.Errorf("points = %v, want cumulative 5 then 8", got)
	}
	md := recv.lastHeaders()
	if h := md.Get("x-tenant"); len(h) != 1 || h[0] != "code" {
		t.Errorf("x-tenant header = %v, want [code]", h)
	}
	if enc := recv.lastEncoding(); enc == "gzip" {
		t.Errorf("grpc-encoding = %q, want no gzip", enc)
	}
}

func TestOTLPEndpointURLAndGzip(t *testing.T) {
	cleanEnv(t)
	recv := startReceiver(t)
	r, err := NewOTLP(context.Background(), WithProtocol(ProtocolGRPC), WithEndpointURL("http://"+recv.addr),
		WithCompression("gzip"), WithTemporality(Delta), WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	exportTwice(t, r)
	if enc := recv.lastEncoding(); enc != "gzip" {
		t.Errorf("grpc-encoding = %q, want gzip", enc)
	}
	delta := metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
	if got := counterPoints(recv, "c"); len(got) < 2 || got[0] != (counterPoint{delta, 5}) || got[1] != (counterPoint{delta, 3}) {
		t.Errorf("points = %v, want delta 5 then 3", got)
	}
}

func TestOTLPIntervalFromEnvExports(t *testing.T) {
	cleanEnv(t)
	// A periodic export that Shutdown cuts short is reported to
	// otel.Handle, whose default handler writes to the standard logger.
	logged := captureStdLog(t)
	recv := startReceiver(t)
	t.Setenv(EnvOTLPProtocol, "grpc")
	t.Setenv(EnvOTLPMetricsEndpoint, "http://"+recv.addr)
	t.Setenv(EnvMetricExportInterval, "50") // milliseconds
	r, err := NewOTLP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	c, _ := mp.Meter("test").Int64Counter("c")
	c.Add(context.Background(), 1)
	// No flush: only the 50 ms interval can deliver it (the default is 60 s).
	waitFor(t, "a periodic export", func() bool { return len(counterPoints(recv, "c")) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(logged.String()) {
		if !strings.Contains(line, "context canceled") {
			t.Errorf("logged %q, want only an export that Shutdown cut short", line)
		}
		t.Logf("logged: %s", strings.TrimSpace(line))
	}
}

func TestOTLPBadOptions(t *testing.T) {
	cleanEnv(t)
	for name, opt := range map[string]OTLPOption{
		"interval":    WithInterval(0),
		"timeout":     WithTimeout(-time.Second),
		"temporality": WithTemporality(Temporality(9)),
		"compression": WithCompression("zstd"),
		"url":         WithEndpointURL("localhost"),
		"url scheme":  WithEndpointURL("grpc://collector:4317"),
		"protocol":    WithProtocol("http/json"),
	} {
		if _, err := NewOTLP(context.Background(), opt); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
}
