package openaihttp

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"
)

// The ResponseWriter of net/http's HTTP/1 server implements a known set of
// optional interfaces. A writer with exactly that set gets h1Writer, which
// has the same methods and tells t what httpsnoop's wrapper would (snoop),
// in one allocation where httpsnoop's wrapper and its hooks take 20 (about
// 1 µs a request with the garbage they make; docs/benchmarks.md). Any other
// writer (HTTP/2's, a framework's) gets httpsnoop's.

type (
	flushErrorer interface{ FlushError() error }
	deadliner    interface {
		SetReadDeadline(time.Time) error
		SetWriteDeadline(time.Time) error
	}
	fullDuplexEnabler interface{ EnableFullDuplex() error }
)

// h1Interfaces reports whether w implements exactly the optional
// interfaces of net/http's HTTP/1 ResponseWriter among those httpsnoop
// keeps: all but http.Pusher.
func h1Interfaces(w http.ResponseWriter) bool {
	_, flusher := w.(http.Flusher)
	_, flushErr := w.(flushErrorer)
	//lint:ignore SA1019 net/http's writer has it, so its wrapper keeps it
	_, notifier := w.(http.CloseNotifier)
	_, hijacker := w.(http.Hijacker)
	_, readerFrom := w.(io.ReaderFrom)
	_, deadlines := w.(deadliner)
	_, duplex := w.(fullDuplexEnabler)
	_, pusher := w.(http.Pusher)
	_, stringWriter := w.(io.StringWriter)
	return flusher && flushErr && notifier && hijacker && readerFrom && deadlines && duplex && !pusher && stringWriter
}

// h1Writer wraps a writer for which h1Interfaces holds.
type h1Writer struct {
	w http.ResponseWriter
	t tap
}

func (h *h1Writer) Header() http.Header { return h.w.Header() }

func (h *h1Writer) WriteHeader(code int) {
	h.t.commit(code)
	h.w.WriteHeader(code)
}

func (h *h1Writer) Write(p []byte) (int, error) {
	h.t.commit(http.StatusOK)
	n, err := h.w.Write(p)
	h.t.wrote(p[:n], err)
	return n, err
}

// WriteString writes through Write, as httpsnoop's wrapper does with a
// Write hook and none of its own.
func (h *h1Writer) WriteString(s string) (int, error) { return h.Write([]byte(s)) }

func (h *h1Writer) Flush() {
	h.t.commit(http.StatusOK) // a Flush before any Write sends the header
	h.w.(http.Flusher).Flush()
}

func (h *h1Writer) FlushError() error {
	h.t.commit(http.StatusOK)
	return h.w.(flushErrorer).FlushError()
}

func (h *h1Writer) ReadFrom(src io.Reader) (int64, error) {
	h.t.commit(http.StatusOK)
	if h.t.rw != nil {
		src = &observedReader{r: src, rw: h.t.rw}
	}
	return h.w.(io.ReaderFrom).ReadFrom(src)
}

func (h *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, b, err := h.w.(http.Hijacker).Hijack()
	if err == nil {
		h.t.hijacked()
	}
	return c, b, err
}

func (h *h1Writer) CloseNotify() <-chan bool {
	//lint:ignore SA1019 net/http's writer has it, so its wrapper keeps it
	return h.w.(http.CloseNotifier).CloseNotify()
}

func (h *h1Writer) SetReadDeadline(t time.Time) error  { return h.w.(deadliner).SetReadDeadline(t) }
func (h *h1Writer) SetWriteDeadline(t time.Time) error { return h.w.(deadliner).SetWriteDeadline(t) }
func (h *h1Writer) EnableFullDuplex() error            { return h.w.(fullDuplexEnabler).EnableFullDuplex() }

// Unwrap, for http.ResponseController.
func (h *h1Writer) Unwrap() http.ResponseWriter { return h.w }
