package openaihttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/felixge/httpsnoop"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// NewHandler returns middleware that records the requests next serves to
// the APIs of the package doc (POST to a path ending in /chat/completions,
// /completions, /responses, /v1/messages, /embeddings, vLLM's pooling
// endpoints, Ollama's /api/chat and /api/generate, under any base path, or
// to a route of WithRoutes; other requests pass through unrecorded) on the
// Engine of WithEngine or WithEngineFor:
// the request in flight (vllm:num_requests_running), each content chunk as
// it is written (time to first token, inter-chunk latency), the finish
// reason and, when the response reports it, usage (see
// instrument.Engine.RecordRequest). A client that leaves before the
// response's status is written is an abort, whatever status is written
// then to no one (httputil.ReverseProxy's default error handler writes
// 502). With WithHTTPMetrics it also records every request, on any path,
// in the HTTP families. It reads the request body up to
// WithMaxRequestBody bytes and passes it on unchanged; it parses the
// response as next writes it, holding none of it, and writes it on first:
// the client sees each byte when it would without the middleware. The
// ResponseWriter it passes keeps exactly the optional interfaces of the one
// it gets (http.Flusher, http.Hijacker, http.CloseNotifier, io.ReaderFrom,
// http.Pusher) and Unwrap, for http.ResponseController.
func NewHandler(next http.Handler, opts ...Option) http.Handler {
	h := &handler{next: next, cfg: newConfig(opts)}
	h.cfg.checkAttribution()
	h.user = h.cfg.wantsUser()
	return h
}

type handler struct {
	next http.Handler
	cfg  config
	user bool // a dimension is the body's user (FromUser)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.cfg.http != nil {
		h.serveHTTPMetrics(w, r)
		return
	}
	h.serve(w, r, nil)
}

// serve serves one request, observing it when it is a completions request;
// sw, when not nil, notes its status and the request passed on to next for
// the HTTP families (one wrapper of w does both).
func (h *handler) serve(w http.ResponseWriter, r *http.Request, sw *statusWriter) {
	sw.pass(r)
	rt, ok := instrumented(r, h.cfg.routes)
	if !ok || h.cfg.engine == nil {
		h.next.ServeHTTP(sw.wrap(w), r)
		return
	}
	sw.route(r.URL.Path, rt.pattern)
	start := time.Now()
	info, body, rewritten := readBody(r, rt, h.cfg.maxRequestBody, h.cfg.includeUsage, h.user)
	if info.err != nil { // values dropped (ErrDropped)
		h.cfg.onError(info.err)
	}
	r.Body = body
	e := h.cfg.engineFor(info.model)
	if e == nil { // not recorded: passed on as it came
		h.next.ServeHTTP(sw.wrap(w), r)
		return
	}
	// One allocation for the request's writer, its observer and its Trace.
	rw := &responseWriter{w: w, http: sw, linking: true}
	ctx, trace := traceIn(r.Context(), &rw.traceBuf)
	rw.trace = trace
	trace.takeLegs()
	r = r.WithContext(ctx)
	sw.pass(r)
	if rewritten != nil {
		setBody(r, rewritten)
	}
	rw.attrN = h.cfg.attribute(r, &info, &rw.attr)
	e.RequestStarted()
	rw.obs.gaps, rw.obs.ctx, rw.obs.onErr = engineGaps{e}, ctx, h.cfg.onError
	rw.obs.trace, rw.obs.handler = trace, true
	rw.obs.init(apis[rt.api].ep, start, false) // the kind of body is known at WriteHeader
	defer func() {
		v := recover()
		h.finish(e, rw, r, trace, info, v)
		if v != nil {
			panic(v) // net/http logs it, or (http.ErrAbortHandler) quietly drops the connection
		}
	}()
	h.next.ServeHTTP(rw.wrap(), r)
}

