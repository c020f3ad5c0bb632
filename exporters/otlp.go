package exporters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/infermetrics/infermetrics/exporters/internal/sdksetup"
)

// Environment variables read by this package. The OpenTelemetry SDK and the
// OTLP exporters read the others themselves (see the package documentation).
const (
	EnvSDKDisabled         = "OTEL_SDK_DISABLED"                   // "true": Setup builds a no-op provider
	EnvMetricsExporter     = "OTEL_METRICS_EXPORTER"               // Setup: prometheus, otlp, none
	EnvServiceName         = "OTEL_SERVICE_NAME"                   // Setup: service.name
	EnvResourceAttributes  = "OTEL_RESOURCE_ATTRIBUTES"            // Setup: key=value,... resource attributes
	EnvOTLPEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"         // Setup: turns OTLP on when set; NewOTLP: checked
	EnvOTLPMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" // Setup: turns OTLP on when set; NewOTLP: checked
	EnvOTLPProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"         // NewOTLP: grpc or http/protobuf
	EnvOTLPMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL" // NewOTLP: wins over OTEL_EXPORTER_OTLP_PROTOCOL
	EnvExemplarFilter      = sdksetup.EnvExemplarFilter            // Setup: exemplars off unless set (or OpenMetrics)
)

// Environment variables of the OTLP reader that the OpenTelemetry SDK and
// exporters read themselves; listed for reference.
const (
	EnvMetricExportInterval  = "OTEL_METRIC_EXPORT_INTERVAL"                       // SDK: milliseconds between exports
	EnvMetricExportTimeout   = "OTEL_METRIC_EXPORT_TIMEOUT"                        // SDK: milliseconds for one export
	EnvTemporalityPreference = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE" // exporter: cumulative, delta, lowmemory
)

// Defaults of the OTLP reader, as in the OpenTelemetry specification.
const (
	DefaultOTLPInterval = 60 * time.Second // between two exports
	DefaultOTLPTimeout  = 30 * time.Second // for one collect and export
)

// Protocol is the OTLP transport: gRPC or protobuf over HTTP.
type Protocol string

const (
	// ProtocolHTTPProtobuf sends protobuf over HTTP (collector port 4318,
	// path /v1/metrics). The default, as the OpenTelemetry specification
	// recommends and go.opentelemetry.io/contrib/exporters/autoexport does.
	ProtocolHTTPProtobuf Protocol = "http/protobuf"
	// ProtocolGRPC sends protobuf over gRPC (collector port 4317).
	ProtocolGRPC Protocol = "grpc"
)

// DefaultOTLPProtocol is the protocol when neither WithProtocol nor
// OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL chooses one.
const DefaultOTLPProtocol = ProtocolHTTPProtobuf

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

// compressionNone and compressionGzip are the values WithCompression takes.
const (
	compressionNone = "none"
	compressionGzip = "gzip"
)

// otlpConfig holds what the options set; the zero value of a field means
// "not given": the exporters and the SDK then read the environment.
type otlpConfig struct {
	protocol    Protocol
	endpoint    string // host:port, or a URL when endpointURL
	endpointURL bool
	insecure    bool
	headers     map[string]string
	compression string
	interval    time.Duration
	timeout     time.Duration
	temporality Temporality
	route       *errorRoute // where Setup's errors go; nil for NewOTLP alone
	errs        []error
}

// OTLPOption configures NewOTLP. Options override the environment.
type OTLPOption interface{ applyOTLP(*otlpConfig) }

type otlpOptionFunc func(*otlpConfig)

func (f otlpOptionFunc) applyOTLP(c *otlpConfig) { f(c) }

// WithProtocol sets the transport, replacing
// OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL (default DefaultOTLPProtocol).
func WithProtocol(p Protocol) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		if p != ProtocolGRPC && p != ProtocolHTTPProtobuf {
			c.errs = append(c.errs, fmt.Errorf("%w: WithProtocol(%q): want %q or %q",
				ErrConfig, p, ProtocolGRPC, ProtocolHTTPProtobuf))
			return
		}
		c.protocol = p
	})
}

// WithEndpoint sets the collector's host:port (for example
// "collector:4318"). The connection uses TLS unless WithInsecure is given or
// the environment asks for an insecure one.
func WithEndpoint(hostport string) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) { c.endpoint, c.endpointURL = hostport, false })
}

