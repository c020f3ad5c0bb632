package exporters

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/infermetrics/infermetrics/exporters/internal/sdksetup"
	"github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/views"
)

// Exporter names of OTEL_METRICS_EXPORTER.
const (
	ExporterPrometheus = "prometheus"
	ExporterOTLP       = "otlp"
	ExporterNone       = "none"
)

type setupConfig struct {
	serviceName       string
	serviceInstanceID string
	attributes        []attribute.KeyValue
	views             []sdkmetric.View
	viewsSet          bool
	prometheus        []PrometheusOption
	otlp              []OTLPOption
	otlpSet           bool
	statsLogs         []statsLogSpec
	errorHandler      func(error)
	cardinalityLimit  *int
	noProcessMetrics  bool
	goMetrics         bool
	exemplars         bool
	sdkOptions        []sdkmetric.Option
}

type statsLogSpec struct {
	logger *slog.Logger
	opts   []StatsLogOption
}

// Option configures Setup.
type Option interface{ applySetup(*setupConfig) }

type setupOptionFunc func(*setupConfig)

func (f setupOptionFunc) applySetup(c *setupConfig) { f(c) }

// WithServiceName sets the service.name resource attribute. It wins over
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; without any of them the
// SDK's default, "unknown_service:" and the executable's name, is used.
func WithServiceName(name string) Option {
	return setupOptionFunc(func(c *setupConfig) { c.serviceName = name })
}

// WithServiceInstanceID sets the service.instance.id resource attribute. It
// wins over OTEL_RESOURCE_ATTRIBUTES and WithResourceAttributes; without any
// of them a random UUID (version 4) is generated.
func WithServiceInstanceID(id string) Option {
	return setupOptionFunc(func(c *setupConfig) { c.serviceInstanceID = id })
}

// WithResourceAttributes adds resource attributes. They win over
// OTEL_RESOURCE_ATTRIBUTES; WithServiceName and WithServiceInstanceID win
// over them.
func WithResourceAttributes(kv ...attribute.KeyValue) Option {
	return setupOptionFunc(func(c *setupConfig) { c.attributes = append(c.attributes, kv...) })
}

// WithViews sets the MeterProvider's views, replacing the default
// views.VLLM(). Given with no view, the streams keep their instrument names
// (vllm.generation_tokens, ...). Add views.Semconv() views here, and build the
// Recorder with instrument.WithGenAISemconv(), to export the OpenTelemetry
// GenAI server histograms too.
func WithViews(v ...sdkmetric.View) Option {
	return setupOptionFunc(func(c *setupConfig) {
		c.views = append(c.views, v...)
		c.viewsSet = true
	})
}

// WithPrometheus configures the Prometheus reader (when it is enabled: see
// Setup).
func WithPrometheus(opts ...PrometheusOption) Option {
	return setupOptionFunc(func(c *setupConfig) { c.prometheus = append(c.prometheus, opts...) })
}

// WithOTLP configures the OTLP reader and turns it on when
// OTEL_METRICS_EXPORTER is not set, even without an endpoint in the
// environment (the exporter's default is then https://localhost:4318, or
// https://localhost:4317 with gRPC).
func WithOTLP(opts ...OTLPOption) Option {
	return setupOptionFunc(func(c *setupConfig) {
		c.otlp = append(c.otlp, opts...)
		c.otlpSet = true
	})
}

// WithStatsLog adds a reader that logs vLLM's periodic stats line through
// logger (see NewStatsLog). It is not an exporter: OTEL_METRICS_EXPORTER does
// not turn it off. It may be given more than once.
func WithStatsLog(logger *slog.Logger, opts ...StatsLogOption) Option {
	return setupOptionFunc(func(c *setupConfig) {
		c.statsLogs = append(c.statsLogs, statsLogSpec{logger: logger, opts: opts})
	})
}

// DefaultCardinalityLimit is the most series one stream (one family, for
// each reader) keeps when WithCardinalityLimit is not given: the
// OpenTelemetry Go SDK's default, which its OTEL_GO_X_CARDINALITY_LIMIT
// variable replaces. Measurements of further attribute sets go to one
// overflow series carrying only otel.metric.overflow="true" (in a
// Prometheus scrape, otel_metric_overflow="true"), so totals over a family
// stay exact while memory stays bounded.
const DefaultCardinalityLimit = 2000

// WithCardinalityLimit sets the most series one stream keeps (see
// DefaultCardinalityLimit); n - 1 attribute sets get their own series and the
// others share the overflow series. Each model name with its engines and
// constant attributes, and each LoRA adapter state, adds series: a gateway
// recording many models on one provider, or an engine cycling through many
// adapters, is bounded by this limit. 0 or less means no limit.
func WithCardinalityLimit(n int) Option {
	return setupOptionFunc(func(c *setupConfig) { c.cardinalityLimit = &n })
}