// finish records a request as its handler ended, with the value it
// panicked with, if any: http.ErrAbortHandler (an httputil.ReverseProxy
// whose client went away, or whose upstream failed mid-body) ends the
// response where it stood; any other panic makes it a 500.
func (h *handler) finish(e *instrument.Engine, rw *responseWriter, r *http.Request, trace *Trace, info requestInfo, panicked any) {
	defer e.RequestEnded()
	rw.decodeEnd()
	if rw.hijacked {
		return // the connection left HTTP: nothing more is observable
	}
	status := rw.status
	if status == 0 || rw.unsent {
		// net/http sends 200 when nothing was written; a status sent after
		// the client left never reached it (see unsent).
		status = http.StatusOK
	}
	if panicked != nil && panicked != http.ErrAbortHandler {
		status = http.StatusInternalServerError
	}
	ended := end{status: status, aborted: r.Context().Err() != nil || rw.writeErr, cause: r.Context().Err()}
	o := rw.obs.result(time.Now(), ended)
	rw.body.settle(&o, ended, &rw.obs)
	if o.Reason == stats.FinishError && !rw.obs.errSeen && status != http.StatusTooManyRequests && (status < 400 || status >= 500) {
		// What the handler wrote (a reverse proxy's 502, a body cut) does not
		// say why; the leg it sent does when it got no response, or timed out.
		if t := trace.legFailure(); t != stats.ErrorNone {
			o.ErrorType = t
		}
	}
	if cached, ok := trace.PrefillCached(); ok && o.UsageKnown {
		// A P/D request: the prefill instance's cached tokens, whatever
		// the decode response's cached_tokens holds (see PrefillCached).
		o.CachedPromptTokens, o.CachedByKVTransfer = cached, false
		o.Details.Set(stats.TokenCacheRead, cached)
	} else {
		o.CachedByKVTransfer = trace.KVTransferred()
	}
	o.MaxTokens, o.N = info.maxTokens, info.n
	o = trace.boundedOnce(o, true) // a leg passed on may have counted its drop
	reason, refused := admissionRejection(rw.status, rw.refused)
	if refused {
		o.ErrorType = stats.ErrorAdmissionRejected // in no vLLM request family, as vLLM counts it
	}
	o.Attribution = rw.attr[:rw.attrN]
	h.cfg.price(&o, info.model)
	if h.cfg.observed != nil {
		h.cfg.observed(&o)
	}
	e.RecordRequest(r.Context(), &o)
	if refused {
		e.RecordAdmissionRejection(r.Context(), reason)
	}
	if pd, ok := trace.PD(); ok {
		e.RecordPDLegs(r.Context(), &pd)
	}
	if n := trace.Attempts(); n > 0 {
		e.RecordAttempts(r.Context(), n)
	}
}

// responseWriter observes what the handler writes, after writing it. The
// handler gets it wrapped (wrap: h1Writer or httpsnoop's), keeping exactly
// the optional interfaces of the underlying ResponseWriter (http.Flusher,
// http.Hijacker, http.CloseNotifier, io.ReaderFrom, http.Pusher, ...) and
// Unwrap, for http.ResponseController.
type responseWriter struct {
	w        http.ResponseWriter
	http     *statusWriter // the HTTP families' (WithHTTPMetrics), or nil
	obs      observer
	body     bodyCoding
	status   int
	unsent   bool // the status came after the client left
	writeErr bool
	hijacked bool
	// refused holds the body of a 503, up to one byte past
	// maxAdmissionBody: an upstream vLLM's admission refusal passed on
	// (see admissionRejection).
	refused []byte

	attr  [instrument.MaxDimensions]string // the request's attribution values (WithAttribution)
	attrN int

	// The leg whose reads the handler takes (see share.go): linking until
	// the first write, then leg when it is one a leg read.
	trace    *Trace
	traceBuf Trace // trace's, unless the request came with one
	linking  bool
	leg      *legBody

	h1 h1Writer // what wrap returns for net/http's HTTP/1 writer
}

// wrap returns the writer the handler is given (an h1Writer is rw's own).
func (rw *responseWriter) wrap() http.ResponseWriter { return snoop(rw.w, tap{rw: rw}, &rw.h1) }