// WithEndpointURL sets the collector's endpoint as a URL; the scheme "http"
// makes the connection insecure, "https" uses TLS (for example
// "http://localhost:4318"). With http/protobuf the URL's path is used as it
// is (the default is /v1/metrics).
func WithEndpointURL(rawURL string) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		if err := checkEndpointURL(rawURL); err != nil {
			c.errs = append(c.errs, fmt.Errorf("%w: WithEndpointURL(%q): %v", ErrConfig, rawURL, err))
			return
		}
		c.endpoint, c.endpointURL = rawURL, true
	})
}

// checkEndpointURL reports whether s is an endpoint URL as the
// specification defines it: scheme http or https, and a host.
func checkEndpointURL(s string) error {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return errors.New("want http://host:port or https://host:port")
	}
	if scheme := strings.ToLower(u.Scheme); (scheme != "http" && scheme != "https") || u.Host == "" {
		return errors.New("want http://host:port or https://host:port")
	}
	return nil
}

// WithInsecure turns off TLS for the connection to the collector.
func WithInsecure() OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) { c.insecure = true })
}

// WithHeaders sets the headers (gRPC metadata) sent with every export (for
// example an authorization header), replacing
// OTEL_EXPORTER_OTLP_[METRICS_]HEADERS.
func WithHeaders(headers map[string]string) OTLPOption {
	h := maps.Clone(headers)
	return otlpOptionFunc(func(c *otlpConfig) { c.headers = h })
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
// OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT (the request with its retries,
// default 10 s).
func WithTimeout(d time.Duration) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: WithTimeout(%v) must be positive", ErrConfig, d))
			return
		}
		c.timeout = d
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

// withRoute makes the reader's errors, and the warnings about the
// environment, go to a Setup's route.
func withRoute(r *errorRoute) OTLPOption {
	return otlpOptionFunc(func(c *otlpConfig) { c.route = r })
}

// resolveOTLPConfig applies the options and checks what the environment
// says about the protocol and the endpoint; everything else in the
// environment is left to the SDK and the exporters.
func resolveOTLPConfig(opts []OTLPOption) (otlpConfig, error) {
	var c otlpConfig
	for _, o := range opts {
		o.applyOTLP(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		return c, err
	}
	if c.protocol == "" {
		c.protocol = envProtocol(c.route)
	}
	if c.endpoint == "" {
		// The exporters read the endpoint themselves, but skip a malformed
		// one (sending to localhost instead): refuse it here.
		key := EnvOTLPMetricsEndpoint
		v := strings.TrimSpace(os.Getenv(key))
		if v == "" {
			key = EnvOTLPEndpoint
			v = strings.TrimSpace(os.Getenv(key))
		}
		if v != "" {
			if err := checkEndpointURL(v); err != nil {
				return c, fmt.Errorf("%w: %s=%q: %v", ErrConfig, key, v, err)
			}
		}
	}
	return c, nil
}

// envProtocol reads OTEL_EXPORTER_OTLP_METRICS_PROTOCOL, then
// OTEL_EXPORTER_OTLP_PROTOCOL. An unsupported value (http/json, say) is
// reported as a warning and ignored, as the specification asks.
func envProtocol(route *errorRoute) Protocol {
	for _, key := range []string{EnvOTLPMetricsProtocol, EnvOTLPProtocol} {
		v := strings.TrimSpace(os.Getenv(key))
		switch Protocol(v) {
		case "":
			continue
		case ProtocolGRPC, ProtocolHTTPProtobuf:
			return Protocol(v)
		}
		route.report(fmt.Errorf("%w: %s=%q: want %q or %q; ignored",
			ErrConfig, key, v, ProtocolGRPC, ProtocolHTTPProtobuf))
	}
	return DefaultOTLPProtocol
}

// exporterOptions names the option constructors that otlpmetricgrpc and
// otlpmetrichttp both have, so that one function maps the options given.
type exporterOptions[O any] struct {
	endpoint, endpointURL func(string) O
	insecure              func() O
	headers               func(map[string]string) O
	timeout               func(time.Duration) O
	temporality           func(sdkmetric.TemporalitySelector) O
	gzip, noCompression   func() O
}

// options returns the exporter options for what c was given, and only
// those, so that the exporter reads the rest from the environment.
func (x exporterOptions[O]) options(c otlpConfig) []O {
	var o []O
	switch {
	case c.endpointURL:
		o = append(o, x.endpointURL(c.endpoint))
	case c.endpoint != "":
		o = append(o, x.endpoint(c.endpoint))
	}
	if c.insecure {
		o = append(o, x.insecure())
	}
	if c.headers != nil {
		o = append(o, x.headers(c.headers))
	}
	switch c.compression {
	case compressionGzip:
		o = append(o, x.gzip())
	case compressionNone:
		o = append(o, x.noCompression())
	}
	if c.timeout > 0 {
		o = append(o, x.timeout(c.timeout))
	}
	if c.temporality != 0 {
		o = append(o, x.temporality(c.temporality.selector()))
	}
	return o
}

var grpcOptions = exporterOptions[otlpmetricgrpc.Option]{
	endpoint:    otlpmetricgrpc.WithEndpoint,
	endpointURL: otlpmetricgrpc.WithEndpointURL,
	insecure:    otlpmetricgrpc.WithInsecure,
	headers:     otlpmetricgrpc.WithHeaders,
	timeout:     otlpmetricgrpc.WithTimeout,
	temporality: otlpmetricgrpc.WithTemporalitySelector,
	gzip:        func() otlpmetricgrpc.Option { return otlpmetricgrpc.WithCompressor(compressionGzip) },
	// The gRPC exporter has no option for "none" (WithCompressor reports
	// any value but gzip as an error); the identity encoding is gRPC's
	// no-compression. It is a call option of each export, not a default
	// call option: before otlpmetricgrpc 1.47 the exporter's own default
	// (gzip, from OTEL_EXPORTER_OTLP_COMPRESSION) came after the dial
	// options given here and won.
	noCompression: func() otlpmetricgrpc.Option {
		return otlpmetricgrpc.WithDialOption(grpc.WithChainUnaryInterceptor(identityCompression))
	},
}

// identityCompression makes a unary call uncompressed, whatever the
// connection's default call options say.
func identityCompression(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoke(ctx, method, req, reply, cc, append(opts, grpc.UseCompressor(encoding.Identity))...)
}

var httpOptions = exporterOptions[otlpmetrichttp.Option]{
	endpoint:      otlpmetrichttp.WithEndpoint,
	endpointURL:   otlpmetrichttp.WithEndpointURL,
	insecure:      otlpmetrichttp.WithInsecure,
	headers:       otlpmetrichttp.WithHeaders,
	timeout:       otlpmetrichttp.WithTimeout,
	temporality:   otlpmetrichttp.WithTemporalitySelector,
	gzip:          func() otlpmetrichttp.Option { return otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression) },
	noCompression: func() otlpmetrichttp.Option { return otlpmetrichttp.WithCompression(otlpmetrichttp.NoCompression) },
}

