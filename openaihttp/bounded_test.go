package openaihttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}
func (d *discard) FlushError() error           { return nil } // as net/http's own ResponseWriter

const huge = 64 << 20

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A huge response passes through the middleware and the transport without
// being held: what they allocate does not grow with the body.
func TestHugeResponseNotBuffered(t *testing.T) {
	piece := bytes.Repeat([]byte("x"), 32<<10)
	head := `{"choices":[{"message":{"content":"`
	tail := `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`
	write := func(w io.Writer) {
		_, _ = io.WriteString(w, head)
		for range huge / len(piece) {
			_, _ = w.Write(piece)
		}
		_, _ = io.WriteString(w, tail)
	}
	c := newRec(t)
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		write(w)
	}), openaihttp.WithEngine(c.e))
	n := allocated(func() {
		h.ServeHTTP(&discard{h: http.Header{}}, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody)))
	})
	if n > 1<<20 {
		t.Errorf("the middleware allocated %d bytes for a %d-byte response", n, huge)
	}
	c.want("stop", 1, 2, 0)

	c2 := newRec(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		write(w)
	}))
	defer up.Close()
	tr := openaihttp.NewTransport(nil, openaihttp.WithEngine(c2.e))
	plain := allocated(func() { fetch(t, http.DefaultTransport, up.URL) })
	observed := allocated(func() { fetch(t, tr, up.URL) })
	if observed > plain+(1<<20) {
		t.Errorf("the transport allocated %d bytes beyond a plain one's %d for a %d-byte response", observed-plain, plain, huge)
	}
}

func fetch(t *testing.T, rt http.RoundTripper, base string) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(chatBody))
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// A huge request body is read only up to the bound, then streamed on.
func TestHugeRequestNotBuffered(t *testing.T) {
	c := newRec(t)
	var got int64
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.Copy(io.Discard, r.Body)
		jsonHandler(200, nonStreamResponse)(w, r)
	}), openaihttp.WithEngine(c.e), openaihttp.WithIncludeUsage())
	body := io.MultiReader(strings.NewReader(`{"model":"qwen-7b","stream":true,"messages":[{"content":"`),
		io.LimitReader(repeat('y'), huge), strings.NewReader(`"}]}`))
	n := allocated(func() {
		h.ServeHTTP(&discard{h: http.Header{}}, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", body))
	})
	if n > 1<<20 {
		t.Errorf("the middleware allocated %d bytes for a %d-byte request", n, huge)
	}
	if got < huge {
		t.Errorf("the handler read %d bytes, want the whole body", got)
	}
}

type repeat byte

func (r repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// The package imports the OpenTelemetry API only, like instrument.
func TestNoSDKDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") {
			t.Errorf("openaihttp depends on %s", dep)
		}
	}
}

// Per-chunk cost: a stream of 201 chunks allocates what one of 1 chunk does,
// through the middleware and through the transport, with one choice and
// with two taking turns (each timed on its own).
func TestNoAllocationsPerChunk(t *testing.T) {
	c := newRec(t)
	second := strings.Replace(chunk("tok"), `"index":0`, `"index":1`, 1)
	for name, frames := range map[string][][]byte{
		"n=1": {[]byte(chunk("tok"))},
		"n=2": {[]byte(chunk("tok")), []byte(second)},
	} {
		frame := func(i int) []byte { return frames[i%len(frames)] }
		stream := func(n int) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w) // flushes as httputil.ReverseProxy does: FlushError
				for i := range n {
					_, _ = w.Write(frame(i))
					_ = rc.Flush()
				}
				_, _ = io.WriteString(w, finishChunk("stop")+usageChunk(1, n, 0)+done)
			}
		}
		serveN := func(n int) func() {
			h := openaihttp.NewHandler(stream(n), openaihttp.WithEngine(c.e))
			w := &discard{h: http.Header{}}
			return func() {
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(streamBody)))
			}
		}
		one, many := testing.AllocsPerRun(20, serveN(1)), testing.AllocsPerRun(20, serveN(201))
		t.Logf("%s middleware: %v allocations for 1 chunk, %v for 201", name, one, many)
		if perChunk := (many - one) / 200; perChunk > 0.01 {
			t.Errorf("%s: the middleware allocates %.3f times per chunk (%v for 1 chunk, %v for 201)", name, perChunk, one, many)
		}

		body := func(n int) []byte {
			var b bytes.Buffer
			for i := range n {
				b.Write(frame(i))
			}
			b.WriteString(finishChunk("stop") + done)
			return b.Bytes()
		}
		readN := func(n int) func() {
			tr := openaihttp.NewTransport(fixed(body(n)), openaihttp.WithEngine(c.e), openaihttp.WithBackend("b", ""))
			buf := make([]byte, len(frame(0)))
			return func() {
				req, _ := http.NewRequest(http.MethodPost, "http://b/v1/chat/completions", strings.NewReader(streamBody))
				resp, _ := tr.RoundTrip(req)
				for {
					if _, err := resp.Body.Read(buf); err != nil {
						break
					}
				}
				_ = resp.Body.Close()
			}
		}
		one, many = testing.AllocsPerRun(20, readN(1)), testing.AllocsPerRun(20, readN(201))
		t.Logf("%s transport: %v allocations for 1 chunk, %v for 201", name, one, many)
		if perChunk := (many - one) / 200; perChunk > 0.01 {
			t.Errorf("%s: the transport allocates %.3f times per chunk (%v for 1 chunk, %v for 201)", name, perChunk, one, many)
		}
	}
}

// fixed is a RoundTripper answering a fixed SSE body.
type fixed []byte

func (f fixed) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(f)), Request: r}, nil
}
