package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// withoutUsageEvent is a recorded stream without its usage-only event (the
// one whose chunk has "choices":[] and a usage): what the server sends a
// client that did not ask for usage, on the servers whose fixtures show no
// other difference. It fails the test when there is not exactly one.
func withoutUsageEvent(t *testing.T, name string, body []byte) []byte {
	t.Helper()
	events := strings.SplitAfter(string(body), "\n\n")
	var out []string
	n := 0
	for _, e := range events {
		if strings.Contains(e, `"choices":[]`) && strings.Contains(e, `"usage":{`) {
			n++
			continue
		}
		out = append(out, e)
	}
	if n != 1 {
		t.Fatalf("%s: %d usage-only events", name, n)
	}
	return []byte(strings.Join(out, ""))
}

// With -include-usage, a streaming client that did not ask for usage gets
// exactly the bytes the upstream would have sent it without usage, while
// the proxy records the usage the rewritten request brought; a client that
// asked gets the usage chunk. Streams of vLLM, SGLang, Ollama and llama.cpp,
// written in pieces of 1, 7 and all bytes.
func TestIncludeUsageStripped(t *testing.T) {
	t.Parallel()
	var streams []fixture
	for _, f := range loadFixtures(t) {
		// The usage streams that end well, of chat (all four servers) and of
		// vLLM's completions: Ollama's and SGLang's completions streams carry
		// a usage field on every chunk when asked (see docs/proxy.md). The other
		// APIs take no stream_options (TestIncludeUsageOtherAPIs).
		if f.Stream && f.Outcome != "error" && f.Completion != nil && (f.Endpoint == "chat" || f.Server == "vllm" && f.Endpoint == "completions") {
			streams = append(streams, f)
		}
	}
	if len(streams) < 5 {
		t.Fatalf("%d usage streams in the manifest", len(streams))
	}
	type asked struct{ usage bool }
	seen := make(chan asked, 1)
	var cur fixture
	var split int
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			t.Errorf("upstream got %q: %v", b, err)
		}
		usage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		seen <- asked{usage}
		body := cur.body(t)
		if !usage {
			body = withoutUsageEvent(t, cur.File, body)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeSplit(w, body, split)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-include-usage", "-max-models", "100")
	models := map[string][2]float64{} // model: generation and prompt tokens
	for i, f := range streams {
		var req map[string]any
		if err := json.Unmarshal(f.Request, &req); err != nil {
			t.Fatal(err)
		}
		delete(req, "stream_options")
		sizes := []int{7, 1 << 20}
		if i == 0 {
			sizes = append(sizes, 1) // byte by byte: slow under -race, once is enough
		}
		for j, size := range sizes {
			model := fmt.Sprintf("s%d-%d", i, j)
			req["model"] = model
			b, _ := json.Marshal(req)
			cur, split = f, size
			code, got := post(t, p.url(f.Path), b)
			if a := <-seen; !a.usage {
				t.Errorf("%s: the upstream was not asked for usage", f.File)
			}
			want := withoutUsageEvent(t, f.File, f.body(t))
			if code != 200 || !bytes.Equal(got, want) {
				t.Errorf("%s split %d: client got %d\n%s\nwant\n%s", f.File, size, code, got, want)
			}
			models[model] = [2]float64{float64(*f.Completion), float64(*f.Prompt)}
		}
		// A client that asked for usage gets the stream whole.
		cur, split = f, 7
		code, got := post(t, p.url(f.Path), f.Request)
		if a := <-seen; !a.usage {
			t.Errorf("%s: usage asked by the client not passed on", f.File)
		}
		if code != 200 || !bytes.Equal(got, f.body(t)) {
			t.Errorf("%s asked: client got %d\n%s", f.File, code, got)
		}
	}
	s := p.scrape(t)
	for model, want := range models {
		if v := mustValue(t, s, "vllm:generation_tokens_total", "model_name", model); v != want[0] {
			t.Errorf("%s: generation tokens %v, want %v", model, v, want[0])
		}
		if v := mustValue(t, s, "vllm:prompt_tokens_total", "model_name", model); v != want[1] {
			t.Errorf("%s: prompt tokens %v, want %v", model, v, want[1])
		}
	}
}

// With -include-usage, the streaming APIs that take no stream_options
// (Responses, Anthropic Messages, Ollama's native API: each reports usage
// unasked) pass through unchanged both ways, and their usage is recorded.
func TestIncludeUsageOtherAPIs(t *testing.T) {
	var streams []fixture
	for _, f := range loadFixtures(t) {
		if f.Stream && f.Outcome != "error" && f.Completion != nil && f.Endpoint != "chat" && f.Endpoint != "completions" {
			streams = append(streams, f)
		}
	}
	if len(streams) < 3 {
		t.Fatalf("%d streams of other APIs in the manifest", len(streams))
	}
	got := make(chan []byte, 1)
	var cur fixture
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
		w.Header().Set("Content-Type", cur.contentType())
		writeSplit(w, cur.body(t), 7)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-include-usage", "-max-models", "100")
	for i, f := range streams {
		var req map[string]any
		if err := json.Unmarshal(f.Request, &req); err != nil {
			t.Fatal(err)
		}
		req["model"] = fmt.Sprintf("o%d", i)
		body, _ := json.Marshal(req)
		cur = f
		code, resp := post(t, p.url(f.Path), body)
		if b := <-got; !bytes.Equal(b, body) {
			t.Errorf("%s: upstream got %s, client sent %s", f.File, b, body)
		}
		if code != 200 || !bytes.Equal(resp, f.body(t)) {
			t.Errorf("%s: client got %d\n%s", f.File, code, resp)
		}
	}
	s := p.scrape(t)
	for i, f := range streams {
		model := fmt.Sprintf("o%d", i)
		if v := mustValue(t, s, "vllm:generation_tokens_total", "model_name", model); v != float64(*f.Completion) {
			t.Errorf("%s: generation tokens %v, want %d", f.File, v, *f.Completion)
		}
	}
}

