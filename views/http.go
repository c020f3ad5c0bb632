package views

import "github.com/infermetrics/infermetrics/instrument"

// httpNames are the exact Prometheus names of the HTTP server families
// (instrument.HTTPDescriptors), prometheus-fastapi-instrumentator's, which
// VLLM's views give their streams: the Prometheus exporter adds "_total" to
// the counter and no unit suffix to names that carry one.
var httpNames = map[string]string{
	instrument.NameHTTPRequests:            "http_requests",
	instrument.NameHTTPRequestDuration:     "http_request_duration_seconds",
	instrument.NameHTTPRequestDurationHigh: "http_request_duration_highr_seconds",
}

// HTTPFamilies returns the HTTP server families VLLM exports under the
// names vLLM's API server has them from prometheus-fastapi-instrumentator
// (http_requests_total, http_request_duration_seconds,
// http_request_duration_highr_seconds), recorded by package openaihttp's
// handler with WithHTTPMetrics, with their labels: no model_name or
// engine, as in vLLM.
func HTTPFamilies() []Family {
	var out []Family
	for _, d := range instrument.HTTPDescriptors() {
		out = append(out, Family{Name: exposedName(httpNames[d.Name], d.Kind), Type: d.Kind.String(),
			Labels: d.Attributes, Buckets: d.Buckets, Instrument: d})
	}
	return out
}
