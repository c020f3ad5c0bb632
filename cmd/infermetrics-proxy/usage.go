package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/infermetrics/infermetrics/internal/contentcoding"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// This file is -include-usage: the request rewrite that asks a streaming
// upstream for usage, and the removal, from what the client receives, of the
// usage chunk it did not ask for. openaihttp.WithIncludeUsage does the
// rewrite but not the removal; the two belong together and could move into
// openaihttp as one option.

// maxEvent bounds the SSE event the stripper holds to look at; a longer one
// is passed on as it comes (it is not a usage chunk of any known server).
const maxEvent = 64 << 10

// usageHandler rewrites streaming chat and text completion requests (the
// APIs that take stream_options; the others report usage unasked) that did
// not ask for usage to ask for it, and strips the usage chunk from their
// responses. It asks the upstream for them unencoded (Accept-Encoding:
// identity, always acceptable to a client), so that the stripper reads the
// events; a gzip or deflate stream sent all the same reaches the client
// decoded, and any other encoding passes through with its usage chunk
// (logged once, at warn).
type usageHandler struct {
	next   http.Handler
	limit  int // bytes of body read, as openaihttp.WithMaxRequestBody
	routes routes
	log    *slog.Logger
	warned atomic.Bool // an encoding not decoded was logged
}