// snoop wraps w for t, keeping exactly its optional interfaces: t learns
// the status the response is sent with, at WriteHeader or at the first
// Write, Flush or ReadFrom (200), the bytes sent and each write's error,
// and a hijacked connection. net/http's HTTP/1 writer gets an h1Writer (h1,
// or a new one when nil), any other httpsnoop's wrapper.
func snoop(w http.ResponseWriter, t tap, h1 *h1Writer) http.ResponseWriter {
	if h1Interfaces(w) {
		if h1 == nil {
			h1 = new(h1Writer)
		}
		*h1 = h1Writer{w: w, t: t}
		return h1
	}
	return httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(code int) {
				t.commit(code)
				next(code)
			}
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(p []byte) (int, error) {
				t.commit(http.StatusOK)
				n, err := next(p)
				t.wrote(p[:n], err)
				return n, err
			}
		},
		Flush: func(next httpsnoop.FlushFunc) httpsnoop.FlushFunc {
			return func() {
				t.commit(http.StatusOK) // a Flush before any Write sends the header
				next()
			}
		},
		// What http.ResponseController (and so httputil.ReverseProxy, once
		// per chunk) calls on net/http's writer; without its own hook
		// httpsnoop routes it through Flush's, building closures each call.
		FlushError: func(next httpsnoop.FlushErrorFunc) httpsnoop.FlushErrorFunc {
			return func() error {
				t.commit(http.StatusOK)
				return next()
			}
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(src io.Reader) (int64, error) {
				t.commit(http.StatusOK)
				if t.rw != nil {
					src = &observedReader{r: src, rw: t.rw}
				}
				return next(src)
			}
		},
		Hijack: func(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
			return func() (net.Conn, *bufio.ReadWriter, error) {
				c, b, err := next()
				if err == nil {
					t.hijacked()
				}
				return c, b, err
			}
		},
	})
}

// tap is who snoop tells: the responseWriter of a recorded request, else
// the statusWriter of the HTTP families.
type tap struct {
	rw *responseWriter
	sw *statusWriter
}

func (t tap) commit(code int) {
	if t.rw != nil {
		t.rw.commit(code)
		return
	}
	t.sw.commit(code)
}

func (t tap) wrote(p []byte, err error) {
	if t.rw != nil {
		t.rw.wrote(p, err)
	}
}

func (t tap) hijacked() {
	if t.rw != nil {
		t.rw.hijacked = true
	}
}

// commit notes the status the response is sent with, the first time one
// is (1xx informational headers are not): what the body is (SSE or not) and
// how it is encoded are known then.
func (rw *responseWriter) commit(code int) {
	if rw.status != 0 || code < 200 { // the HTTP families' too: they take the same one
		return
	}
	rw.http.commit(code)
	rw.status, rw.unsent = code, unsent(rw.obs.ctx)
	h := rw.w.Header()
	rw.obs.kind(headerValue(h, "Content-Type"))
	rw.obs.failed(code, h)
	rw.body.start(headerValue(h, "Content-Encoding"), &rw.obs)
}

// wrote observes bytes the client was sent.
func (rw *responseWriter) wrote(p []byte, err error) {
	if err != nil {
		rw.writeErr = true
	}
	if rw.status >= 400 {
		rw.keepRefusal(p)
	}
	if len(p) == 0 || (rw.leg != nil || rw.linking) && rw.take(p) {
		return
	}
	if rw.body.identity() {
		rw.obs.write(p)
		return
	}
	rw.body.write(p)
}

// keepRefusal keeps the bytes of a 503 body sent unencoded, up to one past
// maxAdmissionBody, for admissionRejection.
func (rw *responseWriter) keepRefusal(p []byte) {
	if rw.status != http.StatusServiceUnavailable || !rw.body.identity() || len(rw.refused) > maxAdmissionBody {
		return
	}
	if rw.refused == nil {
		rw.refused = make([]byte, 0, maxAdmissionBody+1)
	}
	rw.refused = append(rw.refused, p[:min(len(p), maxAdmissionBody+1-len(rw.refused))]...)
}

// take takes what a leg read when p is what it read, passed on unchanged
// (see share.go); it reports whether it did, else p is to be read.
func (rw *responseWriter) take(p []byte) bool {
	switch {
	case rw.leg != nil:
		if rw.leg.next(p, &rw.obs) {
			return true
		}
		rw.leg = nil // read on from where the leg stood
	case rw.linking:
		rw.linking = false
		o := &rw.obs
		if !rw.body.identity() || rw.status >= 400 { // an error body: read here (no leg publishes one)
			o = nil
		}
		rw.leg = rw.trace.passedOn(p, o)
		return rw.leg != nil
	}
	return false
}

// decodeEnd waits for a decoded body's last bytes to be observed.
func (rw *responseWriter) decodeEnd() { rw.body.close() }

// observedReader observes what io.ReaderFrom (io.Copy to the
// ResponseWriter) reads to send.
type observedReader struct {
	r  io.Reader
	rw *responseWriter
}

func (o *observedReader) Read(p []byte) (int, error) {
	n, err := o.r.Read(p)
	o.rw.wrote(p[:n], nil)
	return n, err
}
