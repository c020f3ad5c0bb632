// Package exporters ships what package instrument records: one OpenTelemetry
// MeterProvider, shaped by the views of package views, read by several
// readers that all see the same numbers.
//
//   - NewPrometheus: a pull reader and its /metrics handler. By default the
//     scrape is what vLLM serves: vLLM's family names (with views.VLLM), no
//     otel_scope_* labels and no target_info, bucket bounds written as vLLM
//     writes them (le="1.0"), and every histogram family of each live engine
//     present at zero from start-up (OTLP has no point without a
//     measurement); options turn them on or off, copy resource attributes
//     onto the series, or negotiate OpenMetrics (the format that shows
//     exemplars). It is package exporters/prometheus, which a program that
//     only serves a scrape imports instead of this one: it links no OTLP
//     exporter and no gRPC. The names here (NewPrometheus, Prometheus,
//     WithRegistry, ...) are aliases of that package's.
//   - NewOTLP: a periodic reader that pushes to an OpenTelemetry collector
//     over OTLP, protobuf over HTTP (the default) or gRPC, configured from
//     the standard environment variables, options winning over them. It
//     connects lazily, so start-up never depends on the collector; failed
//     exports go to otel.Handle.
//   - NewStatsLog: a periodic reader that writes vLLM's stats line (prompt
//     and generation throughput, running and waiting requests, preemptions,
//     KV cache usage, prefix cache hit rates) through log/slog, computed from
//     the same data.
//   - Setup: one MeterProvider with a resource, views.VLLM() and the readers
//     chosen by the environment and the options, and client_golang's
//     process collector (process_* families, as in vLLM's scrape, whose
//     default prometheus_client registry has one: vllm/v1/metrics/prometheus.py) on the
//     Prometheus registry, and, with WithGoMetrics, client_golang's Go
//     collector (go_* families: goroutines, heap, GC); its Shutdown flushes
//     them.
//
// # Environment
//
// Read by Setup:
//
//	OTEL_SDK_DISABLED=true       no-op MeterProvider, 404 handler, nothing exported
//	OTEL_METRICS_EXPORTER        comma list of prometheus, otlp, none; decides the exporters
//	                             (unset: prometheus, plus otlp when an OTLP endpoint variable
//	                             is set or WithOTLP is given; an unsupported name such as
//	                             console is reported as a warning and ignored)
//	OTEL_SERVICE_NAME            service.name (WithServiceName wins)
//	OTEL_RESOURCE_ATTRIBUTES     resource attributes (WithResourceAttributes, WithServiceName
//	                             and WithServiceInstanceID win)
//
// Read by NewOTLP (options win):
//
//	OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL  http/protobuf (default) or grpc; another value is
//	                                       reported as a warning and ignored
//	OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT  checked: a value that is not an http:// or https://
//	                                       URL with a host is an ErrConfig error (the exporters
//	                                       would skip it and send to localhost)
//
// Read by the SDK's periodic reader and the OTLP exporters themselves;
// NewOTLP passes an option only for what the caller gave, and bad values are
// logged by the SDK and replaced by the default:
//
//	OTEL_METRIC_EXPORT_INTERVAL                       milliseconds between exports (60000)
//	OTEL_METRIC_EXPORT_TIMEOUT                        milliseconds for one export (30000)
//	OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE cumulative (default), delta or lowmemory
//	OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT     collector URL (https://localhost:4318 for
//	                                          http/protobuf, with /v1/metrics appended to the
//	                                          general variable's path; https://localhost:4317
//	                                          for grpc; "http://" means insecure)
//	OTEL_EXPORTER_OTLP_[METRICS_]INSECURE     true for a connection without TLS
//	OTEL_EXPORTER_OTLP_[METRICS_]HEADERS      key=value,... sent with every export
//	OTEL_EXPORTER_OTLP_[METRICS_]COMPRESSION  gzip or none
//	OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT      milliseconds for one export request with retries (10000)
//	OTEL_EXPORTER_OTLP_[METRICS_]CERTIFICATE  CA certificate file for TLS
//	OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION
//
// The METRICS_ variant of a variable wins over the general one. The default
// protocol is http/protobuf, as the OpenTelemetry specification recommends
// and as go.opentelemetry.io/contrib/exporters/autoexport and the other
// OpenTelemetry SDKs do; a collector's gRPC port (4317) needs
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc or WithProtocol(ProtocolGRPC).
//
// # Errors
//
// Recording never waits for an exporter: periodic readers export on their own
// goroutines and the Prometheus reader collects when scraped. Their errors go
// to otel.Handle. WithErrorHandler gives a Setup's own errors (its OTLP
// reader's failed exports, warnings about its environment) to a function of
// the caller, once, and to no other Setup's function: two Setups in one
// process each see their own. ForceFlush and Shutdown return their errors.
//
// # Collector outages
//
// A Record call only updates the SDK's in-memory aggregates: it costs the
// same with the collector up or down, and the set-up starts while the
// collector is down (the exporter connects lazily). Every interval the OTLP
// reader collects and exports on its own goroutine. An export is retried
// (backing off from 5 s) within its timeout (WithTimeout; by default 10 s
// for the request, 30 s for collect and export), then it fails: the error
// goes to otel.Handle and the data points it carried are dropped, since the
// exporter keeps no queue. gRPC reconnects by itself when the collector is
// back (its backoff grows, up to 2 minutes, while the collector stays
// away). Memory does not grow during an outage.
//
// What a failed export loses depends on the temporality:
//
//   - Cumulative (the default): every export carries the totals since the
//     start, so the first export after an outage carries every count and
//     observation recorded during it. Nothing is lost but the resolution in
//     time: the collector has no points for the failed intervals.
//   - Delta, and LowMemory (delta for counters and histograms): the SDK
//     resets a delta stream when it collects it for an export, so the points
//     of a failed export, everything recorded between the export before it
//     and its collection, are lost for good; the collector's totals stay
//     short by exactly that. Points recorded after it arrive with the next
//     export that succeeds.
//   - Gauges carry their latest value in both: the values of the failed
//     intervals are not seen.
//
// The Prometheus reader is always cumulative and does not depend on the
// collector. Use cumulative temporality where counts must survive outages.
//
// # Shutdown
//
// Provider.Shutdown exports what was recorded before it: it flushes the OTLP
// reader (waiting for a periodic export in flight, which the SDK's shutdown
// would cancel, losing its delta points), then shuts every reader down,
// which exports once more. It returns by its context's deadline even when
// the collector accepts connections and never answers. Recording after
// Shutdown is allowed and does nothing.
//
// # Cardinality
//
// Every stream (a family, for each reader) keeps at most
// DefaultCardinalityLimit (2000) series, or the limit of
// WithCardinalityLimit: measurements of further attribute sets are added to
// one overflow series that carries only otel.metric.overflow="true"
// (otel_metric_overflow="true" in a scrape). Totals over a family stay
// exact and memory stays bounded however many model names (one Recorder
// per model, as in a gateway) or LoRA adapter states are reported. With
// OTLP and delta temporality the limit applies per export interval.
//
// # Duplicate series
//
// Setup's MeterProvider (and Prometheus.Wrap) lets instrument.NewRecorder
// check its series against every provider read into the same Prometheus
// registry: a Recorder that would export series another live Recorder on a
// provider of the registry already exports fails at construction with
// instrument.ErrDuplicateSeries, instead of every scrape failing with HTTP
// 500. Two providers sharing a registry must not both overflow a family
// (their overflow series would collide) nor report the same LoRA state
// (vllm:lora_requests_info carries only vLLM's three labels).
package exporters
