// Package contentcoding decodes the HTTP content codings the standard
// library reads, for openaihttp (which observes a response decoded) and
// infermetrics-proxy (which decodes a stream it must edit): gzip (and
// x-gzip) and deflate, zlib-wrapped as RFC 9110 says or raw, as some
// servers send it. It is not part of the library's API.
package contentcoding

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strings"
)

// Identity reports a Content-Encoding value that leaves the body as it is:
// none, or identity.
func Identity(encoding string) bool {
	enc := normal(encoding)
	return enc == "" || enc == "identity"
}

// Decodes reports a Content-Encoding value NewReader decodes: gzip, x-gzip
// or deflate, in any case. Any other (br, zstd, several codings) is not.
func Decodes(encoding string) bool {
	switch normal(encoding) {
	case "gzip", "x-gzip", "deflate":
		return true
	}
	return false
}

func normal(encoding string) string { return strings.ToLower(strings.TrimSpace(encoding)) }

// NewReader returns the body br reads decoded from encoding (Decodes must
// hold), having read what tells its format: a gzip header, or whether a
// deflate body is zlib-wrapped. An empty body is io.EOF.
func NewReader(encoding string, br *bufio.Reader) (io.Reader, error) {
	if normal(encoding) != "deflate" {
		return gzip.NewReader(br)
	}
	if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
}
