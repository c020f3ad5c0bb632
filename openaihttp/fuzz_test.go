package openaihttp_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// fuzzPaths are the endpoints of every dialect observed, and one passed
// through.
var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
	"/v1/embeddings", "/rerank", "/api/chat", "/api/generate", "/v1/models"}

// Any request and response bytes, split anywhere, streamed or not, to the
// endpoint of any dialect: the middleware and the transport never panic,
// pass every byte through and record a valid request (an invalid one would
// reach the error handler; absurd values are dropped and reported as
// ErrDropped). The seeds include every fixture, and the fuzz seeds of the
// recorded corpus (FuzzSeeds; TestCorpus replays all of it).
func FuzzObserve(f *testing.F) {
	f.Add([]byte(streamBody), []byte(chunk("a")+finishChunk("stop")+usageChunk(3, 1, 1)+done), true, 7, uint8(0))
	f.Add([]byte(chatBody), []byte(nonStreamResponse), false, 13, uint8(1))
	f.Add([]byte(`{"model":`), []byte(`data: {"choices":[{"delta":{"content":"\"x\\"}}]}`+"\r\n\r\ndata: [DONE]"), true, 3, uint8(0))
	f.Add([]byte(`[]`), []byte(`{"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":-1}}`), false, 1, uint8(0))
	f.Add([]byte(`{"model":"caf\u00e9","stream":"yes","n":2.0,"max_tokens":"7"}`), []byte(`{"done":true,"eval_duration":-1}`), false, 5, uint8(6))
	for i, fx := range loadFixtures(f) {
		body, err := os.ReadFile(filepath.Join("testdata", fx.File))
		if err != nil {
			f.Fatal(err)
		}
		ep := uint8(slices.Index(fuzzPaths, fx.Path))
		f.Add([]byte(fx.Request), body, fx.contentType() == "text/event-stream", i, ep)
	}
	for i, body := range openaihttp.FuzzSeeds(f) { // every fixture, and a part of the recorded corpus
		f.Add([]byte(streamBody), body, bytes.Contains(body, []byte("data:")), i, uint8(i))
	}
	c := newRec(f)
	f.Fuzz(func(t *testing.T, req, resp []byte, sse bool, split int, ep uint8) {
		path := fuzzPaths[int(ep)%len(fuzzPaths)]
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
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(req)))
		if !bytes.Equal(w.Body.Bytes(), resp) {
			t.Errorf("the client got %q, want %q", w.Body.Bytes(), resp)
		}

		var buf bytes.Buffer
		write(&buf)
		tr := openaihttp.NewTransport(fixedType{buf.Bytes(), ct}, openaihttp.WithEngine(c.e), openaihttp.WithErrorHandler(fail))
		r, _ := http.NewRequest(http.MethodPost, "http://b"+path, bytes.NewReader(req))
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
