package exporters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
)

// ErrConfig reports an invalid option or environment variable value that
// this package does not fall back from (OTEL_METRICS_EXPORTER, a malformed
// endpoint URL or compression given in code).
var ErrConfig = errors.New("exporters: invalid configuration")

// Environment variables read by this package itself. The OTLP exporter reads
// OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT, _INSECURE, _HEADERS, _COMPRESSION,
// _TIMEOUT and _CERTIFICATE on its own.
const (
	EnvSDKDisabled           = "OTEL_SDK_DISABLED"                                 // "true": Setup builds a no-op provider
	EnvMetricsExporter       = "OTEL_METRICS_EXPORTER"                             // Setup: prometheus, otlp, none
	EnvServiceName           = "OTEL_SERVICE_NAME"                                 // Setup: service.name
	EnvResourceAttributes    = "OTEL_RESOURCE_ATTRIBUTES"                          // Setup: key=value,... resource attributes
	EnvMetricExportInterval  = "OTEL_METRIC_EXPORT_INTERVAL"                       // NewOTLP: milliseconds between exports
	EnvMetricExportTimeout   = "OTEL_METRIC_EXPORT_TIMEOUT"                        // NewOTLP: milliseconds for one export
	EnvTemporalityPreference = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE" // NewOTLP: cumulative, delta, lowmemory
	EnvOTLPEndpoint          = "OTEL_EXPORTER_OTLP_ENDPOINT"                       // Setup: turns OTLP on when set
	EnvOTLPMetricsEndpoint   = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"               // Setup: turns OTLP on when set
	EnvExemplarFilter        = "OTEL_METRICS_EXEMPLAR_FILTER"                      // Setup: exemplars off unless set (or OpenMetrics)
)

// Defaults of the OTLP reader, as in the OpenTelemetry specification.
const (
	DefaultOTLPInterval = 60 * time.Second // between two exports
	DefaultOTLPTimeout  = 30 * time.Second // for one collect and export
)

// Temporality is the aggregation temporality the OTLP reader asks for. The
// zero value means "not set": the environment or the default (Cumulative)
// decides.
type Temporality uint8

const (
	// Cumulative sums and histograms carry totals since start, as Prometheus
	// does. The default.
	Cumulative Temporality = iota + 1
	// Delta sums and histograms carry the change since the previous export.
	Delta
	// LowMemory is delta for synchronous counters and histograms and
	// cumulative for the rest (the specification's "lowmemory").
	LowMemory
)

// String returns the value of OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE
// that selects t: "cumulative", "delta" or "lowmemory" ("" when not set).
func (t Temporality) String() string {
	switch t {
	case Cumulative:
		return "cumulative"
	case Delta:
		return "delta"
	case LowMemory:
		return "lowmemory"
	}
	return ""
}

func (t Temporality) selector() sdkmetric.TemporalitySelector {
	switch t {
	case Delta:
		return sdkmetric.DeltaTemporalitySelector
	case LowMemory:
		return sdkmetric.LowMemoryTemporalitySelector
	}
	return sdkmetric.CumulativeTemporalitySelector
}

// parseTemporality reads a temporality preference, case-insensitively.
func parseTemporality(s string) (Temporality, bool) {
	for _, t := range []Temporality{Cumulative, Delta, LowMemory} {
		if strings.EqualFold(strings.TrimSpace(s), t.String()) {
			return t, true
		}
	}
	return 0, false
}

// compressionNone and compressionGzip are the values WithCompression takes.
const (
	compressionNone = "none"
	compressionGzip = "gzip"
)

type otlpConfig struct {
	grpc        []otlpmetricgrpc.Option // in the caller's order, applied after the environment
	interval    time.Duration
	timeout     time.Duration
	temporality Temporality
	compression string
	errs        []error
}

// OTLPOption configures NewOTLP. Options override the environment.
type OTLPOption interface{ applyOTLP(*otlpConfig) }

type otlpOptionFunc func(*otlpConfig)

func (f otlpOptionFunc) applyOTLP(c *otlpConfig) { f(c) }

// WithEndpoint sets the collector's host:port (for example
// "collector:4317"). The connection uses TLS unless WithInsecure is given or
// the environment asks for an insecure one.
func WithEndpoint(hostport string) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		c.grpc = append(c.grpc, otlpmetricgrpc.WithEndpoint(hostport))
	})
}

// WithEndpointURL sets the collector's endpoint as a URL; the scheme "http"
// makes the connection insecure, "https" uses TLS (for example
// "http://localhost:4317").
func WithEndpointURL(rawURL string) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		u, err := url.Parse(rawURL)
		if err != nil || u.Host == "" {
			c.errs = append(c.errs, fmt.Errorf("%w: WithEndpointURL(%q): want scheme://host:port", ErrConfig, rawURL))
			return
		}
		c.grpc = append(c.grpc, otlpmetricgrpc.WithEndpointURL(rawURL))
	})
}

// WithInsecure turns off TLS for the connection to the collector.
func WithInsecure() OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) { c.grpc = append(c.grpc, otlpmetricgrpc.WithInsecure()) })
}

// WithHeaders sets the gRPC metadata sent with every export (for example an
// authorization header), replacing OTEL_EXPORTER_OTLP_[METRICS_]HEADERS.
func WithHeaders(headers map[string]string) OTLPOption {
	h := maps.Clone(headers)
	return otlpOptionFunc(func(c *otlpConfig) { c.grpc = append(c.grpc, otlpmetricgrpc.WithHeaders(h)) })
}

