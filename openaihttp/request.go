package openaihttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"

	"github.com/infermetrics/infermetrics/stats"
)

// requestInfo is what the bounded read of a request body told.
type requestInfo struct {
	model     string
	stream    bool
	n         int64
	maxTokens int64
	user      string // the body's end-user identifier, when asked for (see FromUser)
	err       error  // values dropped (ErrDropped), for the error handler
}

// ErrDropped reports a value a client or server sent beyond what any server
// accepts (a count or parameter above stats.MaxRequestTokens, 2^27): it is
// dropped for its request alone, which is recorded without it, and later
// requests are not affected. It matches stats.ErrOutOfRange.
var ErrDropped = fmt.Errorf("openaihttp: value beyond any server's bound dropped: %w", stats.ErrOutOfRange)

// Dialects: the request and response formats of the APIs observed.
const (
	dOpenAI      uint8 = iota // chat and text completions, embeddings, pooling (llama.cpp's timings too)
	dResponses                // OpenAI Responses API
	dAnthropic                // Anthropic Messages API
	dOllama                   // Ollama's native API (NDJSON)
	dOllamaEmbed              // Ollama's native embeddings: one JSON object
)

// endpoint is what a request's path tells: its GenAI operation and the
// format of its response.
type endpoint struct {
	op      stats.Operation
	dialect uint8
}

// roots are the scanner contexts of the roots of each dialect's documents:
// a response's and a request's.
var roots = [...]struct{ response, request uint8 }{
	dOpenAI:      {cRoot, cRequest},
	dResponses:   {cRespRoot, cRequest},
	dAnthropic:   {cAnthRoot, cRequest},
	dOllama:      {cOllamaRoot, cOllamaRequest},
	dOllamaEmbed: {cOllamaRoot, cOllamaEmbedRequest},
}

// rootContext is the scanner context of a response document's root.
func (e endpoint) rootContext() uint8 { return roots[e.dialect].response }

// requestContext is the scanner context of a request body's root.
func (e endpoint) requestContext() uint8 { return roots[e.dialect].request }

// endpoints are the APIs the package recognises by a path's final
// segments, wherever a base URL puts them: one definition for the handler
// and the transport (and the routes' patterns, see bases). A path takes the
// first whose segments end it: /chat/completions is chat, any other
// /completions text completion. Anthropic's keeps its /v1 (its clients
// always send it), as /messages alone ends other APIs' paths (OpenAI's
// threads); Ollama's /api/embeddings comes before /embeddings (OpenAI's),
// whose segments end it. vLLM's pooling paths are those of its api_routers
// (vllm/entrypoints/pooling/*/api_router.py, see testdata/README.md).
var endpoints = [...]struct {
	suffix string
	api    api
}{
	{"/chat/completions", apiChat},
	{"/completions", apiCompletions},
	{"/responses", apiResponses},
	{"/v1/messages", apiMessages},
	{"/api/embed", apiOllamaEmbed},
	{"/api/embeddings", apiOllamaEmbed},
	{"/embeddings", apiEmbeddings},
	{"/pooling", apiPooling},
	{"/classify", apiPooling},
	{"/score", apiPooling},
	{"/rerank", apiPooling},
	{"/api/chat", apiOllamaChat},
	{"/api/generate", apiOllamaGenerate},
}

// RecordedPaths returns the ends of the paths whose POST requests NewHandler
// and NewTransport record, in the package doc's order: a request is
// recorded when its path, doubled and trailing slashes aside, ends in one of
// them as whole segments ("/chat/completions", "/completions", ...,
// "/api/generate"), under any base path, or matches a route of WithRoutes.
func RecordedPaths() []string {
	paths := make([]string, len(endpoints))
	for i, e := range endpoints {
		paths[i] = e.suffix
	}
	return paths
}

// instrumented reports a request this package observes, a POST to one of
// the APIs (routes first, then the endpoints), and its route; every other
// request passes through.
func instrumented(r *http.Request, routes []Route) (route, bool) {
	if r.Method != http.MethodPost || r.URL == nil {
		return route{}, false
	}
	rt, ok := routeOf(r.URL.Path, routes)
	return rt, ok && rt.api != apiNone
}

