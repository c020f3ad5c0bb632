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
	if f, ok := err.(*forwarded); ok && f.from.next != otel.ErrorHandler(h) {
		// Not passed on by the handler installed just before h: the chain
		// reached OpenTelemetry's default handler, which delegates to the
		// first handler ever installed, h. Do what the default did (log),
		// unless a live handler of the chain took over.
		if !anyLive(err) {
			log.Print(original(err))
		}
		return
	}
	if !h.detached.Load() {
		h.user(err)
	}
	h.next.Handle(&forwarded{err: err, from: h})
}

// anyLive reports whether a handler that passed err on is not detached.
func anyLive(err error) bool {
	for f, ok := err.(*forwarded); ok; f, ok = f.err.(*forwarded) {
		if !f.from.detached.Load() {
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
