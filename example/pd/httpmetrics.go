package main

import (
	"net/http"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// The HTTP families of vLLM's API server (http_requests_total,
// http_request_duration_seconds, http_request_duration_highr_seconds),
// which its overview dashboard reads: vLLM attaches
// prometheus-fastapi-instrumentator to every route but a few
// (vllm/entrypoints/serve/instrumentator/metrics.py @ 02a69ad2: /metrics,
// /health, /health/decode, /load, /ping, /version, /server_info). Of
// those the example serves only /metrics, which stays out of the families;
// every other request, the API's 404 and 405 answers included, is in them.
// The handler label is the route template ("/v1/chat/completions"), "none"
// for a request no route took, as the instrumentator groups untemplated
// requests.

// withHTTPMetrics serves /metrics with metrics, unrecorded, and every
// other request with api, recorded in the HTTP families on e
// (openaihttp.WithHTTPMetrics) beside opts. The dispatch is no ServeMux of
// its own: a ServeMux sets the Request.Pattern that names the handler
// label, and only api's own routes may set it.
func withHTTPMetrics(metrics, api http.Handler, e *instrument.Engine, opts ...openaihttp.Option) http.Handler {
	unrecorded := http.NewServeMux()
	unrecorded.Handle("/metrics", metrics)
	recorded := openaihttp.NewHandler(api, append(opts, openaihttp.WithHTTPMetrics(e, nil))...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := unrecorded.Handler(r); pattern != "" {
			unrecorded.ServeHTTP(w, r)
			return
		}
		recorded.ServeHTTP(w, r)
	})
}
