package stacktest

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/testutil"
)

const model = "qwen-7b"

const request = `{"model":"qwen-7b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":32}`

// events is the stream every stack's handler writes, one event per flush:
// three content chunks, the finish, usage (20 prompt tokens, 16 cached, 3
// generated) and [DONE].
var events = []string{
	chunk("Hel"), chunk("lo"), chunk(" world"),
	`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n",
	`data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23,"prompt_tokens_details":{"cached_tokens":16}}}` + "\n\n",
	"data: [DONE]\n\n",
}

func chunk(s string) string {
	return fmt.Sprintf(`data: {"choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", s)
}

// stack is one request through one HTTP stack, observed by NewHandler on
// an Engine that a testutil.Reader reads.
type stack struct {
	t      *testing.T
	reader *testutil.Reader
	engine *instrument.Engine
	errs   []error
	mu     sync.Mutex
	logged strings.Builder
	wg     sync.WaitGroup
}

func newStack(t *testing.T) *stack {
	t.Helper()
	r := testutil.New(t)
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName(model))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	return &stack{t: t, reader: r, engine: e}
}

// handler wraps next in NewHandler, counting handlers in flight so that
// wait can wait for their recording.
func (s *stack) handler(next http.Handler, opts ...openaihttp.Option) http.Handler {
	h := openaihttp.NewHandler(next, append([]openaihttp.Option{openaihttp.WithEngine(s.engine),
		openaihttp.WithErrorHandler(func(err error) { s.mu.Lock(); s.errs = append(s.errs, err); s.mu.Unlock() })}, opts...)...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.wg.Add(1)
		defer s.wg.Done()
		h.ServeHTTP(w, r)
	})
}