// Without -include-usage the request body reaches the upstream unchanged.
func TestNoIncludeUsageByDefault(t *testing.T) {
	got := make(chan []byte, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL)
	body := []byte(`{"model":"m",  "stream":true}`)
	post(t, p.url("/v1/chat/completions"), body)
	if b := <-got; !bytes.Equal(b, body) {
		t.Errorf("upstream got %q, client sent %q", b, body)
	}
}

func TestAskUsage(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		want map[string]any
	}{
		{`{"stream":true}`, true, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":true,"stream_options":{"continuous_usage_stats":false}}`, true,
			map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": false}}},
		{`{"stream":true,"stream_options":null}`, true, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":true,"stream_options":{"include_usage":false}}`, true, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":true,"stream_options":{"include_usage":true}}`, false, nil},
		{`{"stream":true,"stream_options":{"include_usage":"yes"}}`, false, nil},
		{`{"stream":true,"stream_options":{"include_usage":1}}`, false, nil},
		{`{"stream":true,"stream_options":{"include_usage":"maybe"}}`, false, nil}, // the server's to refuse
		{`{"stream":true,"stream_options":{"include_usage":null}}`, true, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":true,"stream_options":{"include_usage":"no"}}`, true, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":true,"stream_options":{"include_usage":0}}`, true, map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":false}`, false, nil},
		{`{}`, false, nil},
		{`{"stream":"true"}`, true, map[string]any{"stream": "true", "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":1}`, true, map[string]any{"stream": float64(1), "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":"Yes"}`, true, map[string]any{"stream": "Yes", "stream_options": map[string]any{"include_usage": true}}},
		{`{"stream":"no"}`, false, nil},
		{`{"stream":0}`, false, nil},
		{`{"stream":"maybe"}`, false, nil},
		{`{"stream":true,"stream_options":[]}`, false, nil},
		{`[1]`, false, nil},
		{`not json`, false, nil},
	} {
		out, ok := askUsage([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%s: ok %v", c.in, ok)
			continue
		}
		if !ok {
			continue
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %s", c.in, out)
		}
	}
}

// The stripper removes only usage-only data events, holds at most
// maxEvent bytes, and passes everything else on as it is.
func TestStripWriter(t *testing.T) {
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n"
	long := "data: {\"choices\":[],\"usage\":{\"x\":\"" + strings.Repeat("a", maxEvent) + "\"}}\n\n"
	for _, c := range []struct{ name, in, want string }{
		{"crlf", "data: {\"choices\":[{}]}\r\n\r\n" + strings.ReplaceAll(usage, "\n", "\r\n") + "data: [DONE]\r\n\r\n", "data: {\"choices\":[{}]}\r\n\r\ndata: [DONE]\r\n\r\n"},
		{"usage null kept", "data: {\"choices\":[],\"usage\":null}\n\n", "data: {\"choices\":[],\"usage\":null}\n\n"},
		{"choices kept", "data: {\"choices\":[{\"index\":0}],\"usage\":{\"a\":1}}\n\n", "data: {\"choices\":[{\"index\":0}],\"usage\":{\"a\":1}}\n\n"},
		{"other field kept", "event: x\n" + usage, "event: x\n" + usage},
		{"too long passed", long, long},
		{"unterminated", "data: {\"choices\":[{}]}", "data: {\"choices\":[{}]}"},
		{"unterminated usage dropped", strings.TrimSuffix(usage, "\n\n"), ""},
		{"removed", usage + "data: [DONE]\n\n", "data: [DONE]\n\n"},
	} {
		for _, size := range []int{1, 3, 1 << 30} {
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "text/event-stream")
			sw := &stripWriter{w: rec}
			writeSplit(sw, []byte(c.in), size)
			sw.finish()
			if rec.Body.String() != c.want {
				t.Errorf("%s split %d: %q", c.name, size, rec.Body.String())
			}
		}
	}
	// Any type: a stream sent as application/json is stripped too; a JSON
	// document, held up to maxEvent bytes, passes on unchanged.
	doc := `{"choices":[],"usage":{"prompt_tokens":1}}`
	for _, ct := range []string{"application/json", ""} {
		for in, want := range map[string]string{usage + "data: [DONE]\n\n": "data: [DONE]\n\n", doc: doc} {
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", ct)
			sw := &stripWriter{w: rec}
			writeSplit(sw, []byte(in), 5)
			sw.finish()
			if rec.Body.String() != want {
				t.Errorf("%q: %q, want %q", ct, rec.Body.String(), want)
			}
		}
	}
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "text/event-stream")
	sw := &stripWriter{w: rec}
	sw.WriteHeader(http.StatusBadRequest)
	writeSplit(sw, []byte(usage), 5)
	if rec.Body.String() != usage {
		t.Errorf("400: %q", rec.Body.String())
	}
}

// With -include-usage, a body longer than -max-request-body is passed on
// whole and unchanged (not rewritten, so nothing is stripped), and the
// proxy holds no more of it than the limit.
func TestIncludeUsageLongBody(t *testing.T) {
	got := make(chan []byte, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-include-usage", "-max-request-body", "1024")
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`)
	_, resp := post(t, p.url("/v1/chat/completions"), body)
	if b := <-got; !bytes.Equal(b, body) {
		t.Errorf("upstream got %d bytes, not the client's %d", len(b), len(body))
	}
	if !bytes.Contains(resp, []byte(`"usage"`)) {
		t.Errorf("the usage chunk of a request not rewritten was removed: %q", resp)
	}
}

