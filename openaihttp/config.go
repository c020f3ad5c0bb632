package openaihttp

import (
	"go.opentelemetry.io/otel"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// DefaultMaxRequestBody is how many bytes of a request body are read to
// learn its model, stream, n and max_tokens (see WithMaxRequestBody).
const DefaultMaxRequestBody = 64 << 10

type config struct {
	engine         func(model string) *instrument.Engine
	includeUsage   bool
	maxRequestBody int
	backend        Backend
	onError        func(error)
	routes         []Route
	http           *httpMetrics // WithHTTPMetrics; the handler only

	// WithAttribution and WithPrices; the handler only.
	attribution    []AttributionSource
	attributionErr error
	prices         Pricer
	// observed, when set (by tests), gets each request the handler is
	// about to record.
	observed func(*stats.ObservedRequest)
}

func newConfig(opts []Option) config {
	c := config{maxRequestBody: DefaultMaxRequestBody, onError: otel.Handle}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.maxRequestBody < 0 {
		c.maxRequestBody = 0
	}
	return c
}

// engineFor returns the Engine to record a model's request on; nil records
// nothing.
func (c *config) engineFor(model string) *instrument.Engine {
	if c.engine == nil {
		return nil
	}
	return c.engine(model)
}

// Option configures a handler or a transport.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithEngine records every request on one Engine (of a Recorder built
// with the served model's name). Without WithEngine or WithEngineFor
// nothing is recorded.
func WithEngine(e *instrument.Engine) Option {
	return optionFunc(func(c *config) { c.engine = func(string) *instrument.Engine { return e } })
}

// WithEngineFor records each request on the Engine f returns for the
// request's model (the "model" field of its body, escapes decoded, its
// bytes otherwise as sent: not always UTF-8; "" when it has none, it is
// longer than 256 bytes or it lies beyond the bytes read), for a gateway
// serving several models. A nil Engine records nothing for the request,
// which is passed on as it came. f must be safe for concurrent use.
func WithEngineFor(f func(model string) *instrument.Engine) Option {
	return optionFunc(func(c *config) { c.engine = f })
}

// WithIncludeUsage asks for usage in streaming chat and text completion
// requests (/chat/completions, /completions) that did not: it sets
// stream_options.include_usage in the request body before passing it on,
// so that token counts are known. The other APIs report usage in their
// streams unasked and are passed on unchanged, as is a request recorded on
// no Engine (WithEngineFor returned nil). Off by default: the
// response then carries a final usage chunk (with empty choices) that the
// client did not ask for. Only a body within the bytes read
// (WithMaxRequestBody) is rewritten.
func WithIncludeUsage() Option {
	return optionFunc(func(c *config) { c.includeUsage = true })
}

// WithMaxRequestBody sets how many bytes of a request body are read, and
// held, to learn its fields (default DefaultMaxRequestBody); the body is
// passed on whole and unchanged. Fields beyond are not learned.
func WithMaxRequestBody(n int) Option {
	return optionFunc(func(c *config) { c.maxRequestBody = n })
}

// WithRoutes maps the paths of routes to their APIs (see NewRoute), tried
// in order, before the package's own rules (RecordedPaths) and after the
// routes of an earlier WithRoutes: a path an API is served on that ends in
// none of the package's paths, a model named in a path, or a route of API
// none for a path that ends like an API but is none. Each route's pattern
// is the handler label of the requests it matches (WithHTTPMetrics).
func WithRoutes(routes ...Route) Option {
	return optionFunc(func(c *config) {
		for _, r := range routes {
			if r.pattern != "" {
				c.routes = append(c.routes, r)
			}
		}
	})
}

// WithBackend names the backend a transport sends to and its role (for
// example instrument.RolePrefill), the backend and backend.role attributes
// of the client metrics; the default is the request URL's host and no role.
// ContextWithBackend overrides it per request.
func WithBackend(name, role string) Option {
	return optionFunc(func(c *config) { c.backend = Backend{Name: name, Role: role} })
}

// WithErrorHandler sets where the errors of the transport go (a backend
// whose handle Engine.Backend refuses); the default is otel.Handle. Input
// the Recorder refuses goes to its own handler (instrument.WithErrorHandler).
func WithErrorHandler(f func(error)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.onError = f
		}
	})
}