// TakesStreamOptions reports a request whose API takes
// stream_options.include_usage (a POST to chat or text completions, by the
// package's rules or by one of routes, which are tried first): the
// streaming requests WithIncludeUsage rewrites. The other APIs observed
// report usage unasked.
func TakesStreamOptions(r *http.Request, routes ...Route) bool {
	rt, ok := instrumented(r, routes)
	return ok && apis[rt.api].ep.takesStreamOptions()
}

// takesStreamOptions reports the chat and text completions APIs.
func (e endpoint) takesStreamOptions() bool { return e.dialect == dOpenAI && e.op.Generates() }

// readBody reads at most limit bytes of the body of a request to rt's API
// to learn its model (the path's when the body names none), stream, n and
// max_tokens, and returns the body to pass on
// unchanged (the bytes read followed by the rest) and, with includeUsage,
// for a streaming chat or text completion request that did not ask for
// usage, the body rewritten to ask for it (only a body read whole: a longer
// one is not rewritten). The caller passes the request on with body, or,
// once it knows the request is recorded, with rewritten (setBody). A body
// a handler read so and passed on unread to a transport reading it as the
// handler did is not read again: what it told is kept with it (the values
// it dropped, which the handler reported, are not reported again).
//
// With user, info.user is the body's end-user identifier: "user", or for
// Anthropic's Messages API "metadata.user_id" (see FromUser).
func readBody(r *http.Request, rt route, limit int, includeUsage, user bool) (info requestInfo, body io.ReadCloser, rewritten []byte) {
	if hb, ok := r.Body.(*heldBody); ok && hb.off == 0 && hb.api == rt.api && hb.pathModel == rt.model && hb.limit == limit {
		if includeUsage && hb.askable {
			rewritten, _ = AskUsage(hb.head)
		}
		info = hb.info
		info.err = nil // the handler that read it reported it
		return info, hb, rewritten
	}
	ep := apis[rt.api].ep
	info.model = rt.model
	info.stream = ep.dialect == dOllama // Ollama streams unless told not to
	if r.Body == nil || r.Body == http.NoBody {
		return info, r.Body, nil
	}
	// A body of known length is read into as much and a byte more, to see
	// its end; one of unknown length from 512 bytes on.
	size := int64(512)
	if r.ContentLength > 0 {
		size = r.ContentLength + 1
	}
	head := make([]byte, 0, min(size, int64(limit)+1))
	var err error
	for len(head) <= limit {
		head = slices.Grow(head, 1)
		var n int
		n, err = r.Body.Read(head[len(head):min(cap(head), limit+1)])
		head = head[:len(head)+n]
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	whole := err == nil && len(head) <= limit
	var s jsonScan
	scanRequest(&s, head[:min(len(head), limit)], ep.requestContext())
	rq := &s.req
	if s.modelLen > 0 {
		info.model = string(s.model[:s.modelLen])
	}
	if user {
		u := s.user[:s.userLen]
		if ep.dialect == dAnthropic {
			u = s.userID[:s.userIDLen]
		}
		info.user = string(u)
	}
	info.n, info.maxTokens = rq.n, rq.maxTokensParam()
	if rq.hasStream {
		info.stream = rq.stream
	}
	info.err = droppedErr("request", s.d.dropped)
	askable := whole && rq.unasked() && ep.takesStreamOptions()
	if includeUsage && askable {
		rewritten, _ = AskUsage(head)
	}
	hb := &heldBody{head: head, rest: r.Body, body: r.Body,
		info: info, api: rt.api, pathModel: rt.model, limit: limit, askable: askable, whole: whole}
	if err != nil {
		// The read failed: pass on what was read and the error, as the
		// handler would have seen it.
		hb.rest = errReader{err}
	}
	return info, hb, rewritten
}

// heldBody is a request body whose first bytes were read (head): it reads
// them again, then the rest. It keeps what they told, and how they were
// read, for a transport it reaches unread (readBody).
type heldBody struct {
	head []byte
	off  int // bytes of head read again
	rest io.Reader
	body io.Closer

	info      requestInfo
	api       api
	pathModel string
	limit     int
	askable   bool // a request WithIncludeUsage rewrites
	whole     bool // head is the whole body
}

// ForwardBody, called from the Rewrite function of an
// httputil.ReverseProxy that NewHandler wraps, sends upstream the request
// body the handler read, when it read it whole and passed it on unread and
// unchanged, in place of ReverseProxy's wrapper of it: a NewTransport then
// takes what the handler read of it instead of reading it again (see Cost
// in the package doc). The body it sends reads the bytes the
// handler holds and never the client's connection again; closing it closes
// nothing. Any other body is left as ReverseProxy set it.
func ForwardBody(pr *httputil.ProxyRequest) {
	hb, ok := pr.In.Body.(*heldBody)
	if !ok || !hb.whole || hb.off != 0 || pr.Out.Body == nil {
		return
	}
	fb := *hb
	fb.rest, fb.body = nil, closesNothing{}
	pr.Out.Body = &fb
}

type closesNothing struct{}

func (closesNothing) Close() error { return nil }

func (b *heldBody) Read(p []byte) (int, error) {
	if b.off < len(b.head) {
		n := copy(p, b.head[b.off:])
		b.off += n
		return n, nil
	}
	if b.rest == nil {
		return 0, io.EOF
	}
	n, err := b.rest.Read(p)
	if err == io.EOF {
		b.rest = nil // as io.MultiReader: what ended is not read again
	}
	return n, err
}

func (b *heldBody) Close() error { return b.body.Close() }

// droppedErr reports the values a document dropped, or nil.
func droppedErr(what string, dropped uint8) error {
	if dropped == 0 {
		return nil
	}
	var names []string
	for _, f := range [...]struct {
		bit  uint8
		name string
	}{{dropMaxTokens, "max_tokens"}, {dropN, "n"}, {dropUsage, "usage"}} {
		if dropped&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	return fmt.Errorf("%w: %s %s above %d", ErrDropped, what, strings.Join(names, ", "), maxCount)
}

// AskUsage returns body, a request's JSON object, with
// stream_options.include_usage set to true and every other member kept: the
// rewrite WithIncludeUsage makes, for a proxy that decides itself which
// requests to rewrite. ok is false, and out nil, when body is not a JSON
// object or its stream_options is neither an object nor null. A leading
// UTF-8 byte order mark is read past, as vLLM's server reads it, and not
// written: out is encoded anew, and JSON sent over a network carries none
// (RFC 8259), which servers in Go (Ollama) require.
func AskUsage(body []byte) (out []byte, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(trimBOM(body), &m) != nil || m == nil {
		return nil, false
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := m["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil || opts == nil {
			return nil, false
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, false
	}
	m["stream_options"] = raw
	if out, err = json.Marshal(m); err != nil {
		return nil, false
	}
	return out, true
}

// StreamsWithoutUsage reports a request body, a JSON object, that asks to
// stream and does not ask for usage in stream_options.include_usage: the
// chat or text completion request WithIncludeUsage rewrites (AskUsage),
// read as the handler reads it, "stream" and include_usage as pydantic's
// lax bool (true, 1, "true", "yes", ...), so that a proxy deciding itself
// which requests to rewrite decides as vLLM reads them. An include_usage
// that is no bool is left for the server to refuse: false.
func StreamsWithoutUsage(body []byte) bool {
	var s jsonScan
	scanRequest(&s, body, cRequest)
	return s.req.unasked()
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// setBody makes b, a rewrite of r's body, the body r is sent with: its
// Body (closing closes r's), Content-Length and GetBody (for a transport
// that resends it).
func setBody(r *http.Request, b []byte) {
	r.Body = readCloser{bytes.NewReader(b), r.Body}
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	if r.Header.Get("Content-Length") != "" {
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	}
}
