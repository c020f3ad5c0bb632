package exporters

import (
	"context"
	"errors"
	"log"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// errorRoute takes the errors of one Setup (its OTLP reader's exports, its
// environment's bad values) to that Setup's WithErrorHandler function, and
// to no other Setup's.
type errorRoute struct {
	handle func(error) // nil without WithErrorHandler
	live   atomic.Bool // handle is called only while the Setup is live
}

// routedError is an error of one route's Setup. It reads as the error it
// carries; the global router (see routerHandler) delivers it to its route.
type routedError struct {
	err   error
	route *errorRoute
}

func (e *routedError) Error() string { return e.err.Error() }
func (e *routedError) Unwrap() error { return e.err }

// unrouted returns the error a routedError carries, or err itself.
func unrouted(err error) error {
	if re, ok := err.(*routedError); ok {
		return re.err
	}
	return err
}

// newErrorRoute returns the route of a Setup; with a handler it installs
// the global router while the route is live.
func newErrorRoute(handle func(error)) *errorRoute {
	r := &errorRoute{handle: handle}
	if handle != nil {
		routing.attach(r)
	}
	return r
}

// mark tags err as an error of r's Setup (nil stays nil).
func (r *errorRoute) mark(err error) error {
	if err == nil || r == nil {
		return err
	}
	return &routedError{err: err, route: r}
}

// report passes an error of r's Setup to its handler while it is live, and
// to otel.Handle otherwise (tagged, so that no other Setup's handler gets it).
func (r *errorRoute) report(err error) {
	if r != nil && r.handle != nil && r.live.Load() {
		r.handle(err)
		return
	}
	otel.Handle(r.mark(err))
}

// detach stops calling the handler; the last live route gives the global
// error handler back to the one installed before the router, unless someone
// installed another since.
func (r *errorRoute) detach() {
	if r == nil || r.handle == nil || !r.live.Swap(false) {
		return
	}
	routing.detach(r)
}

// routing is the state of the global router: the live routes with a
// handler and the global handler the router replaced.
var routing = &router{}

type router struct {
	mu   sync.Mutex
	live []*errorRoute
	prev otel.ErrorHandler
}

func (g *router) attach(r *errorRoute) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.live) == 0 {
		if cur := otel.GetErrorHandler(); cur != otel.ErrorHandler(g) {
			g.prev = cur
			otel.SetErrorHandler(g)
		}
	}
	g.live = append(g.live, r)
	r.live.Store(true)
}

func (g *router) detach(r *errorRoute) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live = slices.DeleteFunc(g.live, func(x *errorRoute) bool { return x == r })
	if len(g.live) == 0 && otel.GetErrorHandler() == otel.ErrorHandler(g) {
		otel.SetErrorHandler(g.prev)
	}
}

// forwarded is an error the router passed on to the handler it replaced. It
// is recognised when it comes back: OpenTelemetry's default handler
// delegates to the first handler ever installed, possibly the router.
type forwarded struct {
	err     error
	handled bool // a live route's handler got it
}

func (f *forwarded) Error() string { return f.err.Error() }
func (f *forwarded) Unwrap() error { return f.err }

// Handle implements otel.ErrorHandler. An error tagged with a live route
// goes to that route's handler only; any other error (OpenTelemetry's own,
// another library's, a Setup's without a handler or after its Shutdown)
// goes to every live route's handler, then on to the handler the router
// replaced, which logs it when it is OpenTelemetry's default and no route
// took it.
func (g *router) Handle(err error) {
	if f, ok := err.(*forwarded); ok { // came back from the default handler
		if !f.handled {
			log.Print(f.err)
		}
		return
	}
	var re *routedError
	if errors.As(err, &re) {
		err = unrouted(err)
		if re.route.handle != nil && re.route.live.Load() {
			re.route.handle(err)
			return
		}
		g.forward(err, false)
		return
	}
	g.mu.Lock()
	live := slices.Clone(g.live)
	g.mu.Unlock()
	for _, r := range live {
		r.handle(err)
	}
	g.forward(err, len(live) > 0)
}

func (g *router) forward(err error, handled bool) {
	g.mu.Lock()
	prev := g.prev
	g.mu.Unlock()
	if prev == nil {
		log.Print(err)
		return
	}
	prev.Handle(&forwarded{err: err, handled: handled})
}

// routedExporter tags the errors of an exporter with its Setup's route: a
// periodic reader passes the errors of its own exports to otel.Handle, and
// the router delivers them to that Setup's handler only. Errors returned by
// ForceFlush and Shutdown read as before.
type routedExporter struct {
	sdkmetric.Exporter
	route *errorRoute
}

func (e routedExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	return e.route.mark(e.Exporter.Export(ctx, rm))
}

func (e routedExporter) ForceFlush(ctx context.Context) error {
	return e.route.mark(e.Exporter.ForceFlush(ctx))
}

func (e routedExporter) Shutdown(ctx context.Context) error {
	return e.route.mark(e.Exporter.Shutdown(ctx))
}
