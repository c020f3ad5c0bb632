package main

import (
	"bufio"
	"cmp"
	"errors"
	"io"
	"iter"

	"github.com/infermetrics/infermetrics/internal/contentcoding"
)

// decoder decodes a gzip or deflate body as it is written, for the
// stripper of a stream the upstream encoded although asked for identity.
// Each Write returns once its bytes are decoded as far as they go and the
// decoded bytes are handed to sink: an event the upstream flushed reaches
// sink before Write returns, and sink never runs beside the caller. The
// decoding runs as a coroutine (iter.Pull) that waits for the next Write
// whenever it has read all that was written.
type decoder struct {
	in     []byte // what the current Write gave, not yet read
	closed bool
	wait   func(struct{}) bool // the coroutine's yield: wait for the next Write
	resume func() (struct{}, bool)
	stop   func()
	ended  bool  // the decoding ended
	err    error // why, when not at the body's end
}

// errAfterEnd is the error of a Write of bytes after the encoded body's
// end.
var errAfterEnd = errors.New("bytes after the end of the encoded body")

// newDecoder starts decoding a body of encoding (contentcoding.Decodes
// holds), handing the decoded bytes to sink; sink's error ends the decoding
// and is returned by Write.
func newDecoder(encoding string, sink func([]byte) error) *decoder {
	d := &decoder{}
	d.resume, d.stop = iter.Pull(func(wait func(struct{}) bool) {
		d.wait = wait
		d.err = decode(encoding, d, sink)
		d.ended = true
	})
	return d
}

func decode(encoding string, in io.Reader, sink func([]byte) error) error {
	br := bufio.NewReader(in)
	r, err := contentcoding.NewReader(encoding, br)
	if err != nil {
		return err
	}
	buf := make([]byte, 4<<10) // an event stream's blocks are small
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if err := sink(buf[:n]); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Write decodes p and hands what it decodes to sink before it returns.
func (d *decoder) Write(p []byte) (int, error) {
	if d.ended {
		return 0, cmp.Or(d.err, errAfterEnd)
	}
	d.in = p
	d.resume()
	switch {
	case d.err != nil:
		return 0, d.err
	case len(d.in) > 0: // the body ended before p did
		return 0, errAfterEnd
	}
	return len(p), nil
}

// Close ends the body: the decoder reads its end and hands what it holds
// to sink. The error is nil when the body ended whole.
func (d *decoder) Close() error {
	if !d.closed {
		d.closed = true
		if !d.ended {
			d.resume()
		}
		d.stop()
	}
	return d.err
}

// Read is the coroutine's input: the bytes of the current Write, then, once
// they are read, those of the next.
func (d *decoder) Read(p []byte) (int, error) {
	for len(d.in) == 0 {
		if d.closed || !d.wait(struct{}{}) {
			return 0, io.EOF
		}
	}
	n := copy(p, d.in)
	d.in = d.in[n:]
	return n, nil
}