// WithErrorHandler makes this Setup's errors reach f: failed periodic
// exports of its OTLP reader and warnings about its environment (an
// unsupported exporter or protocol name), each once and to this Setup's f
// only, so that two Setups with two handlers do not see each other's
// errors. Errors OpenTelemetry reports without saying where they come from
// (otel.Handle calls of other components) reach f too, as they reach every
// live Setup's handler. Errors returned by ForceFlush and Shutdown are
// returned, not passed to f.
//
// While a Setup with a handler is live, Setup's router is the global
// handler (otel.SetErrorHandler); errors it does not deliver to a Setup go
// on to the handler installed before it, except OpenTelemetry's default
// one, which only logs with the standard log package and which the handlers
// replace. After the last such Setup's Shutdown, the handler installed
// before is restored. A handler installed with otel.SetErrorHandler after
// Setup takes every error over. Without this option this Setup's errors go
// to otel.Handle.
func WithErrorHandler(f func(error)) Option {
	return setupOptionFunc(func(c *setupConfig) { c.errorHandler = f })
}

// WithoutProcessMetrics leaves out the process_* families (CPU seconds,
// resident and virtual memory, start time, open and maximum file
// descriptors) that Setup otherwise registers on the Prometheus registry,
// as vLLM's Python client serves them.
func WithoutProcessMetrics() Option {
	return setupOptionFunc(func(c *setupConfig) { c.noProcessMetrics = true })
}

// WithGoMetrics adds the go_* families of the Go runtime (go_goroutines,
// go_threads, go_memstats_* heap and GC figures, go_gc_duration_seconds,
// ...: client_golang's Go collector) to the Prometheus registry, as
// prometheus_client adds Python's python_gc_* to vLLM's scrape: for a
// program whose only /metrics is Setup's (cmd/infermetrics-proxy). A
// registry that already serves go_* families (its own Go collector, with
// whatever options, or another Setup's) keeps its collector. They are not
// sent over OTLP.
func WithGoMetrics() Option {
	return setupOptionFunc(func(c *setupConfig) { c.goMetrics = true })
}

// WithExemplars turns exemplars on: latency measurements made in a context
// with a sampled span (an engine passes each request's, see
// stats.Request.Context) keep an exemplar naming its trace and span, which
// OTLP carries and an OpenMetrics scrape (WithOpenMetrics) shows.
// OTEL_METRICS_EXEMPLAR_FILTER (trace_based, always_on, always_off) still
// chooses the filter. Without this option, the environment variable or
// WithOpenMetrics, exemplars are off: see Setup for what they cost.
func WithExemplars() Option {
	return setupOptionFunc(func(c *setupConfig) { c.exemplars = true })
}

// WithMeterProviderOptions gives the SDK MeterProvider Setup builds these
// options of go.opentelemetry.io/otel/sdk/metric, applied after Setup's own
// (where both set one thing, these win). It is there for the SDK's opt-out
// of its per-measurement de-duplication of map attribute values, once a
// release has it (WithAllowKeyDuplication: opentelemetry-go issue #8479,
// pull request #8709; none up to 1.47.0): from sdk/metric 1.45.0 that work
// is most of a decode step's cost, and every attribute the library records
// is a string, which the opt-out leaves as it is (docs/benchmarks.md, "The
// SDK's per-measurement cost").
func WithMeterProviderOptions(opts ...sdkmetric.Option) Option {
	return setupOptionFunc(func(c *setupConfig) { c.sdkOptions = append(c.sdkOptions, opts...) })
}

// Provider is a MeterProvider with its resource, views and readers, built by
// Setup.
type Provider struct {
	mp  metric.MeterProvider
	sdk interface { // nil when the SDK is disabled
		ForceFlush(context.Context) error
		Shutdown(context.Context) error
	}
	res       *resource.Resource
	handler   http.Handler
	exporters []string
	route     *errorRoute
	otlp      interface{ ForceFlush(context.Context) error } // the OTLP reader, flushed before Shutdown

	shutdownOnce sync.Once
}

