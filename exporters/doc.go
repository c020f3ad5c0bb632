// Package exporters ships what package instrument records: one OpenTelemetry
// MeterProvider, shaped by the views of package views, read by several
// readers that all see the same numbers.
//
//   - NewPrometheus: a pull reader and its /metrics handler. By default the
//     scrape is what vLLM serves: vLLM's family names (with views.VLLM), no
//     otel_scope_* labels and no target_info; options turn them on, copy
//     resource attributes onto the series, or negotiate OpenMetrics (the
//     format that shows exemplars).
//   - NewOTLP: a periodic reader that pushes to an OpenTelemetry collector
//     over gRPC, configured from the standard environment variables, options
//     winning over them. It connects lazily, so start-up never depends on the
//     collector; failed exports go to otel.Handle.
//   - NewStatsLog: a periodic reader that writes vLLM's stats line (prompt
//     and generation throughput, running and waiting requests, preemptions,
//     KV cache usage, prefix cache hit rates) through log/slog, computed from
//     the same data.
//   - Setup: one MeterProvider with a resource, views.VLLM() and the readers
//     chosen by the environment and the options; its Shutdown flushes them.
//
// # Environment
//
// Read by Setup:
//
//	OTEL_SDK_DISABLED=true       no-op MeterProvider, 404 handler, nothing exported
//	OTEL_METRICS_EXPORTER        comma list of prometheus, otlp, none; decides the exporters
//	                             (unset: prometheus, plus otlp when an OTLP endpoint variable
//	                             is set or WithOTLP is given; unknown names are an error)
//	OTEL_SERVICE_NAME            service.name (WithServiceName wins)
//	OTEL_RESOURCE_ATTRIBUTES     resource attributes (WithResourceAttributes, WithServiceName
//	                             and WithServiceInstanceID win)
//
// Read by NewOTLP (options win; bad values are reported to otel.Handle and
// replaced by the default):
//
//	OTEL_METRIC_EXPORT_INTERVAL                       milliseconds between exports (60000)
//	OTEL_METRIC_EXPORT_TIMEOUT                        milliseconds for one export (30000)
//	OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE cumulative (default), delta or lowmemory
//
// Read by the OTLP gRPC exporter itself (the METRICS_ variant wins over the
// general one, options win over both):
//
//	OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT     collector URL (https://localhost:4317; "http://" means insecure)
//	OTEL_EXPORTER_OTLP_[METRICS_]INSECURE     true for a connection without TLS
//	OTEL_EXPORTER_OTLP_[METRICS_]HEADERS      key=value,... sent with every export
//	OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION  gzip or none
//	OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT      milliseconds for one gRPC export with retries (10000)
//	OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE  CA certificate file for TLS
//	OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION
//
// # Errors
//
// Recording never waits for an exporter: periodic readers export on their own
// goroutines and the Prometheus reader collects when scraped. Their errors go
// to otel.Handle; WithErrorHandler routes them to a function of the caller as
// well. ForceFlush and Shutdown return them.
package exporters
