package openaihttp_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/stats"
)

// errs collects what the error handler gets.
type errs struct {
	mu  sync.Mutex
	all []error
}

func (e *errs) handle(err error) { e.mu.Lock(); e.all = append(e.all, err); e.mu.Unlock() }

func (e *errs) get() []error { e.mu.Lock(); defer e.mu.Unlock(); return append([]error(nil), e.all...) }

// A client's absurd max_tokens (answered 400, as vLLM does) is reported
// and dropped for its request alone: the requests after it are recorded.
// Before, it overflowed the engine's running total and the 5 normal
// requests after it recorded 0 successes.
func TestAbsurdMaxTokensDoesNotDisableRecording(t *testing.T) {
	c := newRec(t)
	var got errs
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte("9223372036854775000")) {
			jsonHandler(400, `{"error":{"message":"max_tokens too large"}}`)(w, r)
			return
		}
		jsonHandler(200, nonStreamResponse)(w, r)
	}), openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(got.handle))
	serveOne := func(body string) {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	}
	serveOne(`{"model":"qwen-7b","messages":[],"max_tokens":9223372036854775000}`)
	serveOne(`{"model":"qwen-7b","messages":[],"n":9223372036854775000}`)
	for range 5 {
		serveOne(`{"model":"qwen-7b","messages":[{"role":"user","content":"hi"}],"max_tokens":1000}`)
	}
	if n := c.success("length"); n != 5 {
		t.Errorf("request_success{length} = %v after the absurd requests, want 5", n)
	}
	if n := c.value("vllm:generation_tokens_total"); n != 5*32 {
		t.Errorf("generation tokens = %v, want %v", n, 5*32)
	}
	for _, err := range got.get() {
		if !errors.Is(err, stats.ErrOutOfRange) {
			t.Errorf("reported: %v, want only values out of range", err)
		}
	}
}

// proxied is NewHandler around an httputil.ReverseProxy with NewTransport,
// to an upstream, as a gateway runs it.
func proxied(t *testing.T, c *rec, up http.Handler, report func(error)) (*served, *httptest.Server) {
	t.Helper()
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	u, _ := url.Parse(upstream.URL)
	p := httputil.NewSingleHostReverseProxy(u)
	p.Transport = openaihttp.NewTransport(nil, openaihttp.WithEngine(c.e), openaihttp.WithBackend("up", "decode"),
		openaihttp.WithErrorHandler(report))
	p.ErrorLog = log.New(io.Discard, "", 0)
	s := &served{}
	h := openaihttp.NewHandler(p, openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(report))
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.wg.Add(1)
		defer s.wg.Done()
		h.ServeHTTP(w, r)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.Start()
	t.Cleanup(s.Close)
	return s, upstream
}

// A client that hangs up on a stream through a ReverseProxy is an abort:
// the proxy ends its handler with panic(http.ErrAbortHandler), which the
// middleware re-panics for net/http. Before, every panic was a 500 and an
// error.
func TestReverseProxyClientHangUpIsAbort(t *testing.T) {
	c := newRec(t)
	firstSent := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	s, _ := proxied(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, chunk("Hel"))
		w.(http.Flusher).Flush()
		close(firstSent)
		select { // the client goes away before the rest
		case <-r.Context().Done():
		case <-release:
		}
	}), func(err error) { t.Errorf("recording: %v", err) })
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	<-firstSent
	cancel()
	_ = resp.Body.Close()
	s.wait()
	if n := c.success("abort"); n != 1 {
		t.Errorf("request_success{abort} = %v, want 1 (error: %v)", n, c.success("error"))
	}
}

