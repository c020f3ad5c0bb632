package openaihttp_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

const benchChunks = 256

// BenchmarkHandlerChunk measures a streamed response of 256 content chunks
// through a plain handler and through the middleware, in the same run:
// ns/chunk and allocs/chunk of each, so the middleware's added cost per
// chunk is the difference.
func BenchmarkHandlerChunk(b *testing.B) {
	c := newRec(b)
	frame := []byte(chunk("token"))
	tail := []byte(finishChunk("stop") + usageChunk(100, benchChunks, 0) + done)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range benchChunks {
			_, _ = w.Write(frame)
			f.Flush()
		}
		_, _ = w.Write(tail)
	})
	for _, v := range []struct {
		name string
		h    http.Handler
	}{
		{"plain", next},
		{"middleware", openaihttp.NewHandler(next, openaihttp.WithEngine(c.e))},
	} {
		b.Run(v.name, func(b *testing.B) {
			w := &discard{h: http.Header{}}
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			b.ReportAllocs()
			var allocs float64
			for b.Loop() {
				req.Body = bodyOf(streamBody)
				v.h.ServeHTTP(w, req)
			}
			allocs = testing.AllocsPerRun(10, func() { req.Body = bodyOf(streamBody); v.h.ServeHTTP(w, req) })
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchChunks, "ns/chunk")
			b.ReportMetric(allocs/benchChunks, "allocs/chunk")
		})
	}
}

// BenchmarkTransportChunk measures reading a streamed body of 256 content
// chunks through a plain RoundTripper and through the transport.
func BenchmarkTransportChunk(b *testing.B) {
	c := newRec(b)
	frame := []byte(chunk("token"))
	var body bytes.Buffer
	for range benchChunks {
		body.Write(frame)
	}
	body.WriteString(finishChunk("stop") + usageChunk(100, benchChunks, 0) + done)
	base := fixed(body.Bytes())
	for _, v := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"plain", base},
		{"transport", openaihttp.NewTransport(base, openaihttp.WithEngine(c.e), openaihttp.WithBackend("b", ""))},
	} {
		b.Run(v.name, func(b *testing.B) {
			buf := make([]byte, len(frame)) // one chunk per Read, as a streaming client reads
			run := func() {
				req, _ := http.NewRequest(http.MethodPost, "http://b/v1/chat/completions", bodyOf(streamBody))
				resp, _ := v.rt.RoundTrip(req)
				for {
					if _, err := resp.Body.Read(buf); err != nil {
						break
					}
				}
				_ = resp.Body.Close()
			}
			b.ReportAllocs()
			for b.Loop() {
				run()
			}
			allocs := testing.AllocsPerRun(10, run)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchChunks, "ns/chunk")
			b.ReportMetric(allocs/benchChunks, "allocs/chunk")
		})
	}
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

func bodyOf(s string) nopCloser { return nopCloser{strings.NewReader(s)} }
