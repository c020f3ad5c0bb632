package exporters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

func shutdown(t testing.TB, p *Provider) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func newRecorder(t testing.TB, p *Provider) *instrument.Recorder {
	t.Helper()
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func recordGeneration(t testing.TB, rec *instrument.Recorder, n int64) {
	t.Helper()
	rec.RecordIteration(context.Background(), 0, &stats.Iteration{GenerationTokens: n})
}

const generationSeries = `vllm:generation_tokens_total{engine="0",model_name="m"}`

func TestMetricsExporterEnv(t *testing.T) {
	both := []string{ExporterPrometheus, ExporterOTLP}
	for _, tc := range []struct {
		value    string
		endpoint bool // OTEL_EXPORTER_OTLP_ENDPOINT set
		withOTLP bool
		want     []string
		wantErr  bool
		warnings int // unsupported names reported and ignored
	}{
		{value: "", want: []string{ExporterPrometheus}},
		{value: "", endpoint: true, want: both},
		{value: "", withOTLP: true, want: both},
		{value: "none", endpoint: true, withOTLP: true, want: []string{}},
		{value: "prometheus", endpoint: true, withOTLP: true, want: []string{ExporterPrometheus}},
		{value: "otlp", withOTLP: true, want: []string{ExporterOTLP}},
		{value: "prometheus,otlp", endpoint: true, want: both},
		{value: " OTLP , prometheus ", withOTLP: true, want: []string{ExporterOTLP, ExporterPrometheus}},
		{value: "console", want: []string{ExporterPrometheus}, warnings: 1},
		{value: "console", endpoint: true, want: both, warnings: 1},
		{value: "prometheus,jaeger", want: []string{ExporterPrometheus}, warnings: 1},
		{value: "console,none,logging", endpoint: true, want: []string{}, warnings: 2},
		{value: "none,otlp", wantErr: true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			cleanEnv(t)
			recv := startReceiver(t)
			t.Setenv(EnvMetricsExporter, tc.value)
			t.Setenv(EnvOTLPProtocol, "grpc")
			if tc.endpoint {
				t.Setenv(EnvOTLPEndpoint, "http://"+recv.addr)
			}
			var sink errorSink
			opts := []Option{WithErrorHandler(sink.Handle)}
			if tc.withOTLP {
				opts = append(opts, WithOTLP(WithProtocol(ProtocolGRPC), WithEndpoint(recv.addr), WithInsecure(), WithInterval(time.Hour)))
			}
			p, err := Setup(context.Background(), opts...)
			if tc.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Exporters(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Exporters() = %v, want %v", got, tc.want)
			}
			if errs := sink.Get(); len(errs) != tc.warnings {
				t.Errorf("warnings %v, want %d", errs, tc.warnings)
			} else {
				for _, e := range errs {
					if !errors.Is(e, ErrConfig) || !strings.Contains(e.Error(), EnvMetricsExporter) {
						t.Errorf("warning %v: want an ErrConfig about %s", e, EnvMetricsExporter)
					}
				}
			}
			recordGeneration(t, newRecorder(t, p), 7)
			code, body, _ := scrape(t, p.Handler(), "")
			wantProm := strings.Contains(strings.Join(tc.want, ","), ExporterPrometheus)
			if wantProm && (code != 200 || !strings.Contains(body, generationSeries+" 7")) {
				t.Errorf("scrape: HTTP %d, want the series at 7:\n%s", code, body)
			}
			if !wantProm && code != 404 {
				t.Errorf("scrape: HTTP %d, want 404", code)
			}
			shutdown(t, p)
			wantOTLP := strings.Contains(strings.Join(tc.want, ","), ExporterOTLP)
			if got := len(recv.requests()) > 0; got != wantOTLP {
				t.Errorf("OTLP export received: %v, want %v", got, wantOTLP)
			}
		})
	}
}

