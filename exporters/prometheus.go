package exporters

import (
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
)

// Prometheus is a pull reader whose scrape is what vLLM serves on /metrics.
// Register Reader on a MeterProvider and serve Handler.
type Prometheus struct {
	// Reader is the OpenTelemetry reader to register with
	// sdkmetric.WithReader. It is always cumulative.
	Reader sdkmetric.Reader
	// Handler serves the scrape of Registry in the Prometheus text format
	// (and OpenMetrics when WithOpenMetrics was given).
	Handler http.Handler
	// Registry holds the reader's collector; register other collectors on
	// it to serve them from the same Handler.
	Registry *prometheus.Registry

	series *instrument.SeriesSet // shared by every Prometheus of Registry
}

// Wrap returns mp (the MeterProvider that Reader is registered on) as an
// instrument.SeriesSetProvider whose set is shared by every provider read
// into the same registry. A Recorder built on it fails at construction with
// instrument.ErrDuplicateSeries when a live Recorder on another provider of
// the registry already exports the same series, instead of every scrape
// failing with HTTP 500. Setup wraps its provider this way. Call Wrap once
// per provider and record on what it returns.
func (p *Prometheus) Wrap(mp metric.MeterProvider) metric.MeterProvider {
	return &registryProvider{MeterProvider: mp, series: p.series}
}

// registryProvider is a MeterProvider read into a Prometheus registry, with
// the registry's series set.
type registryProvider struct {
	metric.MeterProvider
	series *instrument.SeriesSet
}

func (r *registryProvider) SeriesSet() *instrument.SeriesSet { return r.series }
func (r *registryProvider) Unwrap() metric.MeterProvider     { return r.MeterProvider }

// registrySeries maps each registry to the series set of its providers. It
// holds registries weakly and forgets them when they are collected.
var registrySeries = struct {
	sync.Mutex
	m map[weak.Pointer[prometheus.Registry]]*instrument.SeriesSet
}{m: map[weak.Pointer[prometheus.Registry]]*instrument.SeriesSet{}}

func seriesSetOf(reg *prometheus.Registry) *instrument.SeriesSet {
	wp := weak.Make(reg)
	registrySeries.Lock()
	defer registrySeries.Unlock()
	if s, ok := registrySeries.m[wp]; ok {
		return s
	}
	s := instrument.NewSeriesSet()
	registrySeries.m[wp] = s
	runtime.AddCleanup(reg, func(wp weak.Pointer[prometheus.Registry]) {
		registrySeries.Lock()
		defer registrySeries.Unlock()
		delete(registrySeries.m, wp)
	}, wp)
	return s
}

type promConfig struct {
	registry      *prometheus.Registry
	scopeInfo     bool
	targetInfo    bool
	resourceAttrs attribute.Filter
	openMetrics   bool
}

// PrometheusOption configures NewPrometheus.
type PrometheusOption interface{ applyPrometheus(*promConfig) }

type promOptionFunc func(*promConfig)

func (f promOptionFunc) applyPrometheus(c *promConfig) { f(c) }

// WithRegistry sets the registry the reader registers on and the handler
// serves; the default is a new, empty registry (no Go or process collectors).
func WithRegistry(reg *prometheus.Registry) PrometheusOption {
	return promOptionFunc(func(c *promConfig) { c.registry = reg })
}

// WithScopeInfo adds the otel_scope_name, otel_scope_version and
// otel_scope_schema_url labels to every series. Off by default: vLLM's
// series carry none, and the labels make a scrape about twice as slow.
func WithScopeInfo() PrometheusOption {
	return promOptionFunc(func(c *promConfig) { c.scopeInfo = true })
}

// WithTargetInfo adds the target_info family that carries the resource
// attributes. Off by default: vLLM exposes no target_info.
func WithTargetInfo() PrometheusOption {
	return promOptionFunc(func(c *promConfig) { c.targetInfo = true })
}

// WithResourceAsLabels copies the resource attributes that filter keeps onto
// every series as constant labels (for example service.name as service_name).
func WithResourceAsLabels(filter attribute.Filter) PrometheusOption {
	return promOptionFunc(func(c *promConfig) { c.resourceAttrs = filter })
}

// WithOpenMetrics lets the handler negotiate the OpenMetrics format with
// scrapers that ask for it; exemplars are only visible in that format. The
// default serves the Prometheus text format only, as vLLM does.
func WithOpenMetrics() PrometheusOption {
	return promOptionFunc(func(c *promConfig) { c.openMetrics = true })
}

// NewPrometheus creates a Prometheus reader and its handler. By default the
// scrape is vLLM-identical: no otel_scope_* labels and no target_info.
// Scrape errors (for example two streams with one name) make the handler
// answer HTTP 500 and are reported to otel.Handle.
func NewPrometheus(opts ...PrometheusOption) (*Prometheus, error) {
	var c promConfig
	for _, o := range opts {
		o.applyPrometheus(&c)
	}
	if c.registry == nil {
		c.registry = prometheus.NewRegistry()
	}
	popts := []otelprom.Option{otelprom.WithRegisterer(c.registry)}
	if !c.scopeInfo {
		popts = append(popts, otelprom.WithoutScopeInfo())
	}
	if !c.targetInfo {
		popts = append(popts, otelprom.WithoutTargetInfo())
	}
	if c.resourceAttrs != nil {
		popts = append(popts, otelprom.WithResourceAsConstantLabels(c.resourceAttrs))
	}
	exp, err := otelprom.New(popts...)
	if err != nil {
		return nil, fmt.Errorf("exporters: prometheus: %w", err)
	}
	h := promhttp.HandlerFor(c.registry, promhttp.HandlerOpts{
		ErrorLog:          errorLog{},
		ErrorHandling:     promhttp.HTTPErrorOnError,
		EnableOpenMetrics: c.openMetrics,
	})
	return &Prometheus{Reader: exp, Handler: h, Registry: c.registry, series: seriesSetOf(c.registry)}, nil
}

// errorLog passes the handler's gathering errors to otel.Handle.
type errorLog struct{}

func (errorLog) Println(v ...any) {
	otel.Handle(fmt.Errorf("exporters: prometheus scrape: %s", fmt.Sprint(v...)))
}
