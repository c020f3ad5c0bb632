package openaihttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// perToken prices every model at one price per token, whatever its kind.
type perToken float64

func (p perToken) Cost(_, _ string, u stats.TokenUsage) (stats.Cost, bool) {
	var n int64
	for _, k := range []stats.TokenKind{stats.TokenInput, stats.TokenCacheRead, stats.TokenCacheWrite, stats.TokenOutput} {
		v, _ := u.Get(k)
		n += v
	}
	c := float64(p) * float64(n)
	return stats.Cost{Known: true, Charged: c, Uncached: c}, true
}

// A gateway records tokens and cost by tenant (a header) and by API key (a
// salted hash of it).
func ExampleWithAttribution() {
	attribution, _ := instrument.NewAttribution(instrument.Dimension{Name: "tenant"}, instrument.Dimension{Name: "api_key"})
	vllm, _ := views.VLLM() // exports the usage families
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(vllm...))
	rec, _ := instrument.NewRecorder(instrument.WithMeterProvider(mp), instrument.WithModelName("qwen-7b"),
		instrument.WithAttribution(attribution), instrument.WithPriceTable())
	engine, _ := rec.Engine(0)

	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}`)
	})
	h := openaihttp.NewHandler(upstream, openaihttp.WithEngine(engine),
		openaihttp.WithAttribution(attribution, openaihttp.FromHeader("X-Tenant"), openaihttp.FromAPIKey([]byte("a secret salt"))),
		openaihttp.WithPrices(perToken(1e-6)))
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"qwen-7b","messages":[]}`))
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("Authorization", "Bearer sk-example")
	h.ServeHTTP(httptest.NewRecorder(), req)

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name == instrument.NameUsageTokens {
					for _, dp := range d.DataPoints {
						fmt.Println(m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
					}
				}
			case metricdata.Sum[float64]:
				if m.Name == instrument.NameUsageCost {
					fmt.Println(m.Name, d.DataPoints[0].Attributes.Encoded(attribute.DefaultEncoder()), d.DataPoints[0].Value)
				}
			}
		}
	}
	// Unordered output:
	// infermetrics.usage.tokens api_key=49f52992ca7b,engine=0,kind=input,model_name=qwen-7b,tenant=acme 9
	// infermetrics.usage.tokens api_key=49f52992ca7b,engine=0,kind=output,model_name=qwen-7b,tenant=acme 2
	// infermetrics.usage.cost api_key=49f52992ca7b,engine=0,model_name=qwen-7b,tenant=acme 1.1e-05
}
