package openaihttp

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
)

// httpMetrics is the configuration of WithHTTPMetrics.
type httpMetrics struct {
	engine *instrument.Engine
	route  func(*http.Request) string
}

// WithHTTPMetrics records every request the handler serves, on every path
// and method (not only the completions endpoints), in the HTTP families of
// vLLM's API server (prometheus-fastapi-instrumentator's, which vLLM's
// overview dashboard reads; see instrument.RecordHTTPRequest and
// views.HTTPFamilies): http_requests_total{handler,method,status},
// http_request_duration_seconds{handler,method} and
// http_request_duration_highr_seconds, from the request's arrival to the
// end of its handler, streamed bodies included. They carry no model_name
// or engine; e is the Engine (of any Recorder) they are recorded on. route
// returns a request's handler label, its route template, after the wrapped
// handler ran; nil takes the path of the http.ServeMux pattern that served
// it (Request.Pattern, "/v1/chat/completions"), else the pattern of the
// route its path matches (WithRoutes, then the package's own:
// "/openai/deployments/{deployment}/chat/completions", see NewRoute), any
// method, else "none": no part of a path a client chose (an ID, a key)
// becomes a label. Handler values are bounded
// (see instrument.HTTPHandlerNone), so a client cannot grow the series. A
// request whose client left before its status was written counts as 200,
// as vLLM's API server counts a client that disconnected first (its route
// returns None, which FastAPI sends as 200), whatever status was written
// then to no one. A nil e records none of them.
func WithHTTPMetrics(e *instrument.Engine, route func(*http.Request) string) Option {
	return optionFunc(func(c *config) {
		if e == nil {
			c.http = nil
			return
		}
		c.http = &httpMetrics{engine: e, route: route}
	})
}

// handlerLabel returns the handler label of a request served: the route
// function's, else the ServeMux pattern's path or the matched route's
// pattern ("" for none).
func (c *config) handlerLabel(sw *statusWriter) string {
	r := sw.passed
	if c.http.route != nil {
		return c.http.route(r)
	}
	if p := patternPath(r); p != "" {
		return p
	}
	if r.URL == nil {
		return ""
	}
	if sw.routePattern != "" && r.URL.Path == sw.routePath {
		return sw.routePattern // serve's: the path is unchanged
	}
	rt, _ := routeOf(r.URL.Path, c.routes)
	return rt.pattern
}

// patternPath returns the path of the ServeMux pattern that served r:
// "POST /v1/chat/completions" and "host/v1/x" give their path; "" when no
// pattern matched.
func patternPath(r *http.Request) string {
	p := r.Pattern
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[i:]
	}
	return ""
}

// serveHTTPMetrics serves r through serve, recording it in the HTTP
// families.
func (h *handler) serveHTTPMetrics(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ctx: r.Context(), passed: r}
	defer func() {
		v := recover()
		status := sw.status
		switch {
		case v != nil && v != http.ErrAbortHandler:
			status = http.StatusInternalServerError
		case status == 0:
			status = http.StatusOK
		}
		h.cfg.http.engine.RecordHTTPRequest(r.Context(), h.cfg.handlerLabel(sw), r.Method, status, time.Since(start).Seconds())
		if v != nil {
			panic(v)
		}
	}()
	h.serve(w, r, sw)
}

// statusWriter notes the status a response is sent with (200 for one sent
// after the client left, see unsent), and the request passed on, whose
// Pattern a ServeMux set. Its methods do nothing on nil.
type statusWriter struct {
	ctx    context.Context
	status int
	passed *http.Request
	// The route serve found for a path (routeOf's pattern, never empty),
	// not looked up again for the label.
	routePath, routePattern string
}

// route notes the route pattern of a path.
func (s *statusWriter) route(path, pattern string) {
	if s != nil {
		s.routePath, s.routePattern = path, pattern
	}
}

func (s *statusWriter) commit(code int) {
	if s != nil && s.status == 0 && code >= 200 {
		s.status = code
		if unsent(s.ctx) {
			s.status = http.StatusOK
		}
	}
}

// pass notes the request passed on.
func (s *statusWriter) pass(r *http.Request) {
	if s != nil {
		s.passed = r
	}
}

// unsent reports a status committed when the request's context is done:
// the client left (or the server closed its connection) before it, so it
// reached no one. Such a request is the client's abort, not the 502 that
// httputil.ReverseProxy's default error handler writes then, and it counts
// as 200 in the HTTP families, as vLLM's API server counts a client that
// disconnected before its response: with_cancellation
// (vllm/frontend/entrypoints/serve/utils/api_utils.py @ 055e47c2) makes
// the route return None, which FastAPI answers with its default
// JSONResponse, status 200 (fastapi/routing.py @ c3f316b7), and
// prometheus-fastapi-instrumentator counts the status the response starts
// with (src/prometheus_fastapi_instrumentator/middleware.py @ c1c1fb64).
func unsent(ctx context.Context) bool { return ctx.Err() != nil }

// wrap returns w wrapped to note its status; w itself for nil.
func (s *statusWriter) wrap(w http.ResponseWriter) http.ResponseWriter {
	if s == nil {
		return w
	}
	return snoop(w, tap{sw: s}, nil)
}
