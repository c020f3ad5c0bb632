package prometheus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/infermetrics/infermetrics/exporters/internal/sdksetup"
	"github.com/infermetrics/infermetrics/views"
)

// providerConfig is what the options of NewProvider only set.
type providerConfig struct {
	viewOptions      []views.Option
	readers          []sdkmetric.Reader
	readerFuncs      []func() ([]sdkmetric.Reader, error)
	cardinalityLimit *int
	exemplars        bool
	noProcessMetrics bool
	goMetrics        bool
	sdkOptions       []sdkmetric.Option
}

// providerOption is an option of NewProvider only, which New refuses.
func providerOption(name string, f func(*providerConfig)) Option {
	return optionFunc(func(c *config) {
		f(&c.provider)
		if !slices.Contains(c.providerOnly, name) {
			c.providerOnly = append(c.providerOnly, name)
		}
	})
}

// WithViewOptions gives the options of views.VLLM (views.WithVersion,
// views.WithBuckets, views.WithExponential, ...) to NewProvider, which
// builds the provider's views with them. WithProviderViews gives the views
// instead; both is an error.
func WithViewOptions(opts ...views.Option) Option {
	return providerOption("WithViewOptions", func(c *providerConfig) { c.viewOptions = append(c.viewOptions, opts...) })
}

// WithMeterProviderOptions gives NewProvider's MeterProvider these SDK
// options, applied after its own (see exporters.WithMeterProviderOptions).
func WithMeterProviderOptions(opts ...sdkmetric.Option) Option {
	return providerOption("WithMeterProviderOptions", func(c *providerConfig) { c.sdkOptions = append(c.sdkOptions, opts...) })
}

// WithReader adds readers to NewProvider's MeterProvider beside the
// Prometheus reader (exporters.NewStatsLog's, or an OTLP reader, which
// this package does not link).
func WithReader(r ...sdkmetric.Reader) Option {
	return providerOption("WithReader", func(c *providerConfig) { c.readers = append(c.readers, r...) })
}

// WithReaderFunc adds the readers f returns, called when NewProvider builds
// the MeterProvider, after the rest of the set-up: a periodic reader (OTLP)
// starts exporting when it is built, and an export before the provider has
// registered it fails. An error of f fails NewProvider.
func WithReaderFunc(f func() ([]sdkmetric.Reader, error)) Option {
	return providerOption("WithReaderFunc", func(c *providerConfig) { c.readerFuncs = append(c.readerFuncs, f) })
}

// WithCardinalityLimit sets the most series one stream keeps on
// NewProvider's MeterProvider (sdkmetric.WithCardinalityLimit: n - 1
// attribute sets and the overflow series; 0 or less means no limit). The
// default is the SDK's, 2000 (exporters.DefaultCardinalityLimit).
func WithCardinalityLimit(n int) Option {
	return providerOption("WithCardinalityLimit", func(c *providerConfig) { c.cardinalityLimit = &n })
}

// WithExemplars keeps exemplars on NewProvider's MeterProvider (see
// exporters.WithExemplars). Without it, OTEL_METRICS_EXEMPLAR_FILTER or
// WithOpenMetrics the SDK keeps none.
func WithExemplars() Option {
	return providerOption("WithExemplars", func(c *providerConfig) { c.exemplars = true })
}

// WithoutProcessMetrics leaves out the process_* families that NewProvider
// otherwise adds to the registry (see NewProvider).
func WithoutProcessMetrics() Option {
	return providerOption("WithoutProcessMetrics", func(c *providerConfig) { c.noProcessMetrics = true })
}

// WithGoMetrics adds client_golang's Go collector (the go_* families:
// goroutines, threads, heap and GC figures) to the registry, unless the
// registry already serves go_* families (a Go collector of the caller's,
// with whatever options, or of another provider's), which it keeps.
func WithGoMetrics() Option {
	return providerOption("WithGoMetrics", func(c *providerConfig) { c.goMetrics = true })
}

// Provider is a MeterProvider with vLLM's views read by a Prometheus
// reader, built by NewProvider.
type Provider struct {
	exporter *Exporter
	sdk      *sdkmetric.MeterProvider
	mp       metric.MeterProvider
	res      *resource.Resource

	shutdownOnce sync.Once
}