// Setup builds one MeterProvider with a resource, views and readers (with
// the Prometheus exporter, on prometheus.NewProvider, which a program that
// pushes nothing calls instead):
//
//   - Resource: the SDK defaults and OTEL_RESOURCE_ATTRIBUTES and
//     OTEL_SERVICE_NAME, then WithResourceAttributes, WithServiceName and
//     WithServiceInstanceID (later wins); service.instance.id is generated
//     when nothing sets it.
//   - Views: views.VLLM() unless WithViews is given.
//   - Exporters: OTEL_METRICS_EXPORTER, a comma-separated list of
//     "prometheus", "otlp" or "none", decides which exporters run; options
//     only configure them. Unset or empty, Prometheus runs, and OTLP too when
//     OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is
//     set or WithOTLP is given. An unsupported name ("console", say) is
//     reported as a warning (to WithErrorHandler's function or otel.Handle)
//     and ignored, as the specification asks; "none" with another name is an
//     error.
//   - Process metrics: the Prometheus registry also serves client_golang's
//     process collector (process_cpu_seconds_total,
//     process_resident_memory_bytes, process_start_time_seconds,
//     process_open_fds, ...), as vLLM's scrape does, unless
//     WithoutProcessMetrics is given or the registry (WithRegistry) already
//     serves process_* families. They are not sent over OTLP.
//   - Go metrics: the go_* families of the Go runtime on the same registry,
//     with WithGoMetrics only.
//   - Stats log readers of WithStatsLog, whatever the exporters.
//   - Cardinality: WithCardinalityLimit, by default DefaultCardinalityLimit
//     series per stream.
//   - Exemplars: off unless WithExemplars is given, OTEL_METRICS_EXEMPLAR_FILTER
//     is set or the Prometheus handler serves OpenMetrics (WithOpenMetrics),
//     the one Prometheus format that shows them; on, the SDK's trace-based
//     filter keeps them for measurements made within a sampled span. Off, the
//     SDK keeps no exemplar reservoirs: an engine takes a quarter of the
//     memory, and recording a step less time (docs/benchmarks.md).
//
// With OTEL_SDK_DISABLED=true Setup builds nothing: MeterProvider returns a
// no-op provider, Handler answers 404 and Shutdown does nothing.
//
// Setup does not connect to the collector (the OTLP exporter connects
// lazily) and does not install the provider globally: pass MeterProvider()
// to instrument.WithMeterProvider, or to otel.SetMeterProvider.
func Setup(ctx context.Context, opts ...Option) (*Provider, error) {
	var c setupConfig
	for _, o := range opts {
		o.applySetup(&c)
	}
	if disabled, _ := strconv.ParseBool(strings.TrimSpace(os.Getenv(EnvSDKDisabled))); disabled {
		return &Provider{mp: noop.NewMeterProvider(), handler: http.NotFoundHandler()}, nil
	}
	// Attached first, so that errors of the set-up itself reach the handler.
	p := &Provider{handler: http.NotFoundHandler(), route: newErrorRoute(c.errorHandler)}
	fail := func(err error, readers []sdkmetric.Reader) (*Provider, error) {
		for _, r := range readers {
			_ = r.Shutdown(ctx)
		}
		p.route.detach()
		return nil, err
	}
	names, err := selectExporters(c.otlpSet, p.route)
	if err != nil {
		return fail(err, nil)
	}
	p.exporters = names
	vs := c.views
	if !c.viewsSet {
		if vs, err = views.VLLM(); err != nil {
			return fail(err, nil)
		}
	}
	if p.res, err = sdksetup.NewResource(ctx, sdksetup.Resource{ServiceName: c.serviceName,
		ServiceInstanceID: c.serviceInstanceID, Attributes: c.attributes}, p.route.report); err != nil {
		return fail(err, nil)
	}
	// The readers beside Prometheus's, built last (prometheus.NewProvider
	// calls this just before it builds the provider): a periodic reader
	// exports from the start, and fails until the provider registers it.
	withProm := slices.Contains(names, ExporterPrometheus)
	var readers []sdkmetric.Reader
	others := func() ([]sdkmetric.Reader, error) {
		if slices.Contains(names, ExporterOTLP) {
			r, err := NewOTLP(ctx, append(slices.Clip(c.otlp), withRoute(p.route))...)
			if err != nil {
				return readers, err
			}
			readers = append(readers, r)
			p.otlp, _ = r.(interface{ ForceFlush(context.Context) error })
		}
		for _, s := range c.statsLogs {
			readers = append(readers, NewStatsLog(s.logger, s.opts...))
		}
		return readers, nil
	}
	if !withProm {
		if _, err := others(); err != nil {
			return fail(err, readers)
		}
		sdk := sdksetup.NewMeterProvider(sdksetup.Provider{Resource: p.res, Views: vs, Readers: readers,
			CardinalityLimit: c.cardinalityLimit, Exemplars: c.exemplars, Options: c.sdkOptions})
		p.sdk, p.mp = sdk, sdk
		return p, nil
	}
	// The reader learns the resource (for ReservedLabels) and the views (for
	// the zero series of native and legacy histograms), and sends scrape
	// errors to this Setup's handler.
	promOpts := append(slices.Clip(c.prometheus), prometheus.WithResource(p.res),
		prometheus.WithErrorHandler(p.route.report), prometheus.WithProviderViews(vs...), prometheus.WithReaderFunc(others))
	if c.cardinalityLimit != nil {
		promOpts = append(promOpts, prometheus.WithCardinalityLimit(*c.cardinalityLimit))
	}
	if c.exemplars {
		promOpts = append(promOpts, prometheus.WithExemplars())
	}
	if c.noProcessMetrics {
		promOpts = append(promOpts, prometheus.WithoutProcessMetrics())
	}
	if c.goMetrics {
		promOpts = append(promOpts, prometheus.WithGoMetrics())
	}
	if len(c.sdkOptions) > 0 {
		promOpts = append(promOpts, prometheus.WithMeterProviderOptions(c.sdkOptions...))
	}
	prom, err := prometheus.NewProvider(ctx, promOpts...)
	if err != nil {
		return fail(err, nil) // NewProvider shut down the readers
	}
	p.sdk, p.mp, p.handler = prom, prom.MeterProvider(), prom.Handler()
	return p, nil
}

