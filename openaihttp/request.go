package openaihttp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/infermetrics/infermetrics/stats"
)

// requestInfo is what the bounded read of a request body told.
type requestInfo struct {
	model     string
	stream    bool
	n         int64
	maxTokens int64
}

// instrumented reports a request this package observes, a POST to an
// OpenAI-compatible completions endpoint, and its GenAI operation: chat for
// /v1/chat/completions, text_completion for /v1/completions.
func instrumented(r *http.Request) (stats.Operation, bool) {
	if r.Method != http.MethodPost || r.URL == nil {
		return 0, false
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case strings.HasSuffix(p, "/v1/chat/completions"):
		return stats.OperationChat, true
	case strings.HasSuffix(p, "/v1/completions"):
		return stats.OperationTextCompletion, true
	}
	return 0, false
}

// readBody reads at most limit bytes of the request body to learn its
// model, stream, n and max_tokens, and returns the body to pass on: the
// bytes read followed by the rest, unchanged, or, with includeUsage, a
// streaming request that did not ask for usage rewritten to ask for it
// (only a body read whole: a longer one is passed on unchanged). The
// caller sets the returned body, length and GetBody on the request it
// sends.
func readBody(r *http.Request, limit int, includeUsage bool) (info requestInfo, body io.ReadCloser, length int64, rewritten []byte) {
	if r.Body == nil || r.Body == http.NoBody {
		return info, r.Body, r.ContentLength, nil
	}
	head := make([]byte, 0, min(max(r.ContentLength, 512), int64(limit)+1))
	buf := bytes.NewBuffer(head)
	_, err := io.Copy(buf, io.LimitReader(r.Body, int64(limit)+1))
	head = buf.Bytes()
	whole := err == nil && len(head) <= limit
	if len(head) > limit {
		head = head[:limit+1]
	}
	var s jsonScan
	s.feed(head[:min(len(head), limit)])
	d := &s.d
	info = requestInfo{model: string(d.model[:d.modelLen]), stream: d.stream, n: d.n, maxTokens: d.maxTokens}
	if whole && includeUsage && d.stream && !d.includeUsage {
		if b, ok := askUsage(head); ok {
			return info, io.NopCloser(bytes.NewReader(b)), int64(len(b)), b
		}
	}
	if err != nil {
		// The read failed: pass on what was read and the error, as the
		// handler would have seen it.
		return info, readCloser{io.MultiReader(bytes.NewReader(head), errReader{err}), r.Body}, r.ContentLength, nil
	}
	return info, readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}, r.ContentLength, nil
}

// askUsage returns a request body with stream_options.include_usage set.
func askUsage(body []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return nil, false
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := m["stream_options"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil || opts == nil {
			return nil, false
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, false
	}
	m["stream_options"] = raw
	out, err := json.Marshal(m)
	return out, err == nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// setLength sets a request's Content-Length after a rewrite.
func setLength(r *http.Request, n int64) {
	r.ContentLength = n
	if r.Header.Get("Content-Length") != "" {
		r.Header.Set("Content-Length", strconv.FormatInt(n, 10))
	}
}