// NewProvider builds, in one call, what a program that serves a scrape and
// pushes nothing needs: an OpenTelemetry MeterProvider with the views of
// views.VLLM (with WithViewOptions; or those of WithProviderViews), read by
// the Prometheus reader of New (the opts of New apply to it), its handler
// told the views (so that each engine's histogram families, those of the
// older vLLM version of views.WithVersion included, are at zero from
// start-up), and wrapped by Exporter.Wrap (duplicate series are refused at
// NewRecorder). It links no OTLP exporter and no gRPC.
//
// The resource is WithResource's, else built as exporters.Setup builds it:
// the SDK defaults, OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, and a
// generated service.instance.id. The registry also serves client_golang's
// process collector (the process_* families of vLLM's scrape) unless
// WithoutProcessMetrics is given or it already serves process_* families,
// and the Go collector with WithGoMetrics. Exemplars are off unless
// WithExemplars, WithOpenMetrics or OTEL_METRICS_EXEMPLAR_FILTER turns them
// on (exporters.Setup says what they cost).
func NewProvider(ctx context.Context, opts ...Option) (*Provider, error) {
	c := newConfig(opts)
	pc := c.provider
	if !c.viewsSet {
		vs, err := views.VLLM(pc.viewOptions...)
		if err != nil {
			return nil, err
		}
		c.views = vs
	} else if len(pc.viewOptions) > 0 {
		return nil, fmt.Errorf("%w: prometheus.NewProvider: WithViewOptions and WithProviderViews: "+
			"give the options to views.VLLM for the views, or give the options alone", ErrConfig)
	}
	if c.resource == nil {
		res, err := sdksetup.NewResource(ctx, sdksetup.Resource{}, c.handle)
		if err != nil {
			return nil, err
		}
		c.resource = res
	}
	// Read before the reader joins the registry: its first collection
	// would come before the provider's.
	serves := servedPrefixes(c.registry, "process_", "go_")
	exp, err := newExporter(&c)
	if err != nil {
		return nil, err
	}
	if !pc.noProcessMetrics && !serves["process_"] {
		err = registerOnce(c.registry, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), "process metrics")
	}
	if err == nil && pc.goMetrics && !serves["go_"] {
		err = registerOnce(c.registry, collectors.NewGoCollector(), "Go metrics")
	}
	readers := append([]sdkmetric.Reader{exp.Reader}, pc.readers...)
	for _, f := range pc.readerFuncs {
		if err != nil {
			break
		}
		var rs []sdkmetric.Reader
		rs, err = f()
		readers = append(readers, rs...)
	}
	if err != nil {
		for _, r := range readers {
			_ = r.Shutdown(ctx)
		}
		return nil, err
	}
	sdk := sdksetup.NewMeterProvider(sdksetup.Provider{Resource: c.resource, Views: c.views,
		Readers: readers, CardinalityLimit: pc.cardinalityLimit,
		Exemplars: pc.exemplars || exp.openMetrics, Options: pc.sdkOptions})
	return &Provider{exporter: exp, sdk: sdk, mp: exp.Wrap(sdk), res: c.resource}, nil
}

// servedPrefixes returns which of prefixes begin the name of a family reg
// serves now.
func servedPrefixes(reg *prometheus.Registry, prefixes ...string) map[string]bool {
	mfs, _ := reg.Gather() // a failing collector: the families gathered still count
	out := map[string]bool{}
	for _, mf := range mfs {
		for _, p := range prefixes {
			if strings.HasPrefix(mf.GetName(), p) {
				out[p] = true
			}
		}
	}
	return out
}

// registerOnce registers c, one of client_golang's collectors (the process
// or Go collector), on reg. A registry that already has it (another
// provider's) keeps it; what names it in an error.
func registerOnce(reg *prometheus.Registry, c prometheus.Collector, what string) error {
	err := reg.Register(c)
	if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("exporters: %s: %w", what, err)
	}
	return nil
}

// MeterProvider returns the provider to record on (pass it to
// instrument.WithMeterProvider): the SDK provider wrapped by Exporter.Wrap.
func (p *Provider) MeterProvider() metric.MeterProvider { return p.mp }

// Handler returns the /metrics handler (Exporter.Handler).
func (p *Provider) Handler() http.Handler { return p.exporter.Handler }

// Registry returns the registry the handler serves, on which other
// collectors may be registered.
func (p *Provider) Registry() *prometheus.Registry { return p.exporter.Registry }

// Resource returns the provider's resource.
func (p *Provider) Resource() *resource.Resource { return p.res }

// ForceFlush makes the readers of WithReader export now and returns their
// errors.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.sdk.ForceFlush(ctx) }

// Shutdown stops the readers, within ctx's deadline; later calls do nothing
// and return nil. Recording after Shutdown is allowed and ignored.
func (p *Provider) Shutdown(ctx context.Context) error {
	var err error
	p.shutdownOnce.Do(func() { err = p.sdk.Shutdown(ctx) })
	return err
}