func (h *usageHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !openaihttp.TakesStreamOptions(r, h.routes...) || r.Body == nil || r.Body == http.NoBody {
		h.next.ServeHTTP(w, r)
		return
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, int64(h.limit)+1))
	if err != nil || len(head) > h.limit {
		// Too long or unreadable: pass it on as it came, not rewritten.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(head), errOr(err, r.Body)), r.Body}
		h.next.ServeHTTP(w, r)
		return
	}
	body, ok := askUsage(head)
	if !ok {
		r.Body = io.NopCloser(bytes.NewReader(head))
		h.next.ServeHTTP(w, r)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	if r.Header.Get("Content-Length") != "" {
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.Header.Set("Accept-Encoding", "identity")
	sw := &stripWriter{w: w, opaque: h.opaque}
	defer sw.finish()
	h.next.ServeHTTP(sw, r)
}

// opaque logs, once, a stream whose encoding the stripper cannot read.
func (h *usageHandler) opaque(encoding string) {
	if h.warned.CompareAndSwap(false, true) {
		h.log.Warn("-include-usage: an upstream sent an event stream in an encoding the proxy does not decode although asked for identity: "+
			"its usage chunk reaches the client (logged once)", "content_encoding", encoding)
	}
}

// askUsage returns body with stream_options.include_usage set to true
// (openaihttp.AskUsage), for a streaming request that does not ask for
// usage already, read as openaihttp's handler reads it
// (openaihttp.StreamsWithoutUsage: "stream" as pydantic's lax bool, true,
// 1, "true", "yes", ..., as vLLM reads it); false leaves it unchanged. A
// body may start with one UTF-8 byte order mark, as Python's json.loads on
// bytes (vLLM's server) allows; the rewrite drops it, as
// openaihttp.AskUsage does.
func askUsage(body []byte) ([]byte, bool) {
	if !openaihttp.StreamsWithoutUsage(body) {
		return nil, false
	}
	return openaihttp.AskUsage(body)
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// errOr returns a reader failing with err, or r when err is nil.
func errOr(err error, r io.Reader) io.Reader {
	if err != nil {
		return errReader{err}
	}
	return r
}

// stripWriter passes a response on, removing from a successful stream (a
// 2xx response without Content-Length to a request that asked to stream,
// of any Content-Type: OpenAI's API has sent streams as application/json,
// see openaihttp's observer.kind) the usage chunk that include_usage adds:
// an event whose data is a JSON object with an empty "choices" and a
// non-null "usage". It holds at most one event (maxEvent bytes) at a time,
// so a body that is not an event stream is held whole up to maxEvent
// bytes, then passed on unchanged; every other response passes through
// untouched. A
// stream in gzip or deflate is decoded as it comes (each Write decoded
// before it returns) and sent decoded, without Content-Encoding; one in
// another encoding passes through untouched, reported to opaque.
type stripWriter struct {
	w         http.ResponseWriter
	opaque    func(encoding string)
	decided   bool
	strip     bool
	dec       *decoder // the stream's decoder, for an encoded stream
	event     []byte   // the event so far, while strip
	long      bool     // the current event outgrew maxEvent: passed on as it comes
	lineEmpty bool     // the current line has no byte yet but a line end before it
	err       error    // the client's write error, returned from then on
}

func (s *stripWriter) Header() http.Header { return s.w.Header() }

func (s *stripWriter) WriteHeader(code int) {
	if !s.decided && code >= 200 {
		s.decided = true
		h := s.w.Header()
		s.strip = code < 300 && h.Get("Content-Length") == ""
		switch enc := h.Get("Content-Encoding"); {
		case !s.strip || contentcoding.Identity(enc):
		case contentcoding.Decodes(enc):
			h.Del("Content-Encoding")
			s.dec = newDecoder(enc, s.events)
		default:
			s.strip = false
			if s.opaque != nil {
				s.opaque(enc)
			}
		}
	}
	s.w.WriteHeader(code)
}

func (s *stripWriter) Write(p []byte) (int, error) {
	if !s.decided {
		s.WriteHeader(http.StatusOK)
	}
	switch {
	case !s.strip:
		return s.w.Write(p)
	case s.dec != nil:
		return s.dec.Write(p)
	}
	if err := s.events(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// events passes on the events of p, a piece of the stream as decoded,
// without the usage chunk.
func (s *stripWriter) events(p []byte) error {
	if s.err != nil {
		return s.err
	}
	for len(p) > 0 {
		end := s.eventEnd(p)
		take := p
		if end >= 0 {
			take = p[:end]
		}
		p = p[len(take):]
		if s.long {
			s.send(take)
		} else {
			// The event so far: take itself when it is a whole event (looked
			// at and passed on from p, not copied), else what is held.
			event := take
			if end < 0 || len(s.event) > 0 {
				s.event = append(s.event, take...)
				event = s.event
			}
			if len(event) > maxEvent {
				s.long = true
				s.send(event)
				s.event = s.event[:0]
			} else if end >= 0 && !usageOnly(event) {
				s.send(event)
			}
		}
		if end >= 0 {
			s.event, s.long = s.event[:0], false
		}
		if s.err != nil {
			return s.err
		}
	}
	return nil
}

func (s *stripWriter) send(b []byte) {
	if s.err == nil && len(b) > 0 {
		_, s.err = s.w.Write(b)
	}
}

// finish passes on what is left of the stream when the response ends.
func (s *stripWriter) finish() {
	if s.dec != nil {
		_ = s.dec.Close() // a body cut or corrupt ends where its decoding stopped
	}
	if s.strip && len(s.event) > 0 && !usageOnly(s.event) {
		s.send(s.event)
	}
	s.event = nil
}

// Flush sends what was written to the client (http.Flusher); an event held
// whole is sent when it ends.
func (s *stripWriter) Flush() { _ = http.NewResponseController(s.w).Flush() }

// Hijack takes over the connection (http.Hijacker).
func (s *stripWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.w).Hijack()
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (s *stripWriter) Unwrap() http.ResponseWriter { return s.w }

// eventEnd returns how many bytes of p complete the current event, up to
// and including the blank line that ends it ("\n\n", or "\r\n\r\n"), or -1
// when p does not end it. A stream whose lines end in a lone "\r" never ends
// an event here: it passes through once an event outgrows maxEvent.
func (s *stripWriter) eventEnd(p []byte) int {
	// From line end to line end (bytes.IndexByte), not byte by byte: a line
	// is empty when only '\r' lies between its '\n' and the next.
	for i := 0; i < len(p); {
		if s.lineEmpty {
			for i < len(p) && p[i] == '\r' {
				i++
			}
			if i == len(p) {
				return -1
			}
			s.lineEmpty = false
			if p[i] == '\n' {
				return i + 1
			}
		}
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		s.lineEmpty = true
	}
	return -1
}

// usageOnly reports an SSE event whose data is a chunk with empty choices
// and a usage: the chunk include_usage adds (vLLM, SGLang, Ollama and
// llama.cpp servers all send it this way).
func usageOnly(event []byte) bool {
	if !bytes.Contains(event, []byte(`"usage"`)) {
		return false
	}
	var data []byte
	for _, line := range bytes.Split(event, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			return false // another field: not a plain data event
		}
		data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
	}
	var chunk struct {
		Choices *[]json.RawMessage `json:"choices"`
		Usage   json.RawMessage    `json:"usage"`
	}
	if json.Unmarshal(data, &chunk) != nil {
		return false
	}
	return chunk.Choices != nil && len(*chunk.Choices) == 0 && len(chunk.Usage) > 0 && string(chunk.Usage) != "null"
}
