package openaihttp

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
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
func newEngine(t testing.TB) *instrument.Engine {
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(noop.NewMeterProvider()), instrument.WithModelName("m"))
	if err != nil {
		t.Fatal(err)
	}
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
