package instrument_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// A gateway records who used a model and what it cost: one Attribution for
// the process, given to every model's Recorder, and each request's values
// and cost on its ObservedRequest.
func ExampleNewAttribution() {
	ctx := context.Background()
	prom, err := prometheus.New()
	if err != nil {
		log.Fatal(err)
	}
	vllmViews, err := views.VLLM() // exports the usage families too
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom.Reader), sdkmetric.WithView(vllmViews...))
	defer provider.Shutdown(ctx)

	attribution, err := instrument.NewAttribution(
		instrument.Dimension{Name: "tenant"},                 // at most DefaultMaxValues (100) tenants
		instrument.Dimension{Name: "api_key", MaxValues: 20}, // the rest are _overflow
	)
	if err != nil {
		log.Fatal(err)
	}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(prom.Wrap(provider)),
		instrument.WithModelName("gpt-4o"), instrument.WithAttribution(attribution), instrument.WithPriceTable())
	if err != nil {
		log.Fatal(err)
	}
	defer rec.Close()
	engine, _ := rec.Engine(0)

	r := stats.ObservedRequest{Reason: stats.FinishStop, E2ELatency: 0.8,
		UsageKnown: true, PromptTokens: 1200, CachedPromptTokens: 1000, GenerationTokens: 50,
		Cost:        stats.Cost{Known: true, Charged: 0.00175, Uncached: 0.00350},
		Attribution: []string{"acme", "3f1c9a0b2e7d"}, // in the order of the dimensions
	}
	r.Details.Set(stats.TokenCacheRead, 1000)
	engine.RecordRequest(ctx, &r)

	scrape := httptest.NewRecorder()
	prom.Handler.ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(scrape.Body.String()) {
		if strings.HasPrefix(line, "infermetrics_usage_tokens_total") || strings.HasPrefix(line, "infermetrics_usage_cost") {
			fmt.Print(line)
		}
	}
	// Output:
	// infermetrics_usage_cost_total{api_key="3f1c9a0b2e7d",engine="0",model_name="gpt-4o",tenant="acme"} 0.00175
	// infermetrics_usage_cost_uncached_total{api_key="3f1c9a0b2e7d",engine="0",model_name="gpt-4o",tenant="acme"} 0.0035
	// infermetrics_usage_tokens_total{api_key="3f1c9a0b2e7d",engine="0",kind="cache_read",model_name="gpt-4o",tenant="acme"} 1000
	// infermetrics_usage_tokens_total{api_key="3f1c9a0b2e7d",engine="0",kind="input",model_name="gpt-4o",tenant="acme"} 200
	// infermetrics_usage_tokens_total{api_key="3f1c9a0b2e7d",engine="0",kind="output",model_name="gpt-4o",tenant="acme"} 50
}
