package exporters

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
)

// TestPrometheusAndOTLPAgree records one scenario on a Setup provider with
// both exporters and checks that the scrape and the OTLP receiver hold the
// same counters, gauges and histograms (values, counts, sums, buckets).
func TestPrometheusAndOTLPAgree(t *testing.T) {
	t.Setenv(EnvMetricsExporter, "")
	recv := startReceiver(t)
	ctx := context.Background()
	p, err := Setup(ctx,
		WithServiceName("parity"),
		WithOTLP(WithProtocol(ProtocolGRPC), WithEndpoint(recv.addr), WithInsecure(), WithInterval(time.Hour)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Exporters(); !reflect.DeepEqual(got, []string{ExporterPrometheus, ExporterOTLP}) {
		t.Fatalf("Exporters() = %v", got)
	}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.MeterProvider()),
		instrument.WithModelName("m"), instrument.WithEngines(0, 1), instrument.WithKVConnector())
	if err != nil {
		t.Fatal(err)
	}
	driveScenario(t, rec)

	code, body, _ := scrape(t, p.Handler(), "")
	if code != 200 {
		t.Fatalf("scrape: HTTP %d\n%s", code, body)
	}
	fromProm := parseScrape(t, body)

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil { // flushes OTLP; the receiver's lock is free meanwhile
		t.Fatalf("Shutdown: %v", err)
	}
	reqs := recv.requests()
	if len(reqs) == 0 {
		t.Fatal("the receiver got nothing")
	}
	fromOTLP := otlpSamples(reqs)

	counters, histograms := compareSamples(t, fromProm, fromOTLP)
	// The comparison is not vacuous.
	if counters < 5 || histograms < 10 {
		t.Errorf("only %d non-zero counter and %d non-empty histogram series compared", counters, histograms)
	}
	for _, k := range []string{
		`vllm:generation_tokens_total{engine="0",model_name="m"}`,
		`vllm:prompt_tokens_by_source_total{engine="1",model_name="m",source="external_kv_transfer"}`,
		`vllm:num_preemptions_total{engine="0",model_name="m"}`,
		`vllm:e2e_request_latency_seconds{engine="1",model_name="m"}`,
		`vllm:iteration_tokens_total{engine="0",model_name="m"}`,
	} {
		if _, ok := fromProm[k]; !ok {
			t.Errorf("series %s missing", k)
		}
	}
	if v := fromProm[`vllm:num_preemptions_total{engine="0",model_name="m"}`].Value; v != 1 {
		t.Errorf("preemptions on engine 0 = %v, want 1", v)
	}

	// The resource reaches OTLP (and only OTLP: no target_info in the scrape).
	var service string
	for _, kv := range reqs[len(reqs)-1].GetResourceMetrics()[0].GetResource().GetAttributes() {
		if kv.GetKey() == "service.name" {
			service = kv.GetValue().GetStringValue()
		}
	}
	if service != "parity" {
		t.Errorf("service.name at the receiver = %q, want parity", service)
	}
	if strings.Contains(body, "target_info") || strings.Contains(body, "otel_scope_") {
		t.Error("the default scrape has target_info or scope labels")
	}
}
