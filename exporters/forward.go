package exporters

import (
	promclient "github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/exporters/prometheus"
)

// The Prometheus reader lives in package exporters/prometheus, which does
// not import the OTLP exporters: a program that serves only a scrape
// imports it and links no gRPC. These names keep the API of package
// exporters, which Setup's options use.

// ErrConfig reports an invalid option or environment variable value that
// this package does not fall back from (OTEL_METRICS_EXPORTER with "none"
// and another name, a malformed endpoint URL in code or in the environment,
// a bad compression given in code, a second reader of a registry with
// target_info). It is prometheus.ErrConfig.
var ErrConfig = prometheus.ErrConfig

// Prometheus is prometheus.Exporter: a pull reader whose scrape is what
// vLLM serves on /metrics.
type Prometheus = prometheus.Exporter

// PrometheusOption is prometheus.Option; WithPrometheus takes them.
type PrometheusOption = prometheus.Option

// NewPrometheus is prometheus.New.
func NewPrometheus(opts ...PrometheusOption) (*Prometheus, error) { return prometheus.New(opts...) }

// WithRegistry is prometheus.WithRegistry.
func WithRegistry(reg *promclient.Registry) PrometheusOption { return prometheus.WithRegistry(reg) }

// WithScopeInfo is prometheus.WithScopeInfo.
func WithScopeInfo() PrometheusOption { return prometheus.WithScopeInfo() }

// WithTargetInfo is prometheus.WithTargetInfo.
func WithTargetInfo() PrometheusOption { return prometheus.WithTargetInfo() }

// WithResourceAsLabels is prometheus.WithResourceAsLabels.
func WithResourceAsLabels(filter attribute.Filter) PrometheusOption {
	return prometheus.WithResourceAsLabels(filter)
}

// WithOpenMetrics is prometheus.WithOpenMetrics.
func WithOpenMetrics() PrometheusOption { return prometheus.WithOpenMetrics() }

// WithGoBucketText is prometheus.WithGoBucketText.
func WithGoBucketText() PrometheusOption { return prometheus.WithGoBucketText() }

// WithProviderViews is prometheus.WithProviderViews.
func WithProviderViews(v ...sdkmetric.View) PrometheusOption {
	return prometheus.WithProviderViews(v...)
}