func TestSDKDisabled(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvSDKDisabled, "true")
	t.Setenv(EnvMetricsExporter, "bogus") // not even read
	var sink errorSink
	p, err := Setup(context.Background(), WithOTLP(), WithErrorHandler(sink.Handle))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.MeterProvider().(noop.MeterProvider); !ok {
		t.Errorf("MeterProvider() is %T, want noop.MeterProvider", p.MeterProvider())
	}
	recordGeneration(t, newRecorder(t, p), 3) // recording works and does nothing
	if code, _, _ := scrape(t, p.Handler(), ""); code != 404 {
		t.Errorf("scrape: HTTP %d, want 404", code)
	}
	if p.Resource() != nil || len(p.Exporters()) != 0 {
		t.Errorf("resource %v, exporters %v: want none", p.Resource(), p.Exporters())
	}
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Error(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	logged := captureStdLog(t)
	otel.Handle(errors.New("after a disabled setup"))
	if got := sink.Get(); len(got) != 0 {
		t.Errorf("a disabled Setup installed the error handler: %v", got)
	}
	logged.expect(t, "after a disabled setup") // by OpenTelemetry's default handler
}

// TestCollectorDown points OTLP at a closed port: start-up succeeds, the
// scrape works, export errors reach the error handler, Shutdown returns in
// time.
func TestCollectorDown(t *testing.T) {
	cleanEnv(t)
	var sink errorSink
	p, err := Setup(context.Background(),
		WithOTLP(WithProtocol(ProtocolGRPC), WithEndpoint(closedAddr(t)), WithInsecure(), WithInterval(50*time.Millisecond), WithTimeout(time.Second)),
		WithErrorHandler(sink.Handle))
	if err != nil {
		t.Fatalf("Setup with the collector down: %v", err)
	}
	recordGeneration(t, newRecorder(t, p), 11)
	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 || !strings.Contains(body, generationSeries+" 11") {
		t.Errorf("scrape: HTTP %d, want the series at 11:\n%s", code, body)
	}
	waitFor(t, "an export error at the error handler", func() bool { return len(sink.Get()) > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err = p.Shutdown(ctx)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Shutdown took %v with a 2 s deadline", d)
	}
	t.Logf("Shutdown: %v", err) // an error is expected, not required
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}

	// After Shutdown the handler is detached.
	n := len(sink.Get())
	logged := captureStdLog(t)
	otel.Handle(errors.New("after shutdown"))
	if got := sink.Get(); len(got) != n {
		t.Errorf("the error handler was called after Shutdown: %v", got[n:])
	}
	logged.expect(t, "after shutdown") // by the handler installed before
}

func TestErrorHandlerChain(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvMetricsExporter, "none")
	var sink1, sink2 errorSink
	p1, err := Setup(context.Background(), WithErrorHandler(sink1.Handle))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Setup(context.Background(), WithErrorHandler(sink2.Handle))
	if err != nil {
		t.Fatal(err)
	}
	sentinel := errors.New("boom")
	otel.Handle(sentinel)
	got1, got2 := sink1.Get(), sink2.Get()
	if len(got1) != 1 || len(got2) != 1 || !errors.Is(got1[0], sentinel) || !errors.Is(got2[0], sentinel) {
		t.Fatalf("handlers got %v and %v, want the error once each", got1, got2)
	}
	shutdown(t, p1)
	otel.Handle(sentinel)
	got1, got2 = sink1.Get(), sink2.Get()
	if len(got1) != 1 || len(got2) != 2 {
		t.Errorf("after the first Shutdown: %d and %d calls, want 1 and 2", len(got1), len(got2))
	}
	shutdown(t, p2)
	logged := captureStdLog(t)
	otel.Handle(errors.New("logged by the default handler"))
	logged.expect(t, "logged by the default handler")
	got1, got2 = sink1.Get(), sink2.Get()
	if len(got1) != 1 || len(got2) != 2 {
		t.Errorf("after both Shutdowns: %d and %d calls, want 1 and 2", len(got1), len(got2))
	}
}

