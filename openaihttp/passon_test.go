package openaihttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
)

// sent is what a request carried where it was passed on.
type sent struct {
	body    string
	length  int64
	header  string // its Content-Length header
	getBody string // what GetBody returned ("" when nil)
}

func sentOf(t *testing.T, r *http.Request) sent {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("reading the body passed on: %v", err)
	}
	s := sent{body: string(b), length: r.ContentLength, header: r.Header.Get("Content-Length")}
	if r.GetBody != nil {
		rc, err := r.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		g, _ := io.ReadAll(rc)
		s.getBody = string(g)
	}
	return s
}

// onlyModel records the requests for model on c's Engine, and no other.
func onlyModel(c *rec) openaihttp.Option {
	return openaihttp.WithEngineFor(func(m string) *instrument.Engine {
		if m == model {
			return c.e
		}
		return nil
	})
}

// With WithIncludeUsage, a streaming request for a model WithEngineFor
// does not record reaches an httputil.ReverseProxy's upstream exactly as
// the client sent it, and the client gets the upstream's stream; one for a
// recorded model is rewritten, with a Content-Length that fits.
func TestIncludeUsageUnrecordedModelPassedOn(t *testing.T) {
	got := make(chan sent, 1)
	stream := chunk("a") + finishChunk("stop") + done
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- sentOf(t, r)
		sseHandler(chunk("a"), finishChunk("stop"), done)(w, r)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	c := newRec(t)
	h := openaihttp.NewHandler(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }},
		openaihttp.WithIncludeUsage(), onlyModel(c))
	srv := httptest.NewServer(h)
	defer srv.Close()

	other := strings.Replace(streamBody, model, "not-recorded", 1)
	resp := post(t, srv.URL+"/v1/chat/completions", other)
	body := readAll(t, resp)
	s := <-got
	if s.body != other || s.length != int64(len(other)) {
		t.Errorf("upstream got %d bytes (Content-Length %d): %q, client sent %q", len(s.body), s.length, s.body, other)
	}
	if resp.StatusCode != http.StatusOK || body != stream {
		t.Errorf("client got %d %q", resp.StatusCode, body)
	}

	resp = post(t, srv.URL+"/v1/chat/completions", streamBody)
	readAll(t, resp)
	s = <-got
	if !strings.Contains(s.body, `"include_usage":true`) || s.length != int64(len(s.body)) || resp.StatusCode != http.StatusOK {
		t.Errorf("recorded model: upstream got Content-Length %d, %q; client %d", s.length, s.body, resp.StatusCode)
	}
	srv.Close()
	c.want("stop", 0, 0, 0) // the recorded one only
}

// A request not recorded reaches next, and a transport's base, with its
// bytes, Content-Length and GetBody as it came; a rewritten one with all
// three rewritten.
func TestUnrecordedRequestUnchanged(t *testing.T) {
	c := newRec(t)
	newReq := func(body string) *http.Request {
		r, err := http.NewRequest(http.MethodPost, "http://upstream/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return r
	}
	other := strings.Replace(streamBody, model, "not-recorded", 1)
	check := func(side string, s sent, recorded bool) {
		t.Helper()
		want := sent{body: other, length: int64(len(other)), header: strconv.Itoa(len(other)), getBody: other}
		if recorded {
			if !strings.Contains(s.body, `"include_usage":true`) {
				t.Errorf("%s: a recorded request was not rewritten: %q", side, s.body)
			}
			want = sent{body: s.body, length: int64(len(s.body)), header: strconv.Itoa(len(s.body)), getBody: s.body}
		}
		if s != want {
			t.Errorf("%s: passed on %+v, want %+v", side, s, want)
		}
	}

	var passed sent
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passed = sentOf(t, r)
		sseHandler(finishChunk("stop"), done)(w, r)
	}), openaihttp.WithIncludeUsage(), onlyModel(c))
	h.ServeHTTP(httptest.NewRecorder(), newReq(other))
	check("handler", passed, false)
	streamed := strings.Replace(other, "not-recorded", model, 1)
	h.ServeHTTP(httptest.NewRecorder(), newReq(streamed))
	check("handler, recorded", passed, true)

	tr := openaihttp.NewTransport(roundTripper(func(r *http.Request) (*http.Response, error) {
		passed = sentOf(t, r)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(bytes.NewReader([]byte(done))), Request: r}, nil
	}), openaihttp.WithIncludeUsage(), onlyModel(c))
	for i, body := range []string{other, streamed} {
		resp, err := tr.RoundTrip(newReq(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		check("transport", passed, i == 1)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// serverBody reads as a server's request body: once closed, a Read fails.
type serverBody struct {
	r      io.Reader
	closed bool
}

func (b *serverBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.Read(p)
}

func (b *serverBody) Close() error {
	b.closed = true
	return nil
}

// The body the handler passes on ends once: read to its end and closed, a
// Read gives io.EOF again, not the error of the body it read, closed.
// net/http closes a server's request body when an HTTP/1 response starts,
// and http.Transport may read a body it sends once more past its end then:
// an error there makes it close the upstream's connection, cutting the
// response (seen as "use of closed network connection" in
// TestCorpusThroughProxy).
func TestPassedOnBodyEndsOnce(t *testing.T) {
	c := newRec(t)
	var after error
	h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_ = r.Body.Close()
		_, after = r.Body.Read(make([]byte, 1))
		sseHandler(done)(w, r)
	}), openaihttp.WithEngine(c.e))
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Body = &serverBody{r: strings.NewReader(streamBody)}
	h.ServeHTTP(httptest.NewRecorder(), r)
	if after != io.EOF {
		t.Errorf("a Read past the end of the body passed on: %v, want io.EOF", after)
	}
}
