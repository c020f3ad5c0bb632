package openaihttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/sample"
)

// apiPaths are a path of each API, as a leg is sent to it.
var apiPaths = [...]string{apiChat: "/v1/chat/completions", apiCompletions: "/v1/completions",
	apiResponses: "/v1/responses", apiMessages: "/v1/messages", apiEmbeddings: "/v1/embeddings",
	apiPooling: "/pooling", apiOllamaChat: "/api/chat", apiOllamaGenerate: "/api/generate", apiOllamaEmbed: "/api/embed"}

// pieces is a body read in pieces: each Read gives the next size's bytes
// (2s+1 for a size byte s), or all that is left without sizes.
type pieces struct {
	b     []byte
	sizes []byte
	i     int
}

func (p *pieces) Read(q []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := len(p.b)
	if len(p.sizes) > 0 {
		n = 2*int(p.sizes[p.i%len(p.sizes)]) + 1
		p.i++
	}
	n = copy(q, p.b[:min(n, len(p.b))])
	p.b = p.b[n:]
	return n, nil
}

func (p *pieces) Close() error { return nil }

// Relays: what a handler writes of each read of a leg's body.
const (
	passOn    = iota // the read as it came
	changed          // the read with a byte changed
	preceded         // bytes of its own, then the read
	followed         // the read, then a space
	splitRead        // the read in two writes
	joined           // the read with the next one, in one write
	dropped          // nothing: a leg's body the client does not get
	relays
)

// own are the bytes a handler writes of its own (preceded), and after the
// leg's body.
var own = []byte(": ping\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n")

// relayed is a leg's body read in pieces and written by a handler as plan
// says (a relay per read, in turn), then the handler's own bytes when tail:
// what the handler observed, what an observer reading every byte it wrote
// observes, whether the handler read any byte itself, what the leg
// observed, and what an observer reading every byte the leg read observes.
type relayed struct {
	handler, handlerRef observed
	scanned             bool
	leg, legRef         observed
}

// relay runs a leg to api's path, answering body with content type
// legType, read in pieces of sizes, under a handler recording a request to
// handlerAPI whose response has content type handlerType.
func relay(t testing.TB, e *instrument.Engine, body, sizes, plan []byte, tail bool, legAPI, handlerAPI api, legType, handlerType string) relayed {
	t.Helper()
	var r relayed
	ctx, trace := NewTrace(context.Background())
	trace.takeLegs()
	tr := NewTransport(roundTrip(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {legType}},
			Body: &pieces{b: body, sizes: sizes}, Request: req}, nil
	}), WithEngine(e), WithBackend("b", instrument.RoleDecode))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://b"+apiPaths[legAPI], strings.NewReader(`{"stream":true}`))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	lb := resp.Body.(*legBody)
	lb.obs.gaps, lb.obs.onErr = counting(&r.leg)

	w := httptest.NewRecorder()
	w.Header().Set("Content-Type", handlerType)
	rw := &responseWriter{w: w, trace: trace, linking: true}
	rw.obs.init(apis[handlerAPI].ep, time.Now(), false)
	rw.obs.ctx = ctx
	rw.obs.gaps, rw.obs.onErr = counting(&r.handler)
	rw.commit(http.StatusOK)
	var ref, legRef observer
	ref.init(apis[handlerAPI].ep, time.Now(), false)
	legRef.init(apis[legAPI].ep, time.Now(), false)
	ref.kind(handlerType)
	legRef.kind(legType)
	ref.gaps, ref.onErr = counting(&r.handlerRef)
	legRef.gaps, legRef.onErr = counting(&r.legRef)
	write := func(p []byte) {
		rw.wrote(p, nil)
		if len(p) > 0 {
			ref.write(p)
		}
	}

	buf := make([]byte, 32<<10)
	var held []byte
	for i := 0; ; i++ {
		n, err := resp.Body.Read(buf)
		p := bytes.Clone(buf[:n])
		if n > 0 {
			legRef.write(p)
			if held != nil {
				p, held = append(held, p...), nil
			}
			switch how := int(plan[i%len(plan)]) % relays; {
			case how == changed && len(p) > 0:
				p[len(p)/2] ^= 0x20
				write(p)
			case how == preceded:
				write(own)
				write(p)
			case how == followed:
				write(p)
				write([]byte(" ")) // JSON's white space: a document it lies in reads on
			case how == splitRead:
				write(p[:len(p)/2])
				write(p[len(p)/2:])
			case how == joined:
				held = p
			case how == dropped:
			default:
				write(p)
			}
		}
		if err != nil {
			break
		}
	}
	write(held)
	if tail {
		write(own)
	}
	_ = resp.Body.Close()
	r.handler.take(&rw.obs)
	r.handlerRef.take(&ref)
	r.scanned = rw.obs.sc != nil
	r.leg.take(&lb.obs)
	r.legRef.take(&legRef)
	return r
}

