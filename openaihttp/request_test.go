package openaihttp

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/infermetrics/infermetrics/instrument"
)

// roundTrip is a RoundTripper of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newEngine returns an Engine recording on the OpenTelemetry API alone
// (noop): for what openaihttp does, not what is recorded.
func newEngine(t testing.TB, opts ...instrument.Option) *instrument.Engine {
	rec, err := instrument.NewRecorder(append([]instrument.Option{instrument.WithMeterProvider(noop.NewMeterProvider()), instrument.WithModelName("m")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	e, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A transport sending a request body a handler read and passed on, unread,
// does not read it again: it sends the handler's body itself, and takes
// what the handler learned of it (its model, which WithEngineFor is given
// on both sides); with WithIncludeUsage of its own, the body rewritten.
func TestTransportTakesHandlerRead(t *testing.T) {
	e := newEngine(t)
	const body = `{"model":"qwen","messages":[],"stream":true}`
	for _, include := range []bool{false, true} {
		var models []string
		engineFor := WithEngineFor(func(m string) *instrument.Engine {
			models = append(models, m)
			return e
		})
		var sentBody io.ReadCloser
		var sent []byte
		opts := []Option{engineFor}
		if include {
			opts = append(opts, WithIncludeUsage())
		}
		tr := NewTransport(roundTrip(func(r *http.Request) (*http.Response, error) {
			sentBody = r.Body
			sent, _ = io.ReadAll(r.Body)
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: io.NopCloser(strings.NewReader("data: [DONE]\n\n")), Request: r}, nil
		}), opts...)
		var passed io.ReadCloser
		h := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			passed = r.Body
			out := r.Clone(r.Context())
			out.URL.Scheme, out.URL.Host, out.RequestURI = "http", "upstream", ""
			resp, err := tr.RoundTrip(out)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(w, resp.Body)
			_ = resp.Body.Close()
		}), engineFor)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		if len(models) != 2 || models[0] != "qwen" || models[1] != "qwen" {
			t.Errorf("include_usage %v: models %q, want qwen on both sides", include, models)
		}
		if !include && (sentBody != passed || string(sent) != body) {
			t.Errorf("the transport sent %q (the handler's body: %v), want the handler's body, unread, %q", sent, sentBody == passed, body)
		}
		if include && !bytes.Contains(sent, []byte(`"include_usage":true`)) {
			t.Errorf("the transport sent %q, want it asked for usage", sent)
		}
	}
}

// closeCounter is a client's request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// Through an httputil.ReverseProxy whose Rewrite calls ForwardBody, the
// transport gets the body the handler read, not ReverseProxy's wrapper of
// it: it sends it without reading it again, the upstream gets the client's
// bytes and length, and closing it leaves the client's body open. Without
// ForwardBody the transport reads ReverseProxy's wrapper itself.
func TestForwardBody(t *testing.T) {
	e := newEngine(t)
	const body = `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
	for _, forward := range []bool{true, false} {
		var models []string
		engineFor := WithEngineFor(func(m string) *instrument.Engine {
			models = append(models, m)
			return e
		})
		var sent []byte
		var length int64
		var unread bool
		tr := NewTransport(roundTrip(func(r *http.Request) (*http.Response, error) {
			hb, ok := r.Body.(*heldBody)
			_, closesNothing := hb.body.(closesNothing)
			unread = ok && closesNothing // the forwarded body itself, not the transport's read of it
			sent, _ = io.ReadAll(r.Body)
			length = r.ContentLength
			_ = r.Body.Close()
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(`{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}]}`)), Request: r}, nil
		}), engineFor)
		upstream := &url.URL{Scheme: "http", Host: "upstream"}
		rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) {
			if forward {
				ForwardBody(pr)
			}
			pr.SetURL(upstream)
		}}
		client := &closeCounter{Reader: strings.NewReader(body)}
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Body, r.ContentLength = client, int64(len(body))
		w := httptest.NewRecorder()
		NewHandler(rp, engineFor).ServeHTTP(w, r)
		if w.Code != http.StatusOK || string(sent) != body || length != int64(len(body)) {
			t.Errorf("forward %v: status %d, upstream got %q (Content-Length %d), want 200 and %q", forward, w.Code, sent, length, body)
		}
		if unread != forward {
			t.Errorf("forward %v: the transport sent the handler's body unread: %v", forward, unread)
		}
		if len(models) != 2 || models[0] != "qwen" || models[1] != "qwen" {
			t.Errorf("forward %v: models %q, want qwen on both sides", forward, models)
		}
		if forward && client.closed != 0 {
			t.Errorf("the forwarded body's Close closed the client's body (%d)", client.closed)
		}
	}
}

// ForwardBody leaves any body but one the handler read whole and passed on
// unread as ReverseProxy set it: one beyond WithMaxRequestBody, one the
// handler's next replaced, one partly read, none.
func TestForwardBodyLeavesOthers(t *testing.T) {
	e := newEngine(t)
	const body = `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
	cases := []struct {
		name  string
		opts  []Option
		body  string
		alter func(r *http.Request)
	}{
		{"beyond the limit", []Option{WithMaxRequestBody(16)}, body, nil},
		{"replaced", nil, body, func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader(body)) }},
		{"partly read", nil, body, func(r *http.Request) { _, _ = r.Body.Read(make([]byte, 4)) }},
		{"none", nil, "", nil},
	}
	for _, c := range cases {
		var kept bool
		h := NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.alter != nil {
				c.alter(r)
			}
			out := r.Clone(r.Context())
			if c.body == "" {
				out.Body = nil
			}
			pr := &httputil.ProxyRequest{In: r, Out: out}
			before := pr.Out.Body
			ForwardBody(pr)
			kept = pr.Out.Body == before
		}), append(c.opts, WithEngine(e))...)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(c.body)))
		if !kept {
			t.Errorf("%s: ForwardBody changed the body", c.name)
		}
	}
}

// A request body whose values are dropped (a max_tokens beyond any
// server's bound) is reported once, by the handler that read it: the
// transport it forwards the body to takes what the handler learned and does
// not report it again.
func TestDroppedReportedOnce(t *testing.T) {
	e := newEngine(t)
	var reports []error
	opts := []Option{WithEngine(e), WithErrorHandler(func(err error) { reports = append(reports, err) })}
	tr := NewTransport(roundTrip(func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}]}`)), Request: r}, nil
	}), opts...)
	upstream := &url.URL{Scheme: "http", Host: "upstream"}
	rp := &httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) {
		ForwardBody(pr)
		pr.SetURL(upstream)
	}}
	body := `{"model":"qwen","messages":[],"max_tokens":` + strconv.FormatInt(maxCount+1, 10) + `}`
	NewHandler(rp, opts...).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	if len(reports) != 1 || !errors.Is(reports[0], ErrDropped) {
		t.Errorf("reported %v, want ErrDropped once", reports)
	}
}
