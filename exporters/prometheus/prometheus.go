package prometheus

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/infermetrics/infermetrics/instrument"
)

// ErrConfig reports an invalid configuration: here a second reader of one
// registry with target_info. Package exporters reports its own with the same
// value, so errors.Is matches either package's errors against either name.
var ErrConfig = errors.New("exporters: invalid configuration")

// Exporter is a pull reader whose scrape is what vLLM serves on /metrics.
// Register Reader on a MeterProvider and serve Handler.
type Exporter struct {
	// Reader is the OpenTelemetry reader to register with
	// sdkmetric.WithReader. It is always cumulative.
	Reader sdkmetric.Reader
	// Handler serves the scrape of Registry in the Prometheus text format,
	// in the protobuf format to scrapers that ask for it (the only one that
	// shows native histograms), and in OpenMetrics when WithOpenMetrics was
	// given, to GET and HEAD requests, gzipped when the scraper accepts gzip. Histogram families of
	// live engines recorded on a provider wrapped by Wrap are present at zero
	// before their first observation, and bucket bounds are written as vLLM
	// writes them (le="1.0"; see WithGoBucketText).
	Handler http.Handler
	// Registry holds the reader's collector; register other collectors on
	// it to serve them from the same Handler, which serves them as
	// client_golang writes them: only the families of views.Families get
	// vLLM's bucket text and the protobuf exemplar split.
	Registry *prometheus.Registry

	series      *instrument.SeriesSet // shared by every Exporter of Registry
	reserved    []string              // label names the reader adds to every series
	openMetrics bool
}

// Wrap returns mp (the MeterProvider that Reader is registered on) as an
// instrument.SeriesSetProvider whose set is shared by every provider read
// into the same registry. A Recorder built on it fails at construction with
// instrument.ErrDuplicateSeries when a live Recorder on another provider of
// the registry already exports the same series, instead of every scrape
// failing with HTTP 500. Setup wraps its provider this way. Call Wrap once
// per provider and record on what it returns.
//
// The provider it returns also has a method ReservedLabels() []string, the
// label names this reader adds to every series (see WithScopeInfo and
// WithResourceAsLabels), which a Recorder's attributes must not take.
// Recording on it also lets Handler show each engine's histogram families at
// zero from start-up, as vLLM does (its vllm/v1/metrics/loggers.py creates
// every per-engine child at start-up); Handler reports, once per engine, a
// Recorder it serves that records on the unwrapped provider.
func (p *Exporter) Wrap(mp metric.MeterProvider) metric.MeterProvider {
	return &registryProvider{MeterProvider: mp, series: p.series, reserved: p.reserved}
}

// registryProvider is a MeterProvider read into a Prometheus registry, with
// the registry's series set and the labels its reader adds.
type registryProvider struct {
	metric.MeterProvider
	series   *instrument.SeriesSet
	reserved []string
}

func (r *registryProvider) SeriesSet() *instrument.SeriesSet { return r.series }
func (r *registryProvider) Unwrap() metric.MeterProvider     { return r.MeterProvider }

// ReservedLabels returns the Prometheus label names the reader adds to every
// series: otel_scope_name, otel_scope_version and otel_scope_schema_url with
// WithScopeInfo (the Recorder's meter has no scope attributes, which would
// add otel_scope_<key>), and the translated names of the resource attributes
// that WithResourceAsLabels copies, when the reader knows the resource (Setup
// tells it). An attribute exported under one of these names would make every
// scrape fail with HTTP 500.
func (r *registryProvider) ReservedLabels() []string { return slices.Clone(r.reserved) }

// registryState is what the readers of one registry share: the series set
// of their providers, and whether one of them serves target_info.
type registryState struct {
	series     *instrument.SeriesSet
	targetInfo bool
}

// registries maps each registry to its state. It holds registries weakly
// and forgets them when they are collected.
var registries = struct {
	sync.Mutex
	m map[weak.Pointer[prometheus.Registry]]*registryState
}{m: map[weak.Pointer[prometheus.Registry]]*registryState{}}

