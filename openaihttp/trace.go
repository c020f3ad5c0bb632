package openaihttp

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// Backend names a backend a request leg goes to: a name or host:port, and a
// role (instrument.RolePrefill, instrument.RoleDecode, or any other; "" for
// none).
type Backend struct {
	Name string
	Role string
}

type backendKey struct{}

// ContextWithBackend returns a context whose requests a transport records
// as sent to b, over WithBackend and the URL's host: a router picking an
// instance per request says which one and in what role.
func ContextWithBackend(ctx context.Context, b Backend) context.Context {
	return context.WithValue(ctx, backendKey{}, b)
}

// Leg is one request a transport sent on behalf of a client request.
type Leg struct {
	Backend Backend
	Start   time.Time // when the transport sent the request
	Status  int       // the HTTP status; 0 when no response came
	// Done is set when the leg ended; Observed is then what the transport
	// recorded for it, times from Start.
	Done     bool
	Observed stats.ObservedRequest
	// PrefillCached is the prompt tokens the backend reported it found
	// cached, as a vLLM prefill instance reports them for the decode
	// instance: the remote_prefill_cached_tokens of the kv_transfer_params
	// it returned (vLLM since PR #54222), else its usage's
	// prompt_tokens_details.cached_tokens; PrefillCachedKnown says it
	// reported either. Set when Done. See Trace.PrefillCached.
	PrefillCached      int64
	PrefillCachedKnown bool
}

// End returns when the leg ended (Start + E2ELatency); zero until Done.
func (l Leg) End() time.Time {
	if !l.Done {
		return time.Time{}
	}
	return l.Start.Add(time.Duration(l.Observed.E2ELatency * float64(time.Second)))
}

// Trace ties one client request to the legs sent for it: NewHandler puts
// one in each request's context, and a transport called with that context
// (or with one from NewTrace) adds each leg it sends. A P/D router reads
// the prefill and decode legs from it: prefill leg latency, decode time to
// first token, the handoff gap between them. It is safe for concurrent use.
type Trace struct {
	mu      sync.Mutex
	legs    []*Leg
	legsBuf [2]*Leg // legs' first: a P/D request's two legs allocate nothing more
	sent    int64   // legs sent, past MaxLegs too

	// A handler may take what a leg it passes on read (see share.go):
	// until its first write, feeds are the legs that publish their reads.
	handler bool
	wrote   bool
	feeds   []*legBody
	feedBuf [1]*legBody

	// The drops seen once so far (see once).
	drops []drop
}

// A drop is a value a response dropped: values its scanner dropped
// (bits: ErrDropped), or, which the Recorder counts as value_dropped
// (stats.ObservedRequest.Bounded), cached tokens above its prompt (prompt,
// generation, cached: stats.ErrCachedExceedsPrompt) or token details above
// the tokens they are a part of (details, the kinds dropped:
// stats.ErrDetailExceedsTotal), seen by a handler or a leg.
type drop struct {
	handler                    bool
	bits                       uint8
	prompt, generation, cached int64
	details                    uint16
}

type traceKey struct{}

// NewTrace returns a context carrying a new Trace, for a caller without
// NewHandler; a context that carries one already is returned with it.
func NewTrace(ctx context.Context) (context.Context, *Trace) { return traceIn(ctx, nil) }

// traceIn is NewTrace with the new Trace in buf, a Trace not in use that a
// handler allocates with its other per-request state (nil: a Trace of its
// own).
func traceIn(ctx context.Context, buf *Trace) (context.Context, *Trace) {
	if t := TraceFrom(ctx); t != nil {
		return ctx, t
	}
	if buf == nil {
		buf = new(Trace)
	}
	buf.legs, buf.feeds = buf.legsBuf[:0], buf.feedBuf[:0]
	return context.WithValue(ctx, traceKey{}, buf), buf
}

// TraceFrom returns the Trace of a context, or nil.
func TraceFrom(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}

// Legs returns a copy of the legs so far, in the order they were sent.
func (t *Trace) Legs() []Leg {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Leg, len(t.legs))
	for i, l := range t.legs {
		out[i] = *l
	}
	return out
}