// newOTLPExporter builds the exporter of c's protocol.
func newOTLPExporter(ctx context.Context, c otlpConfig) (sdkmetric.Exporter, error) {
	if c.protocol == ProtocolGRPC {
		return otlpmetricgrpc.New(ctx, grpcOptions.options(c)...)
	}
	return otlpmetrichttp.New(ctx, httpOptions.options(c)...)
}

// NewOTLP creates a periodic reader that pushes metrics to an OpenTelemetry
// collector over OTLP, with protobuf over HTTP (the default) or gRPC (see
// WithProtocol and OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL). The exporter
// reads the standard OTEL_EXPORTER_OTLP_[METRICS_]* variables itself
// (endpoint, default https://localhost:4318 for HTTP and
// https://localhost:4317 for gRPC; insecure; headers; compression; timeout;
// certificate; temporality preference), and the SDK's reader reads
// OTEL_METRIC_EXPORT_INTERVAL and OTEL_METRIC_EXPORT_TIMEOUT; options
// override the environment. A malformed endpoint URL, in an option or in the
// environment, is an ErrConfig error.
//
// The connection is made lazily: NewOTLP succeeds while the collector is
// down, and failed exports are reported to otel.Handle by the reader (or
// returned by ForceFlush and Shutdown). Shutdown exports what is left.
func NewOTLP(ctx context.Context, opts ...OTLPOption) (sdkmetric.Reader, error) {
	c, err := resolveOTLPConfig(opts)
	if err != nil {
		return nil, err
	}
	exp, err := newOTLPExporter(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("exporters: otlp: %w", err)
	}
	if c.route != nil {
		exp = routedExporter{Exporter: exp, route: c.route}
	}
	var ro []sdkmetric.PeriodicReaderOption
	if c.interval > 0 {
		ro = append(ro, sdkmetric.WithInterval(c.interval))
	}
	if c.timeout > 0 {
		ro = append(ro, sdkmetric.WithTimeout(c.timeout))
	}
	return sdkmetric.NewPeriodicReader(exp, ro...), nil
}
