// Package prometheus serves what package instrument records as vLLM serves
// /metrics: New gives an OpenTelemetry reader to register on a MeterProvider
// and the handler of its scrape, with vLLM's family names (with
// views.VLLM), no otel_scope_* labels and no target_info, bucket bounds
// written as vLLM writes them (le="1.0"), and every histogram family of each
// live engine at zero from start-up.
//
// It imports no OTLP exporter and no gRPC: a program that serves a scrape
// and pushes nothing imports this package and pays for nothing else.
// Package exporters builds a MeterProvider with this reader and an OTLP one
// from the OTEL_* environment (exporters.Setup) and names this package's API
// again (exporters.NewPrometheus, exporters.WithRegistry, ...).
//
// # Duplicate series
//
// Exporter.Wrap lets instrument.NewRecorder check its series against every
// provider read into the same Prometheus registry: a Recorder that would
// export series another live Recorder on a provider of the registry already
// exports fails at construction with instrument.ErrDuplicateSeries, instead
// of every scrape failing with HTTP 500.
package prometheus
