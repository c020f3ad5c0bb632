package openaihttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// ErrAttribution reports a WithAttribution or WithPrices that cannot be
// applied as given: a source that does not match the Attribution, a header
// that carries credentials, an API key source without a salt. It goes to
// the error handler (WithErrorHandler) when the handler is built; the
// dimensions it concerns are recorded as instrument.AttributionNone.
var ErrAttribution = errors.New("openaihttp: invalid attribution")

// APIKeyHashLen is the length of an API key's attribution value: the first
// hex digits of HMAC-SHA256(salt, key), 48 bits, enough to tell a
// deployment's keys apart and too few to test guesses of a key against
// without the salt.
const APIKeyHashLen = 12

// AttributionSource says where one attribution dimension takes its value:
// FromHeader, FromUser or FromAPIKey.
type AttributionSource struct {
	kind   sourceKind
	header string  // canonical
	err    error   // why the source gives nothing
	keys   *hasher // FromAPIKey's
}

type sourceKind uint8

const (
	sourceNone sourceKind = iota
	sourceHeader
	sourceUser
	sourceAPIKey
)

// credentialWords are the words of a header name (between its hyphens)
// that make it a header FromHeader refuses: a credential must never become
// a label value (FromAPIKey hashes the API key). They cover Authorization,
// Proxy-Authorization, X-Api-Key, Api-Key, Cookie, Gemini's X-Goog-Api-Key,
// Azure API Management's Ocp-Apim-Subscription-Key and AWS's
// X-Amz-Security-Token.
var credentialWords = []string{"Authorization", "Auth", "Key", "Apikey", "Token", "Secret", "Password", "Cookie",
	"Credential", "Credentials", "Signature"}

// credential reports a header name (canonical) of a credential.
func credential(canonical string) bool {
	for w := range strings.SplitSeq(canonical, "-") {
		if slices.ContainsFunc(credentialWords, func(c string) bool { return strings.EqualFold(w, c) }) {
			return true
		}
	}
	return false
}

// FromHeader takes a dimension's value from a request header (its first
// value), such as X-Tenant or OpenAI-Project. A header of credentials,
// one with a word among Authorization, Auth, Key, Apikey, Token, Secret,
// Password, Cookie, Credential(s) and Signature in its name (Authorization,
// X-Api-Key, X-Goog-Api-Key, Cookie, ...), is refused: use FromAPIKey.
func FromHeader(name string) AttributionSource {
	canonical := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))
	s := AttributionSource{kind: sourceHeader, header: canonical}
	switch {
	case canonical == "" || strings.ContainsAny(canonical, " \t\r\n:"):
		s.err = fmt.Errorf("%w: header %q is not a header name", ErrAttribution, name)
	case credential(canonical):
		s.err = fmt.Errorf("%w: header %s carries credentials, which must never be a label value", ErrAttribution, canonical)
	}
	return s
}

// FromUser takes a dimension's value from the request body's end-user
// identifier: OpenAI's "user" (chat and text completions, the Responses
// API, embeddings) or Anthropic's "metadata.user_id" (Messages), as the
// client sent it, within the bytes read (WithMaxRequestBody).
func FromUser() AttributionSource { return AttributionSource{kind: sourceUser} }

// FromAPIKey takes a dimension's value from the request's API key
// (Authorization: Bearer KEY, else x-api-key, else api-key) as the first
// APIKeyHashLen hex digits of HMAC-SHA256(salt, KEY): the same key gives
// the same value while the salt is kept, and the value cannot be turned
// back into the key. The key itself is never kept, recorded or reported;
// the values of the last 4,096 keys are kept, by a 64-bit hash of the key
// under a random seed, so that a key seen before costs no HMAC. An empty
// salt is refused (ErrAttribution).
func FromAPIKey(salt []byte) AttributionSource {
	s := AttributionSource{kind: sourceAPIKey}
	if len(salt) == 0 {
		s.err = fmt.Errorf("%w: FromAPIKey needs a salt: without one, anyone can test guesses of a key against its value", ErrAttribution)
		return s
	}
	s.keys = newHasher(slices.Clone(salt)) // pool.New keeps it
	return s
}

// Err returns why the source gives no value (ErrAttribution): a header
// that is no header name or carries credentials, an API key without a
// salt; nil for a source that gives one. WithAttribution reports it too,
// when the handler is built; a program may refuse to start instead.
func (s AttributionSource) Err() error { return s.err }

// WithAttribution takes each request's value of each dimension of a from
// its source, in the order of a's dimensions, and records it
// (stats.ObservedRequest.Attribution) on the Engine the request goes to,
// whose Recorder must be built with instrument.WithAttribution(a). The
// handler applies it; a transport ignores it. Sources that do not match
// a's dimensions, or are refused, are reported to the error handler when
// the handler is built (ErrAttribution), and their dimensions recorded as
// instrument.AttributionNone.
func WithAttribution(a *instrument.Attribution, sources ...AttributionSource) Option {
	return optionFunc(func(c *config) {
		c.attribution = slices.Clone(sources)
		c.attributionErr = nil
		if dims := a.Dimensions(); len(dims) != len(sources) {
			c.attribution = nil
			c.attributionErr = fmt.Errorf("%w: %d sources for %d dimensions: give one source per dimension, in their order",
				ErrAttribution, len(sources), len(dims))
		}
	})
}

