package main

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/contentcoding"
)

// encodedEvents are the events of a streamed chat completion that asked
// for usage; the client that did not ask gets all but the usage event.
var encodedEvents = []string{
	"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"e1\"},\"finish_reason\":null}]}\n\n",
	"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"e2\"},\"finish_reason\":\"stop\"}]}\n\n",
	"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\n",
	"data: [DONE]\n\n",
}

// heldLimit is how long the upstream waits for the client to read the
// first event before it goes on: far beyond any delay a busy machine adds.
const heldLimit = 10 * time.Second

// encoder is a streaming Content-Encoding writer with Flush.
type encoder interface {
	io.WriteCloser
	Flush() error
}

var encoders = map[string]func(io.Writer) encoder{
	"gzip":    func(w io.Writer) encoder { return gzip.NewWriter(w) },
	"deflate": func(w io.Writer) encoder { return zlib.NewWriter(w) },
	"raw deflate": func(w io.Writer) encoder {
		fw, _ := flate.NewWriter(w, flate.DefaultCompression)
		return fw
	},
}

// encodedUpstream streams encodedEvents in encoding (a key of encoders;
// when honour is set, only if the request's Accept-Encoding names it),
// flushing each event, and after the first waits until the test has read
// it (read) or heldLimit passed (then it reports the event held on held).
// It sends the Accept-Encoding it got on accepted.
func encodedUpstream(t *testing.T, encoding string, honour bool, read <-chan struct{}, held chan<- bool, accepted chan<- string) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		accepted <- r.Header.Get("Accept-Encoding")
		header := strings.Fields(encoding)[0] // "raw deflate" is sent as deflate
		if header == "raw" {
			header = "deflate"
		}
		w.Header().Set("Content-Type", "text/event-stream")
		var out io.Writer = w
		flush := func() { http.NewResponseController(w).Flush() }
		if !honour || strings.Contains(r.Header.Get("Accept-Encoding"), header) {
			w.Header().Set("Content-Encoding", header)
			enc := encoders[encoding](w)
			defer enc.Close()
			out, flush = enc, func() { _ = enc.Flush(); http.NewResponseController(w).Flush() }
		}
		for i, e := range encodedEvents {
			_, _ = io.WriteString(out, e)
			flush()
			if i == 0 {
				select {
				case <-read:
					held <- false
				case <-time.After(heldLimit):
					held <- true
				}
			}
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// With -include-usage, a streamed request that did not ask for usage gets
// each event as soon as the upstream sends it, and no usage chunk, whatever
// the upstream's encoding: the upstream is asked for identity; an upstream
// that encodes all the same (gzip, deflate zlib-wrapped or raw) has its
// stream decoded for the client. The proxy records the stream's usage.
func TestIncludeUsageEncodedStream(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		encoding string
		honour   bool // the upstream encodes only when the request accepts it
	}{
		{"gzip", true}, {"deflate", true},
		{"gzip", false}, {"deflate", false}, {"raw deflate", false},
	} {
		t.Run(fmt.Sprintf("%s honour=%v", c.encoding, c.honour), func(t *testing.T) {
			read, held, accepted := make(chan struct{}), make(chan bool, 1), make(chan string, 1)
			up := encodedUpstream(t, c.encoding, c.honour, read, held, accepted)
			p := startProxy(t, nil, "-upstream", up.URL, "-include-usage")
			req, _ := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
			req.Header.Set("Accept-Encoding", "gzip, deflate") // as the OpenAI Python SDK sends it
			resp, err := http.DefaultTransport.RoundTrip(req)  // which leaves the body as it came
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := <-accepted; got != "identity" {
				t.Errorf("the upstream was asked for Accept-Encoding %q, want identity", got)
			}
			body := io.Reader(resp.Body)
			if enc := resp.Header.Get("Content-Encoding"); !contentcoding.Identity(enc) {
				t.Errorf("the client got Content-Encoding %q", enc)
				br := bufio.NewReader(resp.Body)
				if body, err = contentcoding.NewReader(enc, br); err != nil {
					t.Fatal(err)
				}
			}
			var got bytes.Buffer
			buf := make([]byte, 512)
			for !strings.Contains(got.String(), `"e1"`) {
				n, err := body.Read(buf)
				got.Write(buf[:n])
				if err != nil {
					t.Fatalf("before the first event: %v after %q", err, got.String())
				}
			}
			close(read)
			if <-held {
				t.Errorf("the first event reached the client only after the upstream waited %v for it", heldLimit)
			}
			rest, err := io.ReadAll(body)
			got.Write(rest)
			want := encodedEvents[0] + encodedEvents[1] + encodedEvents[3]
			if err != nil || got.String() != want {
				t.Errorf("client got %q (%v), want %q", got.String(), err, want)
			}
			waitFor(t, func() (bool, string) {
				s := p.scrape(t)
				stop, _ := value(s, "vllm:request_success_total", "model_name", "m", "finished_reason", "stop")
				gen, _ := value(s, "vllm:generation_tokens_total", "model_name", "m")
				return stop == 1 && gen == 2, fmt.Sprintf("stop %v, generation tokens %v", stop, gen)
			})
		})
	}
}

// With -include-usage, a stream in an encoding the proxy does not decode
// (br here) passes through as the upstream sent it, usage chunk included,
// and the proxy says so once in its log.
func TestIncludeUsageOpaqueEncoding(t *testing.T) {
	sent := []byte(strings.Join(encodedEvents, "")) // what a br stream's bytes are does not matter: they pass
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "br")
		writeSplit(w, sent, 50)
	}))
	defer up.Close()
	p := startProxy(t, nil, "-upstream", up.URL, "-include-usage")
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"m","stream":true}`))
		req.Header.Set("Accept-Encoding", "br")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, sent) || resp.Header.Get("Content-Encoding") != "br" {
			t.Errorf("client got %q (%q, %v), upstream sent %q", got, resp.Header.Get("Content-Encoding"), err, sent)
		}
	}
	if n := strings.Count(p.logs.String(), "encoding the proxy does not decode"); n != 1 {
		t.Errorf("%d warnings of the encoding, want 1:\n%s", n, p.logs)
	}
}

// The stripper decodes gzip and deflate streams in any split, sends them
// without Content-Encoding, and fails a Write of bytes that do not decode
// (ReverseProxy then cuts the client's connection).
func TestStripWriterDecodes(t *testing.T) {
	want := encodedEvents[0] + encodedEvents[1] + encodedEvents[3]
	for name, newEnc := range encoders {
		var b bytes.Buffer
		enc := newEnc(&b)
		for _, e := range encodedEvents {
			_, _ = io.WriteString(enc, e)
			_ = enc.Flush()
		}
		_ = enc.Close()
		header := strings.TrimPrefix(name, "raw ")
		for _, size := range []int{1, 3, 1 << 30} {
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "text/event-stream")
			rec.Header().Set("Content-Encoding", header)
			sw := &stripWriter{w: rec}
			writeSplit(sw, b.Bytes(), size)
			sw.finish()
			if rec.Body.String() != want || rec.Header().Get("Content-Encoding") != "" {
				t.Errorf("%s split %d: %q, Content-Encoding %q", name, size, rec.Body.String(), rec.Header().Get("Content-Encoding"))
			}
		}
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "text/event-stream")
		rec.Header().Set("Content-Encoding", header)
		sw := &stripWriter{w: rec}
		if _, err := sw.Write([]byte(want)); err == nil {
			t.Errorf("%s: bytes not of the encoding written without error", name)
		}
		sw.finish()
	}
}
