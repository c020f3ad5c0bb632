package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A body that starts with a UTF-8 byte order mark, which Python's
// json.loads on bytes (vLLM's server) accepts, is rewritten as any other,
// without the mark (as openaihttp.AskUsage drops it); a mark after
// whitespace, or a second one, is refused by Python, and such a body is
// not rewritten.
func TestAskUsageBOM(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"\xef\xbb\xbf{\"stream\":true}", true},
		{"\xef\xbb\xbf{\"stream\":true,\"stream_options\":{\"include_usage\":true}}", false}, // asked already
		{" \xef\xbb\xbf{\"stream\":true}", false},
		{"\xef\xbb\xbf\xef\xbb\xbf{\"stream\":true}", false},
	} {
		out, ok := askUsage([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%q: ok %v, want %v", c.in, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		var got struct {
			Stream        bool
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(out, &got); err != nil || !got.Stream || !got.StreamOptions.IncludeUsage {
			t.Errorf("%q: rewritten %q (%v)", c.in, out, err)
		}
	}
}

// Through the proxy with -include-usage: a streamed request whose body
// starts with a byte order mark reaches the upstream asking for usage,
// with a Content-Length that fits; its client gets no usage chunk, and its
// tokens are counted.
func TestIncludeUsageBOMBody(t *testing.T) {
	type seen struct {
		body   []byte
		length int64
	}
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{b, r.ContentLength}
		w.Header().Set("Content-Type", "text/event-stream")
		writeSplit(w, []byte(strings.Join(encodedEvents, "")), 1<<20)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-include-usage")
	_, resp := post(t, p.url("/v1/chat/completions"), []byte("\xef\xbb\xbf{\"model\":\"m\",\"stream\":true,\"messages\":[]}"))
	s := <-got
	if !bytes.Contains(s.body, []byte(`"include_usage":true`)) || bytes.HasPrefix(s.body, []byte("\xef\xbb\xbf")) || s.length != int64(len(s.body)) {
		t.Errorf("upstream got %q (Content-Length %d)", s.body, s.length)
	}
	if want := encodedEvents[0] + encodedEvents[1] + encodedEvents[3]; string(resp) != want {
		t.Errorf("client got %q, want %q", resp, want)
	}
	waitFor(t, func() (bool, string) {
		gen, _ := value(p.scrape(t), "vllm:generation_tokens_total", "model_name", "m")
		return gen == 2, "generation tokens not counted"
	})
}