// WithCompression sets the compression of exports: "gzip" or "none".
func WithCompression(compression string) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		switch compression {
		case compressionGzip, compressionNone:
			c.compression = compression
		default:
			c.errs = append(c.errs, fmt.Errorf("%w: WithCompression(%q): want %q or %q",
				ErrConfig, compression, compressionGzip, compressionNone))
		}
	})
}

// WithInterval sets the time between two exports, replacing
// OTEL_METRIC_EXPORT_INTERVAL (default 60 s).
func WithInterval(d time.Duration) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: WithInterval(%v) must be positive", ErrConfig, d))
			return
		}
		c.interval = d
	})
}

// WithTimeout bounds one export, replacing both OTEL_METRIC_EXPORT_TIMEOUT
// (the reader's collect-and-export, default 30 s) and
// OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT (the gRPC request with its retries,
// default 10 s).
func WithTimeout(d time.Duration) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: WithTimeout(%v) must be positive", ErrConfig, d))
			return
		}
		c.timeout = d
		c.grpc = append(c.grpc, otlpmetricgrpc.WithTimeout(d))
	})
}

// WithTemporality sets the aggregation temporality, replacing
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE (default Cumulative).
func WithTemporality(t Temporality) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		if t.String() == "" {
			c.errs = append(c.errs, fmt.Errorf("%w: WithTemporality(%d)", ErrConfig, t))
			return
		}
		c.temporality = t
	})
}

// otlpSettings is the resolved configuration of an OTLP reader.
type otlpSettings struct {
	interval    time.Duration
	timeout     time.Duration
	temporality Temporality
	grpc        []otlpmetricgrpc.Option
}

// resolveOTLP applies the options over the environment and the defaults.
// Bad environment values are reported to otel.Handle and replaced by the
// default, as the OpenTelemetry SDKs do; bad options are errors.
func resolveOTLP(opts []OTLPOption) (otlpSettings, error) {
	var c otlpConfig
	for _, o := range opts {
		o.applyOTLP(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		return otlpSettings{}, err
	}
	s := otlpSettings{interval: c.interval, timeout: c.timeout, temporality: c.temporality}
	if s.interval == 0 {
		s.interval = envMillis(EnvMetricExportInterval, DefaultOTLPInterval)
	}
	if s.timeout == 0 {
		s.timeout = envMillis(EnvMetricExportTimeout, DefaultOTLPTimeout)
	}
	if s.temporality == 0 {
		s.temporality = Cumulative
		if v, ok := os.LookupEnv(EnvTemporalityPreference); ok && strings.TrimSpace(v) != "" {
			if t, ok := parseTemporality(v); ok {
				s.temporality = t
			} else {
				otel.Handle(fmt.Errorf("%w: %s=%q: want cumulative, delta or lowmemory; using cumulative",
					ErrConfig, EnvTemporalityPreference, v))
			}
		}
	}
	s.grpc = append(c.grpc, otlpmetricgrpc.WithTemporalitySelector(s.temporality.selector()))
	switch c.compression {
	case compressionGzip:
		s.grpc = append(s.grpc, otlpmetricgrpc.WithCompressor(compressionGzip))
	case compressionNone:
		// The exporter has no option for "none" (it would only undo an
		// environment's gzip); the identity encoding is gRPC's no-compression,
		// and dial options given here come after the exporter's own.
		s.grpc = append(s.grpc, otlpmetricgrpc.WithDialOption(
			grpc.WithDefaultCallOptions(grpc.UseCompressor(encoding.Identity))))
	}
	return s, nil
}

// envMillis reads a positive number of milliseconds from the environment.
func envMillis(key string, def time.Duration) time.Duration {
	v := strings.TrimSpace(os.Getenv(key))
	if v == "" {
		return def
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > int64(1<<63-1)/int64(time.Millisecond) {
		otel.Handle(fmt.Errorf("%w: %s=%q: want a positive number of milliseconds; using %v",
			ErrConfig, key, v, def))
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

// NewOTLP creates a periodic reader that pushes metrics to an OpenTelemetry
// collector over gRPC. The exporter reads the standard
// OTEL_EXPORTER_OTLP_[METRICS_]* variables itself (endpoint, default
// https://localhost:4317; insecure; headers; compression; timeout;
// certificate); NewOTLP adds OTEL_METRIC_EXPORT_INTERVAL and
// OTEL_METRIC_EXPORT_TIMEOUT (milliseconds) and
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE (cumulative, delta or
// lowmemory; default cumulative). Options override the environment.
//
// The connection is made lazily: NewOTLP succeeds while the collector is
// down, and failed exports are reported to otel.Handle by the reader (or
// returned by ForceFlush and Shutdown). Shutdown exports what is left.
func NewOTLP(ctx context.Context, opts ...OTLPOption) (sdkmetric.Reader, error) {
	s, err := resolveOTLP(opts)
	if err != nil {
		return nil, err
	}
	exp, err := otlpmetricgrpc.New(ctx, s.grpc...)
	if err != nil {
		return nil, fmt.Errorf("exporters: otlp: %w", err)
	}
	return sdkmetric.NewPeriodicReader(exp,
		sdkmetric.WithInterval(s.interval),
		sdkmetric.WithTimeout(s.timeout),
	), nil
}
