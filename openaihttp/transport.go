package openaihttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
)

// NewTransport returns a RoundTripper that records the requests it sends to
// the endpoints of the package doc (POST, as NewHandler observes them;
// others pass through) as legs to a backend (WithBackend, ContextWithBackend, or the URL's host:port):
// the GenAI client metrics gen_ai.client.operation.duration,
// gen_ai.client.operation.time_to_first_chunk,
// gen_ai.client.operation.time_per_output_chunk and
// gen_ai.client.token.usage, with the backend and backend.role attributes,
// on the Engine of WithEngine or WithEngineFor (see instrument.Backend).
// The response body is observed as the caller reads it; the leg ends at
// EOF, at a read error, or at Close (a Close before the response completed
// is an abort). A leg sent with a context carrying a Trace (NewHandler's
// request context, or NewTrace) is added to it. base nil means
// http.DefaultTransport.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, cfg: newConfig(opts)}
}

type transport struct {
	base http.RoundTripper
	cfg  config
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt, ok := instrumented(req, t.cfg.routes)
	if !ok || t.cfg.engine == nil {
		return t.base.RoundTrip(req)
	}
	op := apis[rt.api].ep
	info, body, rewritten := readBody(req, rt, t.cfg.maxRequestBody, t.cfg.includeUsage, false)
	if info.err != nil { // values dropped (ErrDropped)
		t.cfg.onError(info.err)
	}
	// A RoundTripper must not change the request: one sent with another
	// body is a shallow copy (its header map shared, unchanged).
	out := req
	if body != req.Body {
		out = req.WithContext(req.Context())
		out.Body = body
	}
	e := t.cfg.engineFor(info.model)
	if e == nil { // not recorded: sent as it came
		return t.base.RoundTrip(out)
	}
	b := t.backendOf(out)
	backend, err := e.Backend(b.Name, b.Role)
	if err != nil {
		t.cfg.onError(err)
		return t.base.RoundTrip(out)
	}
	if rewritten != nil {
		if out == req {
			out = req.WithContext(req.Context())
		}
		out.Header = out.Header.Clone() // setBody sets its Content-Length
		setBody(out, rewritten)
	}
	ctx := out.Context()
	start := time.Now()
	trace := TraceFrom(ctx)
	// One allocation for the leg: its body, observer, scanner, Leg and feed.
	lb := &legBody{backend: backend, trace: trace, ctx: ctx}
	lb.leg = trace.start(&lb.legv, b, start)
	lb.obs.init(op, start, false)
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		lb.end(time.Now(), end{aborted: ctx.Err() != nil, cause: cause(ctx, err)})
		return nil, err
	}
	lb.ReadCloser, lb.status = resp.Body, resp.StatusCode
	lb.obs.kind(headerValue(resp.Header, "Content-Type"))
	lb.obs.gaps, lb.obs.ctx, lb.obs.onErr, lb.obs.trace = backend, ctx, t.cfg.onError, trace
	lb.obs.sc = &lb.sc
	lb.sc.reset(op)
	lb.obs.failed(resp.StatusCode, resp.Header)
	if !resp.Uncompressed { // else the base transport decoded it and removed Content-Encoding
		lb.body.start(headerValue(resp.Header, "Content-Encoding"), &lb.obs)
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		lb.end(time.Now(), end{status: resp.StatusCode})
		return resp, nil
	}
	if lb.status < 400 && lb.body.identity() {
		// The handler of the client request may pass this body on (see
		// share.go).
		lb.feedv = newFeed(&lb.obs)
		if trace.addFeed(lb) {
			lb.feed = &lb.feedv
		}
	}
	resp.Body = lb
	return resp, nil
}

func (t *transport) backendOf(r *http.Request) Backend {
	if b, ok := r.Context().Value(backendKey{}).(Backend); ok && b.Name != "" {
		return b
	}
	b := t.cfg.backend
	if b.Name == "" {
		b.Name = hostPort(r.URL)
	}
	return b
}

// hostPort is u's host:port, the port its scheme implies when it names
// none (443 for https, 80 for http): the default backend, whose host and
// port are the client metrics' server.address and server.port.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	switch u.Scheme {
	case "https":
		return net.JoinHostPort(u.Hostname(), "443")
	case "http":
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return u.Host
}

// legBody observes a response body as the caller reads it.
type legBody struct {
	io.ReadCloser
	obs     observer
	sc      scanner // obs's
	feed    *feed   // what it read, for the handler; nil when none takes it
	feedv   feed    // feed's
	body    bodyCoding
	backend *instrument.Backend
	trace   *Trace
	leg     *Leg // legv, or nil past MaxLegs
	legv    Leg
	ctx     context.Context
	status  int

	mu    sync.Mutex
	ended bool
}

func (b *legBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return n, err
	}
	switch {
	case b.feed != nil && n > 0: // an identity body: observed here, not by a decoder
		b.feed.publish(p[:n], &b.obs)
		b.obs.write(p[:n])
		b.obs.pub = nil
	case b.body.identity():
		b.obs.write(p[:n])
	default: // encoded: its decoder's goroutine observes it (an opaque body, nothing)
		b.body.write(p[:n])
	}
	switch {
	case err == io.EOF:
		b.endLocked(time.Now(), end{status: b.status})
	case err != nil:
		canceled := errors.Is(err, context.Canceled) || b.ctx.Err() != nil
		b.endLocked(time.Now(), end{status: b.status, aborted: canceled, cause: cause(b.ctx, err)})
	}
	return n, err
}

// cause is the error that ended a leg: its context's when that ended
// (the client went away, or its deadline passed), else err.
func cause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func (b *legBody) Close() error {
	err := b.ReadCloser.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ended {
		// Closed before EOF: complete if the response said all it had to
		// (a caller decoding JSON stops at its end), else an abort. An
		// opaque body cannot tell: it is taken as complete.
		b.body.close()
		b.endLocked(time.Now(), end{status: b.status, aborted: !b.obs.complete() && !b.body.opaque})
	}
	return err
}

func (b *legBody) end(at time.Time, e end) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endLocked(at, e)
}

func (b *legBody) endLocked(at time.Time, e end) {
	b.ended = true
	b.body.close()
	o := b.obs.result(at, e)
	b.body.settle(&o, e, &b.obs)
	recorded := b.trace.boundedOnce(o, false) // the handler passing it on may have counted its drop
	b.backend.RecordRequest(b.ctx, &recorded)
	cached, known := b.obs.prefillCached()
	b.trace.finish(b.leg, e.status, &o, cached, known)
}
