package openaihttp_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// Any request and response bytes, split anywhere, streamed or not: the
// middleware and the transport never panic, pass every byte through and
// record a valid request (an invalid one would reach the error handler).
func FuzzObserve(f *testing.F) {
	f.Add([]byte(streamBody), []byte(chunk("a")+finishChunk("stop")+usageChunk(3, 1, 1)+done), true, 7)
	f.Add([]byte(chatBody), []byte(nonStreamResponse), false, 13)
	f.Add([]byte(`{"model":`), []byte(`data: {"choices":[{"delta":{"content":"\"x\\"}}]}`+"\r\n\r\ndata: [DONE]"), true, 3)
	f.Add([]byte(`[]`), []byte(`{"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":-1}}`), false, 1)
	c := newRec(f)
	f.Fuzz(func(t *testing.T, req, resp []byte, sse bool, split int) {
		ct := "application/json"
		if sse {
			ct = "text/event-stream"
		}
		fail := func(err error) {
			if !errors.Is(err, openaihttp.ErrDropped) { // absurd values are dropped and said
				t.Errorf("recording: %v", err)
			}
		}
		write := func(w io.Writer) {
			for p := resp; len(p) > 0; {
				n := max(1, min(len(p), split%64+1))
				_, _ = w.Write(p[:n])
				p = p[n:]
			}
		}
		h := openaihttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, _ := io.ReadAll(r.Body)
			if !bytes.Equal(got, req) {
				t.Errorf("the handler got %q, want %q", got, req)
			}
			w.Header().Set("Content-Type", ct)
			write(w)
		}), openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(fail), openaihttp.WithMaxRequestBody(split%100))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(req)))
		if !bytes.Equal(w.Body.Bytes(), resp) {
			t.Errorf("the client got %q, want %q", w.Body.Bytes(), resp)
		}

		var buf bytes.Buffer
		write(&buf)
		tr := openaihttp.NewTransport(fixedType{buf.Bytes(), ct}, openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(fail))
		r, _ := http.NewRequest(http.MethodPost, "http://b/v1/completions", bytes.NewReader(req))
		res, err := tr.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if !bytes.Equal(got, resp) {
			t.Errorf("the caller got %q, want %q", got, resp)
		}
	})
}

type fixedType struct {
	body []byte
	ct   string
}

func (f fixedType) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {f.ct}},
		Body: io.NopCloser(bytes.NewReader(f.body)), Request: r}, nil
}