func TestResource(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	get := func(p *Provider, k attribute.Key) string {
		v, _ := p.Resource().Set().Value(k)
		return v.String()
	}
	t.Run("env", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv(EnvMetricsExporter, "none")
		t.Setenv(EnvResourceAttributes, "service.name=attrs,service.instance.id=i-1,deployment.environment.name=test")
		t.Setenv(EnvServiceName, "env-svc")
		p, err := Setup(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, p)
		if got := get(p, semconv.ServiceNameKey); got != "env-svc" {
			t.Errorf("service.name = %q, want env-svc (OTEL_SERVICE_NAME)", got)
		}
		if got := get(p, semconv.ServiceInstanceIDKey); got != "i-1" {
			t.Errorf("service.instance.id = %q, want i-1", got)
		}
		if got := get(p, "deployment.environment.name"); got != "test" {
			t.Errorf("deployment.environment.name = %q", got)
		}
		if got := get(p, "telemetry.sdk.language"); got != "go" {
			t.Errorf("telemetry.sdk.language = %q", got)
		}
	})
	t.Run("options win", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv(EnvMetricsExporter, "none")
		t.Setenv(EnvResourceAttributes, "service.instance.id=i-1,team=env")
		t.Setenv(EnvServiceName, "env-svc")
		p, err := Setup(context.Background(), WithServiceName("code-svc"), WithServiceInstanceID("i-2"),
			WithResourceAttributes(attribute.String("team", "code"), semconv.ServiceName("attr-svc")))
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, p)
		for k, want := range map[attribute.Key]string{
			semconv.ServiceNameKey: "code-svc", semconv.ServiceInstanceIDKey: "i-2", "team": "code",
		} {
			if got := get(p, k); got != want {
				t.Errorf("%s = %q, want %q", k, got, want)
			}
		}
	})
	t.Run("generated instance id", func(t *testing.T) {
		cleanEnv(t)
		t.Setenv(EnvMetricsExporter, "none")
		p1, err := Setup(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p2, err := Setup(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, p1)
		defer shutdown(t, p2)
		id1, id2 := get(p1, semconv.ServiceInstanceIDKey), get(p2, semconv.ServiceInstanceIDKey)
		if !uuid.MatchString(id1) || !uuid.MatchString(id2) || id1 == id2 {
			t.Errorf("generated ids %q and %q: want two distinct version 4 UUIDs", id1, id2)
		}
		if got := get(p1, semconv.ServiceNameKey); !strings.HasPrefix(got, "unknown_service") {
			t.Errorf("default service.name = %q", got)
		}
	})
}

func TestSetupViews(t *testing.T) {
	cleanEnv(t)
	p, err := Setup(context.Background(), WithViews()) // no views: instrument names
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, p)
	recordGeneration(t, newRecorder(t, p), 4)
	_, body, _ := scrape(t, p.Handler(), "")
	if !strings.Contains(body, `vllm_generation_tokens_total{engine="0",model_name="m"} 4`) {
		t.Errorf("without views, want the instrument name:\n%s", body)
	}
	if strings.Contains(body, "vllm:") {
		t.Error("without views, vLLM names appear")
	}
}

func TestSetupStatsLog(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvMetricsExporter, "none") // the stats log is not an exporter
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	p, err := Setup(context.Background(), WithStatsLog(logger, WithStatsInterval(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	recordGeneration(t, newRecorder(t, p), 9)
	shutdown(t, p) // the final export writes a line
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
		t.Fatalf("want one JSON line, got %q: %v", buf.String(), err)
	}
	if line["msg"] != StatsMessage || line[StatsKeyModelName] != "m" || line[StatsKeyGenerationThroughput].(float64) <= 0 {
		t.Errorf("stats line = %v", line)
	}
}