// selectExporters reads OTEL_METRICS_EXPORTER. An unsupported name
// (console, say) is reported to route as a warning and ignored, as the
// specification asks; a value with no supported name counts as unset.
func selectExporters(withOTLP bool, route *errorRoute) ([]string, error) {
	v := strings.TrimSpace(os.Getenv(EnvMetricsExporter))
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		switch n {
		case "":
		case ExporterPrometheus, ExporterOTLP, ExporterNone:
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		default:
			route.report(fmt.Errorf("%w: %s=%q: unsupported exporter %q ignored (want %s, %s or %s)",
				ErrConfig, EnvMetricsExporter, v, n, ExporterPrometheus, ExporterOTLP, ExporterNone))
		}
	}
	if len(names) == 0 {
		names = []string{ExporterPrometheus}
		if withOTLP || os.Getenv(EnvOTLPEndpoint) != "" || os.Getenv(EnvOTLPMetricsEndpoint) != "" {
			names = append(names, ExporterOTLP)
		}
		return names, nil
	}
	if slices.Contains(names, ExporterNone) {
		if len(names) > 1 {
			return nil, fmt.Errorf("%w: %s=%q: %q excludes the others", ErrConfig, EnvMetricsExporter, v, ExporterNone)
		}
		return []string{}, nil
	}
	return names, nil
}

// MeterProvider returns the provider to record on (for example with
// instrument.WithMeterProvider); a no-op provider when OTEL_SDK_DISABLED=true.
// With the Prometheus exporter it is the SDK provider wrapped by
// Prometheus.Wrap, so that Recorders on providers sharing one registry
// (WithPrometheus(WithRegistry(reg))) that would export the same series fail
// at construction with instrument.ErrDuplicateSeries.
func (p *Provider) MeterProvider() metric.MeterProvider { return p.mp }

// Handler returns the Prometheus /metrics handler, or a handler that answers
// 404 when Prometheus is not among the exporters.
func (p *Provider) Handler() http.Handler { return p.handler }

// Resource returns the provider's resource; nil when the SDK is disabled.
func (p *Provider) Resource() *resource.Resource { return p.res }

// Exporters returns the exporters that run: "prometheus", "otlp", both or
// none, in the order of OTEL_METRICS_EXPORTER.
func (p *Provider) Exporters() []string { return slices.Clone(p.exporters) }

// ForceFlush makes every periodic reader (OTLP, stats log) export now and
// returns their errors.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	return p.sdk.ForceFlush(ctx)
}

// Shutdown flushes every reader (the OTLP reader exports what is left) and
// stops them, within ctx's deadline: an unreachable collector makes it return
// an error, not hang. Later calls do nothing and return nil. Recording after
// Shutdown is allowed and ignored.
//
// The OTLP reader is flushed first, on its own: the SDK's shutdown cancels a
// periodic export in flight, whose data points (with delta temporality, the
// changes since the export before) would then be lost; the flush waits for
// it instead. A failed flush is reported to the WithErrorHandler function
// (or otel.Handle).
func (p *Provider) Shutdown(ctx context.Context) error {
	var err error
	p.shutdownOnce.Do(func() {
		if p.otlp != nil {
			if ferr := p.otlp.ForceFlush(ctx); ferr != nil {
				p.route.report(fmt.Errorf("exporters: flush before shutdown: %w", unrouted(ferr)))
			}
		}
		if p.sdk != nil {
			err = p.sdk.Shutdown(ctx)
		}
		p.route.detach()
	})
	return err
}
