package exporters

import (
	"log"
	"sync/atomic"

	"go.opentelemetry.io/otel"
)

// chainHandler is the global error handler WithErrorHandler installs: it
// calls the user's function, then the handler installed before it.
type chainHandler struct {
	user     func(error)
	next     otel.ErrorHandler
	detached atomic.Bool
}

// forwarded marks an error passed on by a chainHandler, so that one that
// comes back to it (OpenTelemetry's default handler delegates to the first
// handler ever installed) is recognised and not handled twice.
type forwarded struct {
	err  error
	from *chainHandler
}

func (f *forwarded) Error() string { return f.err.Error() }
func (f *forwarded) Unwrap() error { return f.err }

func installErrorHandler(f func(error)) *chainHandler {
	h := &chainHandler{user: f, next: otel.GetErrorHandler()}
	otel.SetErrorHandler(h)
	return h
}

// Handle implements otel.ErrorHandler.
func (h *chainHandler) Handle(err error) {
	if h.cameBack(err) {
		// The handler before h was OpenTelemetry's default, which now
		// delegates to h: do what the default did, unless f took over.
		if h.detached.Load() {
			log.Print(original(err))
		}
		return
	}
	if !h.detached.Load() {
		h.user(err)
	}
	h.next.Handle(&forwarded{err: err, from: h})
}

func (h *chainHandler) cameBack(err error) bool {
	for f, ok := err.(*forwarded); ok; f, ok = f.err.(*forwarded) {
		if f.from == h {
			return true
		}
	}
	return false
}

// original strips the forwarded wrappers.
func original(err error) error {
	for f, ok := err.(*forwarded); ok; f, ok = err.(*forwarded) {
		err = f.err
	}
	return err
}

// detach stops calling the user's function and gives the global handler
// back to the previous one, unless someone installed another since.
func (h *chainHandler) detach() {
	if h == nil || h.detached.Swap(true) {
		return
	}
	if otel.GetErrorHandler() == otel.ErrorHandler(h) {
		otel.SetErrorHandler(h.next)
	}
}