// joinRegistry returns the state of reg for a new reader of it, refusing a
// second reader with target_info (ErrConfig).
func joinRegistry(reg *prometheus.Registry, targetInfo bool) (*registryState, error) {
	wp := weak.Make(reg)
	registries.Lock()
	defer registries.Unlock()
	st, ok := registries.m[wp]
	if !ok {
		st = &registryState{series: instrument.NewSeriesSet()}
		registries.m[wp] = st
		runtime.AddCleanup(reg, func(wp weak.Pointer[prometheus.Registry]) {
			registries.Lock()
			defer registries.Unlock()
			delete(registries.m, wp)
		}, wp)
	}
	if targetInfo && st.targetInfo {
		return nil, fmt.Errorf("%w: prometheus: another reader of this registry already serves target_info: "+
			"with two, every scrape fails with HTTP 500 when their resources are equal, and target_info "+
			"joins match two series when they differ; give WithTargetInfo to one reader of a registry", ErrConfig)
	}
	st.targetInfo = st.targetInfo || targetInfo
	return st, nil
}

type config struct {
	registry      *prometheus.Registry
	scopeInfo     bool
	targetInfo    bool
	resourceAttrs attribute.Filter
	openMetrics   bool
	goBuckets     bool
	resource      *resource.Resource // the provider's, when known: WithResource
	views         []sdkmetric.View   // the provider's, when known: WithProviderViews
	viewsSet      bool               // WithProviderViews was given
	handle        func(error)        // scrape errors; otel.Handle by default

	provider     providerConfig // what only NewProvider reads
	providerOnly []string       // the names of the options of NewProvider only that were given
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithRegistry sets the registry the reader registers on and the handler
// serves; the default is a new, empty registry (no Go or process collectors).
func WithRegistry(reg *prometheus.Registry) Option {
	return optionFunc(func(c *config) { c.registry = reg })
}

// WithScopeInfo adds the otel_scope_name, otel_scope_version and
// otel_scope_schema_url labels to every series. Off by default: vLLM's
// series carry none, and the labels make a scrape about twice as slow.
func WithScopeInfo() Option {
	return optionFunc(func(c *config) { c.scopeInfo = true })
}

// WithTargetInfo adds the target_info family that carries the resource
// attributes. Off by default: vLLM exposes no target_info.
func WithTargetInfo() Option {
	return optionFunc(func(c *config) { c.targetInfo = true })
}

// WithResourceAsLabels copies the resource attributes that filter keeps onto
// every series as constant labels (for example service.name as service_name).
func WithResourceAsLabels(filter attribute.Filter) Option {
	return optionFunc(func(c *config) { c.resourceAttrs = filter })
}

// WithOpenMetrics lets the handler negotiate the OpenMetrics format with
// scrapers that ask for it, which carries the exemplars of classic
// histograms (the Prometheus text format carries none; protobuf, which the
// default serves to scrapers that ask, carries those of classic and native
// histograms). The default serves the Prometheus text format. vLLM's prometheus_client app (vllm/v1/metrics/prometheus.py,
// make_asgi_app) also negotiates OpenMetrics: this option does the same.
func WithOpenMetrics() Option {
	return optionFunc(func(c *config) { c.openMetrics = true })
}

// WithGoBucketText writes bucket bounds in the text format as
// client_golang does (le="1", le="2560") instead of as vLLM does (le="1.0",
// le="2560.0", with Python's prometheus_client). Prometheus 2 stores le as
// written, so queries must use the form the target writes; Prometheus 3
// normalises it at scrape. OpenMetrics (le="1.0" either way) and protobuf
// scrapes are not affected.
func WithGoBucketText() Option {
	return optionFunc(func(c *config) { c.goBuckets = true })
}

// WithProviderViews tells the handler the views of the MeterProvider the
// reader is registered on, so that the zero series it shows before a
// family's first observation (see Handler) have the family's aggregation:
// native histograms for the families the views export with the base-2
// exponential aggregation (views.WithExponential), the views' bucket bounds
// (views.WithBuckets, views.WithCustomHistogramBuckets), and the histogram
// families of an older vLLM version the views export (views.WithVersion)
// at all. Without it such a family shows classic zero series with vLLM's
// bounds until one engine observes it, the views' after, and a legacy
// histogram family none until its first observation. Setup passes its
// views.
//
// Given to NewProvider, they are the provider's views, instead of views.VLLM
// with WithViewOptions. The last one given wins.
func WithProviderViews(v ...sdkmetric.View) Option {
	return optionFunc(func(c *config) { c.views, c.viewsSet = slices.Clone(v), true })
}

// WithResource tells the reader the resource of the provider it is
// registered on, so that ReservedLabels knows the labels of
// WithResourceAsLabels. exporters.Setup passes it. Given to NewProvider, it
// is the provider's resource, instead of the one built from the
// environment.
func WithResource(res *resource.Resource) Option {
	return optionFunc(func(c *config) { c.resource = res })
}

// WithErrorHandler sends the handler's gathering and writing errors to f
// instead of otel.Handle.
func WithErrorHandler(f func(error)) Option {
	return optionFunc(func(c *config) { c.handle = f })
}

// scopeLabels are the labels the OpenTelemetry exporter adds with scope info.
var scopeLabels = []string{"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}

// reservedLabels returns the label names the reader configured by c adds
// to every series.
func (c *config) reservedLabels() []string {
	var out []string
	if c.scopeInfo {
		out = append(out, scopeLabels...)
	}
	if c.resourceAttrs != nil && c.resource != nil {
		var namer otlptranslator.LabelNamer // the exporter's default translation
		for _, kv := range c.resource.Attributes() {
			if !c.resourceAttrs(kv) {
				continue
			}
			if name, err := namer.Build(string(kv.Key)); err == nil && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// New creates a Prometheus reader and its handler. By default the
// scrape is vLLM-identical: no otel_scope_* labels and no target_info.
// Scrape errors (for example two streams with one name) make the handler
// answer HTTP 500 and are reported to otel.Handle.
//
// Several readers may share one registry (WithRegistry), each registered on
// its own MeterProvider; record on each provider through Wrap so that two
// Recorders exporting the same series are refused. At most one of them may
// serve target_info: New returns an error matching ErrConfig for a second
// one.
//
// The options of NewProvider only (WithViewOptions, WithReader, WithReaderFunc,
// WithCardinalityLimit, WithExemplars, WithoutProcessMetrics, WithGoMetrics)
// configure a MeterProvider, which New does not build: New refuses them
// with an error matching ErrConfig.
func New(opts ...Option) (*Exporter, error) {
	c := newConfig(opts)
	if len(c.providerOnly) > 0 {
		return nil, fmt.Errorf("%w: prometheus.New builds a reader, not a MeterProvider: %s configure NewProvider's provider",
			ErrConfig, strings.Join(c.providerOnly, ", "))
	}
	return newExporter(&c)
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	c := config{handle: otel.Handle}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.registry == nil {
		c.registry = prometheus.NewRegistry()
	}
	if c.handle == nil {
		c.handle = otel.Handle
	}
	return c
}

// newExporter builds the reader and handler of c.
func newExporter(c *config) (*Exporter, error) {
	st, err := joinRegistry(c.registry, c.targetInfo)
	if err != nil {
		return nil, err
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
		if c.targetInfo {
			registries.Lock()
			st.targetInfo = false
			registries.Unlock()
		}
		return nil, fmt.Errorf("exporters: prometheus: %w", err)
	}
	h := &scrapeHandler{gatherer: c.registry, series: st.series, openMetrics: c.openMetrics, goBuckets: c.goBuckets,
		views: providerFamilies(c.views), handle: c.handle}
	return &Exporter{Reader: exp, Handler: h, Registry: c.registry, series: st.series, reserved: c.reservedLabels(),
		openMetrics: c.openMetrics}, nil
}

// ServesOpenMetrics reports whether Handler negotiates OpenMetrics
// (WithOpenMetrics), the one text format that shows exemplars.
func (p *Exporter) ServesOpenMetrics() bool { return p.openMetrics }
