package openaihttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/views"
)

// WithHTTPMetrics gives the HTTP families of vLLM's API server, under the
// exact names, labels and buckets of prometheus-fastapi-instrumentator, in
// a vLLM-compatible scrape: every path and method, the ServeMux route as
// handler, "none" for an unrouted request, the status class.
func TestHTTPMetricsScrape(t *testing.T) {
	p, err := exporters.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	vs, err := views.VLLM()
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.Reader), sdkmetric.WithView(vs...))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(p.Wrap(mp)), instrument.WithModelName(model))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", jsonHandler(200, nonStreamResponse))
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"data":[]}`) })
	mux.HandleFunc("POST /v1/fail", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	h := openaihttp.NewHandler(mux, openaihttp.WithEngine(e), openaihttp.WithHTTPMetrics(e, nil),
		openaihttp.WithErrorHandler(func(err error) { t.Errorf("recording: %v", err) }))
	do := func(method, path, body string) {
		defer func() { _ = recover() }() // the panicking route
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, strings.NewReader(body)))
	}
	do(http.MethodPost, "/v1/chat/completions", chatBody)
	do(http.MethodPost, "/v1/chat/completions", chatBody)
	do(http.MethodGet, "/v1/models", "")
	do(http.MethodGet, "/no/such/path", "")
	do("BREW", "/v1/models", "")
	do(http.MethodPost, "/v1/fail", "")

	w := httptest.NewRecorder()
	p.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	scrape := w.Body.String()
	for _, line := range []string{
		`http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 2`,
		`http_requests_total{handler="/v1/models",method="GET",status="2xx"} 1`,
		`http_requests_total{handler="none",method="GET",status="4xx"} 1`,
		`http_requests_total{handler="none",method="_OTHER",status="4xx"} 1`,
		`http_requests_total{handler="/v1/fail",method="POST",status="5xx"} 1`,
		`http_request_duration_seconds_count{handler="/v1/chat/completions",method="POST"} 2`,
		`http_request_duration_seconds_bucket{handler="/v1/models",method="GET",le="+Inf"} 1`,
		`http_request_duration_highr_seconds_count 6`,
		"# TYPE http_requests_total counter",
		"# TYPE http_request_duration_seconds histogram",
	} {
		if !strings.Contains(scrape, line+"\n") {
			t.Errorf("the scrape lacks %s", line)
		}
	}
	labels := map[string]string{
		"http_request_duration_seconds":       `handler="/v1/models",method="GET",`,
		"http_request_duration_highr_seconds": "",
	}
	for _, f := range views.HTTPFamilies() {
		for _, b := range f.Buckets {
			if line := fmt.Sprintf(`%s_bucket{%sle="%s"}`, f.Name, labels[f.Name], formatLe(b)); !strings.Contains(scrape, line) {
				t.Errorf("the scrape lacks %s", line)
			}
		}
	}
	for _, line := range strings.Split(scrape, "\n") {
		if strings.HasPrefix(line, "http_") && (strings.Contains(line, "model_name=") || strings.Contains(line, "engine=")) {
			t.Errorf("an HTTP series carries an engine label, which vLLM's do not: %s", line)
		}
	}
}

// formatLe writes a bucket bound as the scrape does (whole numbers as 1.0).
func formatLe(b float64) string {
	if b == float64(int64(b)) {
		return fmt.Sprintf("%d.0", int64(b))
	}
	return fmt.Sprint(b)
}

// Route templates from untrusted input stay bounded: past 256 handlers,
// requests count under "none".
func TestHTTPMetricsBounded(t *testing.T) {
	c := newRec(t)
	h := openaihttp.NewHandler(http.NotFoundHandler(), openaihttp.WithHTTPMetrics(c.e, func(r *http.Request) string { return r.URL.Path }))
	for i := range 1000 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, fmt.Sprintf("/p/%d", i), nil))
	}
	if got := c.r.Value("http_requests_total", "handler", "none", "method", "GET", "status", "4xx"); got != 1000-256 {
		t.Errorf("requests under none = %v, want %d", got, 1000-256)
	}
	if got := c.r.Value("http_requests_total", "handler", "/p/255", "method", "GET", "status", "4xx"); got != 1 {
		t.Errorf("requests of the 256th handler = %v, want 1", got)
	}
}