// KVTransferred reports a trace with a decode leg (role
// instrument.RoleDecode): NewHandler then records the request's cached
// tokens as external_kv_transfer unless its prefill leg reported its own
// (PrefillCached). Those are the tokens the decode instance did not
// compute, its own prefix-cache hits included: vLLM's decode response
// before PR #54222 reports both in cached_tokens and nothing tells them
// apart.
func (t *Trace) KVTransferred() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.ContainsFunc(t.legs, func(l *Leg) bool { return l.Backend.Role == instrument.RoleDecode })
}

// MaxLegs bounds the legs a Trace keeps: a request whose router retries
// without end keeps its first 64, so its memory stays bounded; legs past
// them are still recorded per backend by the transport, but not kept:
// Legs, PD and KVTransferred read the first 64.
const MaxLegs = 64

// takeLegs says that a handler writes this trace's response, and may take
// what a leg it passes on read instead of reading it again.
func (t *Trace) takeLegs() {
	t.mu.Lock()
	t.handler = true
	t.mu.Unlock()
}

// addFeed adds a leg that publishes its reads, for a handler that has
// written nothing yet; it reports whether it did.
func (t *Trace) addFeed(b *legBody) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.handler || t.wrote || len(t.feeds) >= MaxLegs {
		return false
	}
	t.feeds = append(t.feeds, b)
	return true
}

// passedOn returns the leg whose first read is p, the handler's first
// write, linked to o, the handler's observer (nil when o may not take what
// a leg read: an encoded body); nil when none is. The other legs stop
// publishing.
func (t *Trace) passedOn(p []byte, o *observer) *legBody {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	feeds := t.feeds
	t.feeds, t.wrote = nil, true
	t.mu.Unlock()
	var linked *legBody
	for _, b := range feeds {
		if linked == nil && o != nil && b.link(p, o) {
			linked = b
			continue
		}
		b.stopFeed()
	}
	return linked
}

// once reports whether a drop is seen for the first time: a drop the
// handler sees and one a leg of its trace saw alike is the same response's,
// written on by the handler (a reverse proxy's, a router's decode leg), and
// is reported and counted once, by whichever side saw it first. Drops of
// the same side are those of different responses (or documents): each is
// reported. Past MaxLegs drops unmatched, each is reported.
func (t *Trace) once(d drop) bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, seen := range t.drops {
		if seen.handler != d.handler && seen.bits == d.bits && seen.prompt == d.prompt &&
			seen.generation == d.generation && seen.cached == d.cached && seen.details == d.details {
			t.drops = slices.Delete(t.drops, i, i+1)
			return false
		}
	}
	if len(t.drops) < MaxLegs {
		t.drops = append(t.drops, d)
	}
	return true
}

// boundedOnce returns r as it is recorded when the values
// stats.ObservedRequest.Bounded drops of it (cached tokens above its
// prompt, token details above their whole) were seen already by the other
// side of its trace (see once): without them, which the Recorder then does
// not count again. Any other r is returned unchanged.
func (t *Trace) boundedOnce(r stats.ObservedRequest, handler bool) stats.ObservedRequest {
	b, err := r.Bounded()
	cached := errors.Is(err, stats.ErrCachedExceedsPrompt)
	details := r.Details.Known &^ b.Details.Known
	if (cached || details != 0) &&
		!t.once(drop{handler: handler, prompt: r.PromptTokens, generation: r.GenerationTokens, cached: r.CachedPromptTokens, details: details}) {
		r.CachedPromptTokens, r.Details = b.CachedPromptTokens, b.Details
	}
	return r
}

// Attempts returns how many legs a transport sent for the trace's request,
// those past MaxLegs included: 1, or more after retries and fallbacks to
// another backend. NewHandler records it at the request's end
// (instrument.Engine.RecordAttempts) when it is not 0.
func (t *Trace) Attempts() int64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent
}