// A handler that flushes before its first Write sends its header once: no
// "superfluous response.WriteHeader call". The ResponseWriter keeps
// http.CloseNotifier (gin asserts it) and io.ReaderFrom.
func TestFlushBeforeWriteAndInterfaces(t *testing.T) {
	c := newRec(t)
	var logged bytes.Buffer
	var mu sync.Mutex
	var closeNotifier, readerFrom bool
	s := &served{}
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		//lint:ignore SA1019 gin's Context.Stream asserts it: the wrapper must keep it
		_, closeNotifier = w.(http.CloseNotifier)
		_, readerFrom = w.(io.ReaderFrom)
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, chunk("a")+finishChunk("stop")+done)
	}), openaihttp.WithEngine(c.e))
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.wg.Add(1)
		defer s.wg.Done()
		h.ServeHTTP(w, r)
	}))
	s.Config.ErrorLog = log.New(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logged.Write(p) }), "", 0)
	s.Start()
	t.Cleanup(s.Close)
	readAll(t, post(t, s.URL+"/v1/chat/completions", streamBody))
	s.wait()
	mu.Lock()
	defer mu.Unlock()
	if logged.Len() > 0 {
		t.Errorf("the server logged: %s", logged.String())
	}
	if !closeNotifier || !readerFrom {
		t.Errorf("the ResponseWriter lost CloseNotifier (%v) or ReaderFrom (%v)", closeNotifier, readerFrom)
	}
	if n := c.success("stop"); n != 1 {
		t.Errorf("request_success{stop} = %v, want 1", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// encode compresses b in an HTTP content coding.
func encode(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&buf)
	case "deflate":
		w = zlib.NewWriter(&buf)
	case "raw-deflate":
		w, _ = flate.NewWriter(&buf, flate.BestSpeed)
	default:
		return b // an encoding the test cannot make: its bytes are opaque anyway
	}
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// A gateway (NewHandler, ReverseProxy, NewTransport) in front of an upstream
// that compresses its JSON, for a client that accepts it (the OpenAI Python
// SDK sends Accept-Encoding: gzip, deflate): the client gets exactly the
// upstream's bytes, and both sides observe the decoded body. Before, every
// 200 was recorded as finished_reason="error" with 0 tokens. An encoding
// not decoded records status and latency, tokens unknown, never an error.
func TestCompressedResponses(t *testing.T) {
	for _, coding := range []string{"gzip", "deflate", "raw-deflate", "br"} {
		t.Run(coding, func(t *testing.T) {
			c := newRec(t)
			header := coding
			if coding == "raw-deflate" {
				header = "deflate"
			}
			sent := encode(t, coding, []byte(nonStreamResponse))
			s, _ := proxied(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", header)
				_, _ = w.Write(sent)
			}), func(err error) { t.Errorf("recording: %v", err) })
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Accept-Encoding", "gzip, deflate")
			resp, err := http.DefaultTransport.RoundTrip(req) // no decompression of its own
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			s.wait()
			if !bytes.Equal(got, sent) {
				t.Errorf("the client got %d bytes unlike the upstream's %d", len(got), len(sent))
			}
			l := named(clientLabels("up", "decode"))
			if coding == "br" { // not decoded: no model read
				l = clientLabels("up", "decode")
			}
			legs := c.clientHist("gen_ai.client.operation.duration", l...)
			if coding == "br" {
				if n := c.success("stop"); n != 1 {
					t.Errorf("request_success{stop} = %v for an opaque body, want 1 (error: %v)", n, c.success("error"))
				}
				if n := c.value("vllm:generation_tokens_total"); n != 0 {
					t.Errorf("generation tokens %v from an opaque body", n)
				}
				if legs != 1 {
					t.Errorf("%d legs without error, want 1", legs)
				}
				return
			}
			c.want("length", 12, 32, 8)
			if legs != 1 {
				t.Errorf("%d legs without error, want 1", legs)
			}
			if n := c.clientHist("gen_ai.client.token.usage", named(clientLabels("up", "decode", "gen_ai.token.type", "output"))...); n != 1 {
				t.Errorf("leg output tokens recorded %d times, want 1", n)
			}
		})
	}
}

// A gzipped stream, flushed per event, is observed as it passes: chunks,
// finish reason and usage.
func TestCompressedStream(t *testing.T) {
	c := newRec(t)
	s := serve(t, c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		for _, e := range []string{chunk("Hel"), chunk("lo"), chunk(" world"), finishChunk("stop"), usageChunk(20, 3, 16), done} {
			_, _ = io.WriteString(zw, e)
			_ = zw.Flush()
			w.(http.Flusher).Flush()
		}
		_ = zw.Close()
	}))
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(zr)
	_ = resp.Body.Close()
	s.wait()
	if !strings.Contains(string(got), "[DONE]") {
		t.Errorf("the client got %q", got)
	}
	c.want("stop", 20, 3, 16)
	if n := c.count("vllm:inter_token_latency_seconds"); n != 2 {
		t.Errorf("ITL count %d, want 2", n)
	}
}

// A decompression bomb does not grow memory: the body is decoded in a
// fixed buffer as it passes. Under the race detector the bomb decodes to 4
// MiB, 4 times the bound, which a decoder holding the body still exceeds:
// the race detector watches the handoff to the decoder's goroutine, the
// same for any size, and 32 MiB read under it took 4 s of CPU (whole
// without -race).
func TestDecompressionBomb(t *testing.T) {
	size := 32 << 20
	if sample.Race {
		size = 4 << 20
	}
	var plain bytes.Buffer
	plain.WriteString(`{"choices":[{"message":{"content":"`)
	plain.Write(bytes.Repeat([]byte("x"), size))
	plain.WriteString(`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	bomb := encode(t, "gzip", plain.Bytes())
	plain.Reset()
	c := newRec(t)
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(bomb)
	}), openaihttp.WithEngine(c.e))
	n := allocated(func() {
		h.ServeHTTP(&discard{h: http.Header{}}, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody)))
	})
	if n > 1<<20 {
		t.Errorf("the middleware allocated %d bytes for a %d-byte bomb decoding to %d", n, len(bomb), size)
	}
	c.want("stop", 1, 2, 0)
}

// A Trace keeps at most MaxLegs legs, however many a router sends for one
// request; the transport still records every leg.
func TestTraceLegsBounded(t *testing.T) {
	c := newRec(t)
	up := httptest.NewServer(jsonHandler(200, nonStreamResponse))
	t.Cleanup(up.Close)
	ctx, trace := openaihttp.NewTrace(t.Context())
	rt := openaihttp.NewTransport(nil, openaihttp.WithEngine(c.e), openaihttp.WithBackend("up", ""),
		openaihttp.WithErrorHandler(func(err error) { t.Errorf("recording: %v", err) }))
	const sent = openaihttp.MaxLegs + 36
	for range sent {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, up.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if n := len(trace.Legs()); n != openaihttp.MaxLegs {
		t.Errorf("the trace kept %d legs of %d, want %d", n, sent, openaihttp.MaxLegs)
	}
	if n := c.clientHist("gen_ai.client.operation.duration", named(clientLabels("up", ""))...); n != sent {
		t.Errorf("%d legs recorded, want %d", n, sent)
	}
}