// server starts a test server whose error log the stack checks.
func (s *stack) server(h http.Handler, tls bool) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(writerFunc(func(p []byte) (int, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.logged.Write(p)
	}), "", 0)
	if tls {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	s.t.Cleanup(srv.Close)
	return srv
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// post streams a request to srv and returns the body the client got.
func (s *stack) post(srv *httptest.Server, path string) (*http.Response, string) {
	s.t.Helper()
	resp, err := srv.Client().Post(srv.URL+path, "application/json", strings.NewReader(request))
	if err != nil {
		s.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		s.t.Fatal(err)
	}
	return resp, string(b)
}

// check waits for the handlers and checks what the stream recorded: one
// stop, the usage, one time to first token, two inter-chunk gaps, nothing
// logged by the server and no recording error.
func (s *stack) check(srv *httptest.Server, body string) {
	s.t.Helper()
	srv.Close()
	s.wg.Wait()
	if !strings.Contains(body, `"content":"Hel"`) || !strings.Contains(body, "[DONE]") {
		s.t.Errorf("the client got %q", body)
	}
	labels := []string{"model_name", model, "engine", "0"}
	for _, c := range []struct {
		family string
		want   float64
		extra  []string
	}{
		{"vllm:request_success_total", 1, []string{"finished_reason", "stop"}},
		{"vllm:request_success_total", 0, []string{"finished_reason", "error"}},
		{"vllm:prompt_tokens_total", 20, nil},
		{"vllm:prompt_tokens_cached_total", 16, nil},
		{"vllm:generation_tokens_total", 3, nil},
	} {
		if got := s.reader.Value(c.family, append(labels, c.extra...)...); got != c.want {
			s.t.Errorf("%s%v = %v, want %v", c.family, c.extra, got, c.want)
		}
	}
	if n := s.reader.Histogram("vllm:time_to_first_token_seconds", labels...).Count; n != 1 {
		s.t.Errorf("TTFT count %d, want 1", n)
	}
	if n := s.reader.Histogram("vllm:inter_token_latency_seconds", labels...).Count; n != 2 {
		s.t.Errorf("ITL count %d, want 2", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logged.Len() > 0 {
		s.t.Errorf("the server logged: %s", s.logged.String())
	}
	for _, err := range s.errs {
		s.t.Errorf("recording: %v", err)
	}
}

// writeEvents writes the stream through w, flushing each event with flush.
func writeEvents(w io.Writer, flush func()) {
	for _, e := range events {
		_, _ = io.WriteString(w, e)
		flush()
	}
}

// net/http: a ServeMux route, the handler flushing through
// http.ResponseController (which needs Unwrap or Flusher).
func TestNetHTTP(t *testing.T) {
	s := newStack(t)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		if err := rc.Flush(); err != nil { // before the first Write
			t.Errorf("ResponseController.Flush: %v", err)
		}
		writeEvents(w, func() { _ = rc.Flush() })
	})
	srv := s.server(s.handler(mux), false)
	_, body := s.post(srv, "/v1/chat/completions")
	s.check(srv, body)
}

// httputil.ReverseProxy with NewTransport, in front of an upstream.
func TestReverseProxy(t *testing.T) {
	s := newStack(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, w.(http.Flusher).Flush)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	p := httputil.NewSingleHostReverseProxy(u)
	p.Transport = openaihttp.NewTransport(nil, openaihttp.WithEngine(s.engine), openaihttp.WithBackend("up", instrument.RoleDecode))
	srv := s.server(s.handler(p), false)
	_, body := s.post(srv, "/v1/chat/completions")
	s.check(srv, body)
	labels := []string{"model_name", model, "engine", "0", "backend", "up", "backend.role", "decode",
		"gen_ai.operation.name", "chat", "gen_ai.provider.name", "self_hosted", "gen_ai.request.model", model}
	if n := s.reader.Histogram(instrument.NameGenAIClientOperationDuration, labels...).Count; n != 1 {
		t.Errorf("legs %d, want 1", n)
	}
}

// gin: Context.Stream, which asserts http.CloseNotifier (gin crashed on a
// ResponseWriter without it), and c.SSEvent-free raw writes.
func TestGin(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	s := newStack(t)
	g := gin.New()
	g.POST("/v1/chat/completions", func(c *gin.Context) {
		_, _ = io.Copy(io.Discard, c.Request.Body)
		c.Header("Content-Type", "text/event-stream")
		i := 0
		c.Stream(func(w io.Writer) bool {
			_, _ = io.WriteString(w, events[i])
			i++
			return i < len(events)
		})
	})
	srv := s.server(s.handler(g), false)
	_, body := s.post(srv, "/v1/chat/completions")
	s.check(srv, body)
}

// echo: the response's Flush.
func TestEcho(t *testing.T) {
	s := newStack(t)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/v1/chat/completions", func(c echo.Context) error {
		_, _ = io.Copy(io.Discard, c.Request().Body)
		res := c.Response()
		res.Header().Set(echo.HeaderContentType, "text/event-stream")
		res.WriteHeader(http.StatusOK)
		writeEvents(res, res.Flush)
		return nil
	})
	srv := s.server(s.handler(e), false)
	_, body := s.post(srv, "/v1/chat/completions")
	s.check(srv, body)
}

// HTTP/2 over TLS (httptest's EnableHTTP2), the stream flushed per event.
func TestHTTP2(t *testing.T) {
	s := newStack(t)
	var proto string
	srv := s.server(s.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto = r.Proto
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		writeEvents(w, w.(http.Flusher).Flush)
	})), true)
	resp, body := s.post(srv, "/v1/chat/completions")
	s.check(srv, body)
	if resp.ProtoMajor != 2 || proto != "HTTP/2.0" {
		t.Errorf("the exchange used %s (server saw %s), want HTTP/2", resp.Proto, proto)
	}
}

// A client hanging up through a ReverseProxy on HTTP/2 is an abort.
func TestHTTP2ProxyHangUp(t *testing.T) {
	s := newStack(t)
	first := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, events[0])
		w.(http.Flusher).Flush()
		close(first)
		<-r.Context().Done()
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	p := httputil.NewSingleHostReverseProxy(u)
	p.ErrorLog = log.New(io.Discard, "", 0)
	srv := s.server(s.handler(p), true)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(request))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	<-first
	cancel()
	_ = resp.Body.Close()
	srv.Close()
	s.wg.Wait()
	labels := []string{"model_name", model, "engine", "0"}
	if n := s.reader.Value("vllm:request_success_total", append(labels, "finished_reason", "abort")...); n != 1 {
		t.Errorf("request_success{abort} = %v, want 1 (error %v)", n,
			s.reader.Value("vllm:request_success_total", append(labels, "finished_reason", "error")...))
	}
}
