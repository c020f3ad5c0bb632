package openaihttp

import (
	"bufio"
	"io"
	"net/http"

	"github.com/infermetrics/infermetrics/internal/contentcoding"
	"github.com/infermetrics/infermetrics/stats"
)

// bodyCoding decodes a response body's Content-Encoding for the observer
// as its bytes pass, while the client gets them exactly as sent: gzip (and
// x-gzip) and deflate (zlib-wrapped as RFC 9110 says, or raw, as some
// servers send it), with the standard library (internal/contentcoding). The decoder runs on its own
// goroutine behind an io.Pipe, decoding into one fixed buffer that it
// hands to the observer and reuses: a decompression bomb costs CPU, never
// memory. Any other encoding (br, zstd, several codings) is opaque: the
// body is not observed, and the request is recorded with its status and
// latency and its tokens unknown (settle).
type bodyCoding struct {
	opaque bool // an encoding not decoded
	failed bool // the decoder stopped on data it could not decode
	pw     *io.PipeWriter
	done   chan struct{}
}

// identity reports a body observed as it is sent: not encoded.
func (c *bodyCoding) identity() bool { return c.pw == nil && !c.opaque }

// decodeBuffer is the size of the buffer a decoder hands decoded bytes in.
const decodeBuffer = 16 << 10

// start prepares for a body of an encoding (a Content-Encoding value),
// whose decoded bytes o observes (an observer, not its bound write: a
// method value would be allocated for every body, encoded or not).
func (c *bodyCoding) start(encoding string, o *observer) {
	switch {
	case contentcoding.Identity(encoding):
		return
	case !contentcoding.Decodes(encoding):
		c.opaque = true
		return
	}
	pr, pw := io.Pipe()
	c.pw, c.done = pw, make(chan struct{})
	go c.decode(encoding, pr, o)
}

func (c *bodyCoding) decode(enc string, pr *io.PipeReader, o *observer) {
	defer close(c.done)
	// Once decoding stops, writes return at once: nothing waits on a
	// decoder that is gone.
	defer pr.Close()
	br := bufio.NewReader(pr)
	r, err := contentcoding.NewReader(enc, br)
	if err != nil {
		c.failed = err != io.EOF || br.Buffered() > 0 // an empty body is not a failure
		return
	}
	buf := make([]byte, decodeBuffer)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.write(buf[:n])
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			c.failed = err != io.ErrUnexpectedEOF && err != io.ErrClosedPipe
			return
		}
	}
}

// write passes the next bytes of an encoded body, as they were sent, to
// its decoder, if it has one (an opaque body is not read). The bytes of an
// identity body go to the observer directly, a call less per chunk.
func (c *bodyCoding) write(p []byte) {
	if c.pw != nil {
		_, _ = c.pw.Write(p) // an error: the decoder stopped
	}
}

// close ends the body: it returns when the decoder observed its last
// bytes.
func (c *bodyCoding) close() {
	if c.pw == nil {
		return
	}
	_ = c.pw.Close()
	<-c.done
	c.pw = nil
}

// settle makes the observed request of a body that was not observed
// (opaque, or that failed to decode) what its HTTP exchange shows: its
// status and latency, tokens and chunk times unknown. A status of 400 or
// above is an error, a client that went away an abort, and any other
// response ended normally (stop): the server answered, and nothing in the
// body can be read to say otherwise. Why it failed is what obs, which read
// none of the body, makes of the status and the end.
func (c *bodyCoding) settle(o *stats.ObservedRequest, e end, obs *observer) {
	if !c.opaque && !c.failed {
		return
	}
	*o = stats.ObservedRequest{Operation: o.Operation, E2ELatency: o.E2ELatency, Reason: stats.FinishStop}
	switch {
	case e.status >= 400:
		o.Reason = stats.FinishError
	case e.aborted:
		o.Reason = stats.FinishAbort
	}
	o.ErrorType = obs.errorType(o.Reason, e)
}

// headerValue is h.Get(key) for a key in canonical form ("Content-Type"),
// without canonicalizing it again: a few hundred instructions less per
// call, four calls per request through a proxy.
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