// eventEnd, which jumps from line end to line end, ends the same events as
// reading byte by byte does (eventEndByByte), over every split of random
// streams of '\n', '\r' and other bytes.
func TestEventEndLineByLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("\n\r a")
	for range 2000 {
		in := make([]byte, rng.IntN(40))
		for i := range in {
			in[i] = alphabet[rng.IntN(len(alphabet))]
		}
		size := 1 + rng.IntN(8)
		var got, want stripWriter
		for p := in; len(p) > 0; {
			piece := p[:min(size, len(p))]
			p = p[len(piece):]
			for len(piece) > 0 {
				g, w := got.eventEnd(piece), eventEndByByte(&want, piece)
				if g != w || got.lineEmpty != want.lineEmpty {
					t.Fatalf("%q in pieces of %d: end %d (line empty %v), byte by byte %d (%v)", in, size, g, got.lineEmpty, w, want.lineEmpty)
				}
				if g < 0 {
					break
				}
				piece = piece[g:]
			}
		}
	}
}

// eventEndByByte is eventEnd as a byte-by-byte state machine: the reference.
func eventEndByByte(s *stripWriter, p []byte) int {
	for i, b := range p {
		switch b {
		case '\n':
			if s.lineEmpty {
				s.lineEmpty = false
				return i + 1
			}
			s.lineEmpty = true
		case '\r':
		default:
			s.lineEmpty = false
		}
	}
	return -1
}

// With -include-usage, a stream declared with any of pydantic's lax true
// values ("stream": 1, "true", "yes", ...), which vLLM streams and
// openaihttp records as a stream, is asked for usage as "stream": true is:
// its tokens are recorded and its client gets no usage chunk. A lax false
// value is not a stream and passes on as it came.
func TestIncludeUsageLaxStream(t *testing.T) {
	t.Parallel()
	var f fixture
	for _, c := range loadFixtures(t) {
		if c.File == "vllm_chat_stream_usage_cached.sse" {
			f = c
		}
	}
	if f.File == "" {
		t.Fatal("no fixture vllm_chat_stream_usage_cached.sse")
	}
	asked := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		asked <- string(b)
		body := f.body(t)
		if !strings.Contains(string(b), `"include_usage":true`) {
			body = withoutUsageEvent(t, f.File, body)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-include-usage", "-max-models", "100")
	want := withoutUsageEvent(t, f.File, f.body(t))
	streams := []string{`true`, `1`, `1.0`, `"true"`, `"True"`, `"1"`, `"yes"`, `"YES"`, `"on"`, `"t"`, `"y"`}
	for i, v := range streams {
		body := fmt.Sprintf(`{"model":"lax%d","messages":[{"role":"user","content":"hi"}],"stream":%s}`, i, v)
		code, got := post(t, p.url(f.Path), []byte(body))
		if b := <-asked; !strings.Contains(b, `"include_usage":true`) {
			t.Errorf("stream %s: the upstream was not asked for usage: %s", v, b)
		}
		if code != 200 || !bytes.Equal(got, want) {
			t.Errorf("stream %s: client got %d\n%s", v, code, got)
		}
	}
	for _, v := range []string{`false`, `0`, `"false"`, `"0"`, `"no"`, `"off"`, `"f"`, `"n"`, `"maybe"`, `2`} {
		body := fmt.Sprintf(`{"model":"m","stream":%s}`, v)
		if _, _ = post(t, p.url(f.Path), []byte(body)); <-asked != body {
			t.Errorf("stream %s: the body was rewritten", v)
		}
	}
	s := p.scrape(t)
	for i, v := range streams {
		if got := mustValue(t, s, "vllm:generation_tokens_total", "model_name", fmt.Sprintf("lax%d", i)); got != float64(*f.Completion) {
			t.Errorf("stream %s: generation tokens %v, want %d", v, got, *f.Completion)
		}
	}
}
