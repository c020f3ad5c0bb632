package openaihttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// TestHTTP1WriteStyles: through net/http's HTTP/1 writer (the handler's own
// wrapper of it), a response sent by Write, WriteString, io.Copy
// (ReadFrom), or after a Flush through http.ResponseController, is
// observed whole.
func TestHTTP1WriteStyles(t *testing.T) {
	const body = `{"id":"c1","object":"chat.completion","model":"qwen-7b","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`
	for name, send := range map[string]func(w http.ResponseWriter){
		"Write":       func(w http.ResponseWriter) { _, _ = w.Write([]byte(body)) },
		"WriteString": func(w http.ResponseWriter) { _, _ = io.WriteString(w, body) },
		"ReadFrom":    func(w http.ResponseWriter) { _, _ = io.Copy(w, strings.NewReader(body)) },
		"FlushFirst": func(w http.ResponseWriter) {
			_ = http.NewResponseController(w).Flush()
			_, _ = w.Write([]byte(body))
		},
	} {
		c := newRec(t)
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			send(w)
		})
		srv := httptest.NewServer(openaihttp.NewHandler(inner, openaihttp.WithEngine(c.e), openaihttp.WithHTTPMetrics(c.e, nil)))
		got := readAll(t, post(t, srv.URL+"/v1/chat/completions", chatBody))
		srv.Close()
		if got != body {
			t.Fatalf("%s: client got %q", name, got)
		}
		t.Run(name, func(t *testing.T) {
			c.t = t
			c.want("length", 7, 3, 0)
		})
	}
}