// legFailure is why the last leg that ended failed, when the response it
// got, if any, cannot say it: no response came (upstream_unreachable,
// timeout, client_canceled) or it timed out; ErrorNone for any other end.
func (t *Trace) legFailure() stats.ErrorType {
	if t == nil {
		return stats.ErrorNone
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.legs) - 1; i >= 0; i-- {
		if l := t.legs[i]; l.Done {
			if e := l.Observed.ErrorType; l.Status == 0 || e == stats.ErrorTimeout {
				return e
			}
			return stats.ErrorNone
		}
	}
	return stats.ErrorNone
}

// start adds l, a leg to b sent at, and returns it; nil past MaxLegs.
func (t *Trace) start(l *Leg, b Backend, at time.Time) *Leg {
	if t == nil {
		return nil
	}
	*l = Leg{Backend: b, Start: at}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	if len(t.legs) >= MaxLegs {
		return nil
	}
	t.legs = append(t.legs, l)
	return l
}

// finish ends a leg, with the cached prompt tokens it reported for a
// decode instance, if known.
func (t *Trace) finish(l *Leg, status int, r *stats.ObservedRequest, cached int64, cachedKnown bool) {
	if t == nil || l == nil {
		return
	}
	t.mu.Lock()
	l.Status, l.Done, l.Observed = status, true, *r
	l.PrefillCached, l.PrefillCachedKnown = cached, cachedKnown
	t.mu.Unlock()
}

// pdLegs returns the first decode leg (role instrument.RoleDecode) and the
// last prefill leg (role instrument.RolePrefill) that ended, sent before
// it; nil when there is none (p nil too without a decode leg). t.mu is
// held.
func (t *Trace) pdLegs() (p, d *Leg) {
	for _, l := range t.legs {
		if l.Backend.Role == instrument.RoleDecode {
			d = l
			break
		}
	}
	if d == nil {
		return nil, nil
	}
	for _, l := range t.legs {
		if l.Backend.Role == instrument.RolePrefill && l.Done && !l.Start.After(d.Start) {
			p = l
		}
	}
	return p, d
}

// PrefillCached returns the prompt tokens the prefill instance found
// cached for a routed request (Leg.PrefillCached of the prefill leg PD
// pairs with the first decode leg), and whether it reported them. vLLM's
// decode response reports, as cached_tokens, either what the decode
// instance did not compute (its own prefix-cache hits and the KV it
// received together) or, since PR #54222 and when the router passed the
// prefill leg's kv_transfer_params on, the prefill instance's own count:
// the prefill leg tells the same whichever the decode instance does.
// NewHandler records the client request's cached tokens from it
// (local_cache_hit; the rest of the prompt local_compute).
func (t *Trace) PrefillCached() (int64, bool) {
	if t == nil {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, _ := t.pdLegs(); p != nil && p.PrefillCachedKnown {
		return p.PrefillCached, true
	}
	return 0, false
}

// PD returns the P/D figures of a trace that has a decode leg (role
// instrument.RoleDecode) and, sent before it, a prefill leg (role
// instrument.RolePrefill) that ended: the prefill leg's latency, the
// handoff gap from its end to the decode leg's start (none when the decode
// leg started first, as with a router that sends both at once) and the
// decode leg's time to first chunk (when it ended, streamed). With several,
// the first decode leg and the last prefill leg before it count (a retried
// prefill). NewHandler records them once per client request, at its end
// (instrument.Engine.RecordPDLegs). It allocates nothing.
func (t *Trace) PD() (stats.PDLegs, bool) {
	if t == nil {
		return stats.PDLegs{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p, d := t.pdLegs()
	if p == nil {
		return stats.PDLegs{}, false
	}
	pd := stats.PDLegs{PrefillLatency: p.Observed.E2ELatency}
	if gap := d.Start.Sub(p.End()); gap >= 0 {
		pd.Handoff, pd.HandoffGap = true, gap.Seconds()
	}
	if d.Done && d.Observed.FirstToken {
		pd.DecodeFirstToken, pd.DecodeTimeToFirstToken = true, d.Observed.TimeToFirstToken
	}
	return pd, true
}