// Pricer prices a request's tokens: the cost of usage u of a request for
// model whose response named responseModel (either may be ""), and false
// when the model has no price. The pricing package's Table is one.
type Pricer interface {
	Cost(model, responseModel string, u stats.TokenUsage) (stats.Cost, bool)
}

// WithPrices prices each request with usage the handler records
// (stats.ObservedRequest.Cost), by its model (the request's, as
// WithEngineFor gets it) and the model its response named, so that its
// Recorder, built with instrument.WithPriceTable, counts its cost, or
// counts it as unpriced. A cost that is not valid (stats.Cost.Validate) is
// reported to the error handler and the request counted as unpriced. The
// handler applies it; a transport ignores it.
func WithPrices(p Pricer) Option {
	return optionFunc(func(c *config) { c.prices = p })
}

// checkAttribution reports the sources that give nothing, once, when the
// handler is built.
func (c *config) checkAttribution() {
	errs := []error{c.attributionErr}
	for i, s := range c.attribution {
		if s.err != nil {
			errs = append(errs, fmt.Errorf("dimension %d: %w", i, s.err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.onError(err)
	}
}

// attribute sets the request's value of each dimension in vs, and returns
// how many there are.
func (c *config) attribute(r *http.Request, info *requestInfo, vs *[instrument.MaxDimensions]string) int {
	n := min(len(c.attribution), len(vs))
	for i, s := range c.attribution[:n] {
		switch {
		case s.err != nil:
			vs[i] = ""
		case s.kind == sourceHeader:
			vs[i] = ""
			if v := r.Header[s.header]; len(v) > 0 {
				vs[i] = v[0]
			}
		case s.kind == sourceUser:
			vs[i] = info.user
		case s.kind == sourceAPIKey:
			vs[i] = s.keys.hash(apiKey(r.Header))
		}
	}
	return n
}

// wantsUser reports a dimension taken from the body's user, which readBody
// then keeps.
func (c *config) wantsUser() bool {
	return slices.ContainsFunc(c.attribution, func(s AttributionSource) bool { return s.kind == sourceUser })
}

// apiKey returns a request's API key: Authorization's Bearer token, else
// x-api-key (Anthropic's), else api-key (Azure OpenAI's); "" when none.
func apiKey(h http.Header) string {
	if v := h["Authorization"]; len(v) > 0 {
		if scheme, token, ok := strings.Cut(strings.TrimSpace(v[0]), " "); ok && strings.EqualFold(scheme, "Bearer") {
			if token = strings.TrimSpace(token); token != "" {
				return token
			}
		}
	}
	for _, k := range [...]string{"X-Api-Key", "Api-Key"} {
		if v := h[k]; len(v) > 0 && strings.TrimSpace(v[0]) != "" {
			return strings.TrimSpace(v[0])
		}
	}
	return ""
}

// hasher hashes API keys with a salt, its HMACs and buffers kept for
// reuse. The values of the last maxKeyValues keys seen are kept by a
// 64-bit hash of the key under a random seed (hash/maphash), not by the
// key: an HMAC-SHA256 costs about 6,000 instructions, a lookup a few
// hundred. Two keys whose maphash collide (about 1 in 2^64 a pair) would
// share a value.
type hasher struct {
	pool sync.Pool
	seed maphash.Seed
	mu   sync.RWMutex
	seen map[uint64]string // maphash(key) -> value, at most maxKeyValues
}

// maxKeyValues bounds the keys whose values a hasher keeps.
const maxKeyValues = 4096

// keyMAC is one HMAC with the buffer of its sum.
type keyMAC struct {
	h   hash.Hash
	sum [sha256.Size]byte
}

func newHasher(salt []byte) *hasher {
	h := &hasher{seed: maphash.MakeSeed(), seen: map[uint64]string{}}
	h.pool.New = func() any { return &keyMAC{h: hmac.New(sha256.New, salt)} }
	return h
}

// hash returns key's attribution value, "" for no key.
func (h *hasher) hash(key string) string {
	if key == "" {
		return ""
	}
	id := maphash.String(h.seed, key)
	h.mu.RLock()
	v, ok := h.seen[id]
	h.mu.RUnlock()
	if ok {
		return v
	}
	m := h.pool.Get().(*keyMAC)
	m.h.Reset()
	m.h.Write([]byte(key)) // a copy per key not seen before: a pooled buffer would keep the longest key's size
	m.h.Sum(m.sum[:0])
	var out [APIKeyHashLen]byte
	hex.Encode(out[:], m.sum[:APIKeyHashLen/2])
	h.pool.Put(m)
	v = string(out[:])
	h.mu.Lock()
	if len(h.seen) >= maxKeyValues {
		clear(h.seen) // the next keys seen fill it again
	}
	h.seen[id] = v
	h.mu.Unlock()
	return v
}

// price sets o's cost from the Pricer of WithPrices, for a request with
// usage whose model it prices with a valid cost.
func (c *config) price(o *stats.ObservedRequest, model string) {
	if c.prices == nil || !o.UsageKnown {
		return
	}
	cost, ok := c.prices.Cost(model, o.ResponseModel, o.Tokens())
	if !ok || !cost.Known {
		return
	}
	if err := cost.Validate(); err != nil {
		c.onError(fmt.Errorf("openaihttp: the price of model %.256q (response model %.256q) refused, counted as unpriced: %w",
			model, o.ResponseModel, err))
		return
	}
	o.Cost = cost
}