// check requires the handler to observe what reading every byte it wrote
// observes, and the leg what reading every byte it read observes.
func (r relayed) check(t testing.TB, what string) {
	t.Helper()
	if r.handler != r.handlerRef {
		t.Errorf("%s: the handler observed\n%+v\nreading every byte:\n%+v", what, r.handler, r.handlerRef)
	}
	if r.leg != r.legRef {
		t.Errorf("%s: the leg observed\n%+v\nreading every byte:\n%+v", what, r.leg, r.legRef)
	}
}

// fixtureBody is a fixture's body, with the API and content type it is
// sent with.
type fixtureBody struct {
	body []byte
	api  api
	ct   string
}

// fixtureBodies are the bodies of testdata/manifest.json's fixtures.
func fixtureBodies(t testing.TB) []fixtureBody {
	m, err := os.ReadFile(filepath.Join("testdata", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []struct{ File, Path string }
	if err := json.Unmarshal(m, &fs); err != nil {
		t.Fatal(err)
	}
	types := map[string]string{".sse": "text/event-stream", ".json": "application/json", ".ndjson": "application/x-ndjson"}
	var out []fixtureBody
	for _, fx := range fs {
		b, err := os.ReadFile(filepath.Join("testdata", fx.File))
		if err != nil {
			t.Fatal(err)
		}
		if rt, ok := routeOf(fx.Path, nil); ok && rt.api != apiNone {
			out = append(out, fixtureBody{b, rt.api, types[filepath.Ext(fx.File)]})
		}
	}
	if len(out) < 20 {
		t.Fatalf("%d fixtures", len(out))
	}
	return out
}

// A handler passing on a leg's body unchanged takes what the leg read of
// each write instead of reading it (it reads no byte itself), and
// observes what reading every byte observes: every fixture, read whole,
// in pieces of 1, 3 and 71 bytes and in odd ones.
func TestHandlerTakesLegReads(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for _, fx := range fixtureBodies(t) {
		for _, sizes := range [][]byte{nil, {0}, {1}, {35}, {3, 60, 0, 200}} {
			r := relay(t, e, fx.body, sizes, []byte{passOn}, false, fx.api, fx.api, fx.ct, fx.ct)
			what := string(fx.body[:min(len(fx.body), 40)])
			r.check(t, what)
			if r.scanned && len(fx.body) <= maxFeedBytes {
				t.Errorf("%q in pieces %v: the handler read bytes itself", what, sizes)
			}
		}
	}
}

// A handler that writes anything but each read of a leg as it came (a
// read changed, split, joined with the next, preceded by bytes of its own,
// not written; bytes after the leg's; another API's or content type's
// body) reads on itself from where the leg stood, and observes what
// reading every byte it wrote observes; the leg, what reading every byte
// it read observes.
//
// Under the race detector, the fixtures package sample keeps (the first of
// each API and content type, and every sample.Every-th): the relay runs on
// the test's goroutine, where the race detector has nothing to find, and
// with every fixture it took 50 s under a load of 25.
func TestHandlerReadsOnWhenNotPassedOn(t *testing.T) {
	t.Parallel()
	e := newEngine(t)
	for _, fx := range sample.UnderRace(fixtureBodies(t), func(fx *fixtureBody) string { return fmt.Sprint(fx.api, fx.ct) }) {
		for how := range relays {
			for _, at := range [][]byte{{byte(how)}, {passOn, byte(how)}, {passOn, passOn, passOn, byte(how), passOn}} {
				for _, sizes := range [][]byte{{0}, {35}, {3, 60, 0, 200}} {
					relay(t, e, fx.body, sizes, at, false, fx.api, fx.api, fx.ct, fx.ct).check(t, fmt.Sprintf("relay %v, pieces %v", at, sizes))
				}
			}
		}
		relay(t, e, fx.body, []byte{35}, []byte{passOn}, true, fx.api, fx.api, fx.ct, fx.ct).check(t, "bytes after the leg's")
		relay(t, e, fx.body, []byte{35}, []byte{passOn}, false, fx.api, apiCompletions, fx.ct, fx.ct).check(t, "another API")
		relay(t, e, fx.body, []byte{35}, []byte{passOn}, false, fx.api, fx.api, fx.ct, "text/event-stream").check(t, "SSE")
		relay(t, e, fx.body, []byte{35}, []byte{passOn}, false, fx.api, fx.api, fx.ct, "application/json").check(t, "JSON")
	}
}

// Any body, read in any pieces, relayed in any way, under a handler of any
// API and content type: the handler observes what reading every byte it
// wrote observes, and the leg what reading every byte it read observes.
func FuzzHandlerTakesLegReads(f *testing.F) {
	for i, fx := range fixtureBodies(f) {
		f.Add(fx.body, []byte{byte(i)}, []byte{passOn}, uint8(fx.api), uint8(0))
		f.Add(fx.body, []byte{byte(i), 3}, []byte{passOn, passOn, byte(i % relays)}, uint8(fx.api), uint8(i))
	}
	e := newEngine(f)
	types := []string{"text/event-stream", "application/json", "application/x-ndjson"}
	f.Fuzz(func(t *testing.T, body, sizes, plan []byte, a, flags uint8) {
		if len(plan) == 0 {
			plan = []byte{passOn}
		}
		legAPI := api(a)%apiOllamaEmbed + 1
		handlerAPI := legAPI
		if flags&1 != 0 {
			handlerAPI = legAPI%apiOllamaEmbed + 1
		}
		legType, handlerType := types[int(flags>>1)%3], types[int(flags>>3)%3]
		relay(t, e, body, sizes, plan, flags&0x20 != 0, legAPI, handlerAPI, legType, handlerType).check(t, "")
	})
}

// Through an httputil.ReverseProxy with NewTransport under NewHandler (the
// proxy's stack), streamed or not, the handler takes every read of the
// leg: it reads no byte of the response again.
func TestReverseProxyReadsOnce(t *testing.T) {
	e := newEngine(t)
	for _, fx := range fixtureBodies(t) {
		if fx.api != apiChat {
			continue
		}
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", fx.ct)
			for _, line := range bytes.SplitAfter(fx.body, []byte("\n\n")) {
				_, _ = w.Write(line)
				w.(http.Flusher).Flush()
			}
		}))
		var leg *legBody
		rp := httputil.NewSingleHostReverseProxy(mustURL(t, up.URL))
		rp.Transport = NewTransport(nil, WithEngine(e))
		rp.ModifyResponse = func(resp *http.Response) error {
			leg, _ = resp.Body.(*legBody)
			return nil
		}
		w := httptest.NewRecorder()
		NewHandler(rp, WithEngine(e)).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"stream":true}`)))
		up.Close()
		if !bytes.Equal(w.Body.Bytes(), fx.body) {
			t.Fatalf("the client got %q, want %q", w.Body.Bytes(), fx.body)
		}
		if leg == nil || leg.feed == nil {
			t.Fatalf("%q: no leg published its reads", fx.body[:min(len(fx.body), 60)])
		}
		if f := leg.feed; f.state != feedOpen || f.pending || f.reads == 0 {
			t.Errorf("%q: the handler took %d reads of the leg's, then read on itself", fx.body[:min(len(fx.body), 60)], f.reads)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
