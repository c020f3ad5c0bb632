package openaihttp

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
)

// NewHandler returns middleware that records the requests next serves on
// /v1/chat/completions and /v1/completions (POST; other requests pass
// through unrecorded) on the Engine of WithEngine or WithEngineFor: the
// request in flight (vllm:num_requests_running), each content chunk as it
// is written (time to first token, inter-chunk latency), the finish reason
// and, when the response reports it, usage (see
// instrument.Engine.RecordRequest). It reads the request body up to
// WithMaxRequestBody bytes and passes it on unchanged; it parses the
// response as next writes it, holding none of it, and writes it on first:
// the client sees each byte when it would without the middleware. The
// ResponseWriter it passes keeps Flush, Hijack and Unwrap (for
// http.ResponseController).
func NewHandler(next http.Handler, opts ...Option) http.Handler {
	return &handler{next: next, cfg: newConfig(opts)}
}

type handler struct {
	next http.Handler
	cfg  config
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, ok := instrumented(r)
	if !ok || h.cfg.engine == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	info, body, length, rewritten := readBody(r, h.cfg.maxRequestBody, h.cfg.includeUsage)
	if info.err != nil { // values dropped (ErrDropped)
		h.cfg.onError(info.err)
	}
	e := h.cfg.engineFor(info.model)
	if e == nil {
		r.Body = body
		h.next.ServeHTTP(w, r)
		return
	}
	ctx, trace := NewTrace(r.Context())
	r = r.WithContext(ctx)
	r.Body = body
	if rewritten != nil {
		setLength(r, length)
	}
	e.RequestStarted()
	rw := &responseWriter{w: w}
	rw.obs.gaps, rw.obs.ctx, rw.obs.onErr = engineGaps{e}, ctx, h.cfg.onError
	rw.obs.init(op, start, false) // the kind of body is known at WriteHeader
	defer func() {
		v := recover()
		h.finish(e, rw, r, trace, info, v != nil)
		if v != nil {
			panic(v)
		}
	}()
	h.next.ServeHTTP(rw, r)
}

// finish records a request as its handler ended.
func (h *handler) finish(e *instrument.Engine, rw *responseWriter, r *http.Request, trace *Trace, info requestInfo, panicked bool) {
	defer e.RequestEnded()
	if rw.hijacked {
		return // the connection left HTTP: nothing more is observable
	}
	status := rw.status
	if status == 0 {
		status = http.StatusOK // net/http sends 200 when nothing was written
	}
	if panicked {
		status = http.StatusInternalServerError
	}
	aborted := r.Context().Err() != nil || rw.writeErr
	o := rw.obs.result(time.Now(), end{status: status, aborted: aborted})
	o.CachedByKVTransfer = trace.KVTransferred()
	o.MaxTokens, o.N = info.maxTokens, info.n
	e.RecordRequest(r.Context(), &o)
	if pd, ok := trace.PD(); ok {
		e.RecordPDLegs(r.Context(), &pd)
	}
}

// responseWriter observes what the handler writes, after writing it.
type responseWriter struct {
	w        http.ResponseWriter
	obs      observer
	status   int
	wrote    int64
	writeErr bool
	hijacked bool
}

func (rw *responseWriter) Header() http.Header { return rw.w.Header() }

func (rw *responseWriter) WriteHeader(code int) {
	if rw.status == 0 && code >= 200 {
		rw.status = code
		rw.obs.streaming = strings.HasPrefix(rw.w.Header().Get("Content-Type"), "text/event-stream")
	}
	rw.w.WriteHeader(code)
}

func (rw *responseWriter) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	n, err := rw.w.Write(p)
	rw.wrote += int64(n)
	if err != nil {
		rw.writeErr = true
	}
	if rw.status < 400 {
		rw.obs.write(p[:n])
	}
	return n, err
}

// Flush sends what was written to the client (http.Flusher).
func (rw *responseWriter) Flush() {
	_ = http.NewResponseController(rw.w).Flush()
}

// Hijack takes over the connection (http.Hijacker), when the underlying
// ResponseWriter can; the request is then not recorded beyond its end in
// flight.
func (rw *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, b, err := http.NewResponseController(rw.w).Hijack()
	if err == nil {
		rw.hijacked = true
	}
	return c, b, err
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.w }
