package openaihttp

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/stats"
)

// gapLog keeps the inter-chunk times an observer records.
type gapLog []float64

func (g *gapLog) RecordChunkGap(_ context.Context, _ stats.Operation, seconds float64) {
	*g = append(*g, seconds)
}

// The content chunks of one write arrive together: they are timed alike,
// each gap between them recorded, as 0.
func TestChunksOfOneWriteTimedAlike(t *testing.T) {
	var o observer
	var gaps gapLog
	o.init(endpoint{stats.OperationChat, dOpenAI}, time.Now(), true)
	o.gaps, o.ctx = &gaps, context.Background()
	o.write([]byte(chunkEvent("a") + chunkEvent("b") + chunkEvent("c")))
	if o.chunks != 3 || len(gaps) != 2 || gaps[0] != 0 || gaps[1] != 0 {
		t.Fatalf("chunks %d, gaps %v; want 3 chunks, gaps [0 0]", o.chunks, gaps)
	}
	if o.first != o.last {
		t.Errorf("first chunk at %v, last at %v: want one time", o.first, o.last)
	}
}

func chunkEvent(content string) string {
	return `data: {"choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}` + "\n\n"
}

// scanDocs are documents of every dialect: hostile ones and each of the
// fixtures' and the recorded corpus's documents (under the race detector,
// of the part of the corpus package sample keeps: the scanner runs on the
// test's goroutine, where the race detector has nothing to find, and
// reading every document byte by byte under it, each of the two tests
// below took 50 s under a load of 25, TestCorpus 83 s).
func scanDocs(t *testing.T) []string {
	t.Helper()
	docs := []string{
		`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" t"},"logprobs":null,"finish_reason":null,"token_ids":null}]}`,
		`{"a\"b":1,"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
		`{"id":"a\"b","usage" :{"prompt_tokens": 3,"completion_tokens":2},"choices": []}`,
		`{"id":,"x":}`, `{"id":}`, `{"id":tru"e","usage":{"prompt_tokens":1,"completion_tokens":1}}`,
		`{"id":"x" ,"usage":{"prompt_tokens":1,"completion_tokens":1}}`, `{"id":{"usage":1},"error":null}`,
		`{"id":[1,{"a":"b"}],"error":{"message":"m"}}`, `{"id":"x","id":"y"}`, `{"model":"caf\u00e9","n":2,"stream":true}`,
		`{"model":"a","stream_options":{"include_usage":true},"max_tokens":100.0}`, `{"x":1 }`, `{"x":"1"}`,
		`{"model":"` + strings.Repeat("m", maxValue+1) + `","n":"2","stream":"True","max_tokens":1e3}`,
		`{"choices":[{"index":1,"finish_reason":"length","delta":{"content":"a"}},{"index":17,"text":"b"}],"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":1}}`,
		`{"type":"response.output_text.delta","delta":"x","response":{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}}`,
	}
	for _, b := range testdataFiles(t, !sample.Race) {
		for _, line := range bytes.Split(b, []byte("\n")) {
			line = bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:"))
			if line = bytes.TrimSpace(line); len(line) > 0 && line[0] == '{' {
				docs = append(docs, string(line))
			}
		}
		if len(b) > 0 && b[0] == '{' {
			docs = append(docs, string(b))
		}
	}
	if len(docs) < 50 {
		t.Fatalf("only %d documents", len(docs))
	}
	return docs
}

// sampledDocs are scanDocs, of which, under the race detector, the part
// package sample keeps (the first document of each opening, its first 8
// bytes, and every sample.Every-th); without it, every one. The two tests
// below read them on the test's goroutine alone, where the race detector
// has nothing to find, and with every document took 3 and 2 s of CPU under
// it.
func sampledDocs(t *testing.T) []string {
	t.Helper()
	return sample.UnderRace(scanDocs(t), func(d *string) string { return (*d)[:min(len(*d), 8)] })
}

// scanResult is what reading one document told.
type scanResult struct {
	n        int
	complete bool
	st       uint8
	d        doc
	model    string
	req      request
	resp     string
}

// scanDoc reads one document, step bytes per feed, with s.
func scanDoc(s *jsonScan, p []byte, step int) scanResult {
	s.reset()
	s.modelLen, s.req = 0, request{}
	var r scanResult
	for len(p) > 0 && !r.complete {
		k := min(step, len(p))
		n, complete := s.feed(p[:k])
		r.n, r.complete, p = r.n+n, complete, p[n:]
	}
	r.st, r.d, r.model, r.req = s.st, s.d, string(s.model[:s.modelLen]), s.req
	r.resp = string(s.resp[:s.respLen])
	return r
}

// fresh returns a new scanner of s's dialect that knows the response model
// s knows: the one state kept across documents that changes what a
// document tells (a response's first model is read, later ones skipped).
func fresh(s *jsonScan) *jsonScan {
	return &jsonScan{root: s.root, resp: s.resp, respLen: s.respLen}
}

// The in-place path for whole members (members), and the start of a
// document read before (pre), read what the byte by byte path reads: every
// fixture document, and documents shaped to stop them at each of their
// exits, scanned whole and one byte at a time, in every dialect's root
// context, tell the same.
func TestMembersAgreeByteByByte(t *testing.T) {
	t.Parallel()
	docs := sampledDocs(t)
	var hits int
	for _, root := range []uint8{cRoot, cRequest, cRespRoot, cAnthRoot, cOllamaRoot} {
		// One scanner reads every document whole, each twice: the second
		// time from the state its start left (pre), as the chunks of a
		// stream are; the byte by byte path reads each with a new one.
		whole := jsonScan{root: root}
		for _, doc := range docs {
			p := []byte(doc + "{}")
			for range 2 {
				hit := whole.preLen > 0 && bytes.HasPrefix(p, whole.pre[:whole.preLen])
				if hit {
					hits++
				}
				f := fresh(&whole)
				w := scanDoc(&whole, p, len(p))
				if b := scanDoc(f, p, 1); w != b {
					t.Errorf("root %d, %s (start read before: %v):\nwhole        %+v\nbyte by byte %+v", root, doc, hit, w, b)
				}
			}
		}
	}
	if hits < 20 {
		t.Errorf("%d documents read on from a start read before, want 20 or more", hits)
	}
}

// A document read after one with the same bytes around its content string
// (a stream's next content chunk) tells what the byte by byte path tells,
// whatever the new string is: read whole from the last document's result
// when it is non-empty with no escape, read on otherwise. Each fixture and
// hostile document is read, then again with its first content string
// replaced by each of the strings below.
func TestSameDocumentAroundNewContent(t *testing.T) {
	t.Parallel()
	contents := []string{"", "a", " t", strings.Repeat("x", 600), `\"`, `a\nb`, `caf\u00e9`, "caf\u00e9",
		"\x01", `}]}`, `","finish_reason":"stop`, "\xff\xfe", `\`}
	key := []byte(`"content":"`)
	var hits, variants int
	docs := sampledDocs(t)
	for _, root := range []uint8{cRoot, cRespRoot, cAnthRoot, cOllamaRoot} {
		whole := jsonScan{root: root}
		for _, doc := range docs {
			at := strings.Index(doc, string(key))
			if at < 0 {
				continue
			}
			at += len(key)
			n := stringEnd([]byte(doc[at:]))
			if n < 0 {
				continue
			}
			for _, c := range contents {
				variant := []byte(doc[:at] + c + doc[at+n:] + "{}")
				scanDoc(&whole, []byte(doc+"{}"), len(doc)+2)
				probe := whole
				if probe.same(variant, 0) > 0 {
					hits++
				}
				variants++
				f := fresh(&whole)
				w := scanDoc(&whole, variant, len(variant))
				if b := scanDoc(f, variant, 1); w != b {
					t.Errorf("root %d, %s after %s:\nwhole        %+v\nbyte by byte %+v", root, variant, doc, w, b)
				}
			}
		}
	}
	if hits < 100 || hits == variants {
		t.Errorf("%d of %d documents read whole from the last one's result, want 100 or more and not all", hits, variants)
	}
	t.Logf("%d of %d documents read whole from the last one's result", hits, variants)
}

// FuzzSameDocument reads a document, then the document with the part
// between two offsets replaced, with one scanner, and requires of the
// second what a new scanner reading it byte by byte tells.
func FuzzSameDocument(f *testing.F) {
	f.Add([]byte(`{"id":"x","choices":[{"index":0,"delta":{"content":" t"},"finish_reason":null}]}`), 52, 54, []byte("abc"), uint8(0))
	f.Add([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`), 77, 79, []byte(`\"`), uint8(2))
	f.Add([]byte(`{"message":{"role":"assistant","content":"x"},"done":false}`), 42, 43, []byte(""), uint8(3))
	roots := []uint8{cRoot, cRespRoot, cAnthRoot, cOllamaRoot, cRequest}
	f.Fuzz(func(t *testing.T, doc []byte, from, to int, with []byte, root uint8) {
		if from < 0 || to < from || to > len(doc) {
			return
		}
		r := roots[int(root)%len(roots)]
		variant := append(append(append([]byte(nil), doc[:from]...), with...), doc[to:]...)
		whole := jsonScan{root: r}
		scanDoc(&whole, doc, len(doc))
		f := fresh(&whole)
		w := scanDoc(&whole, variant, len(variant))
		if b := scanDoc(f, variant, 1); w != b {
			t.Errorf("root %d, %q after %q:\nwhole        %+v\nbyte by byte %+v", r, variant, doc, w, b)
		}
	})
}

// An SSE data field may span lines, and lines may end in "\n", "\r\n" or
// "\r": each style, with every event's JSON split over two or three data
// lines, split into two writes at every byte and written byte by byte,
// records the stream as with one line per event. Before, the "\n" of
// "\r\n" was taken for an empty line, which ended the event in its
// middle: no chunk, no usage, an error.
func TestSSEMultiLineData(t *testing.T) {
	events := [][]string{
		{`{"choices":[{"index":0,`, ` "delta":{"content":"Hi"},`, `"finish_reason":null}]}`},
		{`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],`, `"usage":{"prompt_tokens":3,"completion_tokens":1}}`},
		{`[DONE]`},
	}
	for name, eol := range map[string]string{"LF": "\n", "CRLF": "\r\n", "CR": "\r"} {
		var b strings.Builder
		for _, lines := range events {
			b.WriteString(": comment" + eol + "event: message" + eol)
			for _, l := range lines {
				b.WriteString("data: " + l + eol)
			}
			b.WriteString(eol)
		}
		stream := []byte(b.String())
		check := func(how string, writes ...[]byte) {
			t.Helper()
			var o observer
			start := time.Unix(1000, 0)
			o.init(endpoint{stats.OperationChat, dOpenAI}, start, true)
			for _, w := range writes {
				o.write(w)
			}
			r := o.result(start.Add(time.Second), end{status: 200})
			if r.Reason != stats.FinishStop || !r.FirstToken || !r.UsageKnown || r.PromptTokens != 3 ||
				r.GenerationTokens != 1 || o.chunks != 1 || !o.done {
				t.Fatalf("%s, %s: reason %v, first token %v, usage %v %d/%d, %d chunks, done %v; want stop, a chunk, usage 3/1, done",
					name, how, r.Reason, r.FirstToken, r.UsageKnown, r.PromptTokens, r.GenerationTokens, o.chunks, o.done)
			}
		}
		for i := range len(stream) + 1 {
			check(fmt.Sprintf("split at %d", i), stream[:i], stream[i:])
		}
		var bytewise [][]byte
		for i := range stream {
			bytewise = append(bytewise, stream[i:i+1])
		}
		check("byte by byte", bytewise...)
	}
}

// The data lines of an event are joined by a line feed, as the SSE
// standard (and every client) joins them: a number cut by a line break is
// two numbers, not JSON, so the usage is not taken; cut after the number,
// it is.
func TestSSEDataLinesJoinedByLineFeed(t *testing.T) {
	for _, c := range []struct {
		lines string
		usage bool
	}{
		{"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1\ndata: 2,\"completion_tokens\":1}}\n\n", false},
		{"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12\ndata: ,\"completion_tokens\":1}}\n\n", true},
	} {
		var o observer
		o.init(endpoint{stats.OperationChat, dOpenAI}, time.Unix(1000, 0), true)
		o.write([]byte(c.lines))
		if r := o.result(time.Unix(1001, 0), end{status: 200}); r.UsageKnown != c.usage || (c.usage && r.PromptTokens != 12) {
			t.Errorf("%q: usage %v (%d prompt tokens), want %v", c.lines, r.UsageKnown, r.PromptTokens, c.usage)
		}
	}
}

// The choices of one document combine their finish reasons as those of
// several documents do, the worst winning: a completion of n = 2 or of a
// batch of prompts that ended [length, stop] is length, not its last
// choice's stop. Within one choice the last finish_reason key wins, as in
// Python, null too.
func TestFinishReasonWorstInDocument(t *testing.T) {
	for _, c := range []struct {
		body string
		want stats.FinishReason
	}{
		{`{"object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":"length"},{"index":1,"text":"b","finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":17}}`, stats.FinishLength},
		{`{"object":"chat.completion","choices":[{"index":0,"message":{"content":"a"},"finish_reason":"length"},{"index":1,"message":{"content":"b"},"finish_reason":"stop"}]}`, stats.FinishLength},
		{`{"choices":[{"index":0,"finish_reason":"stop"},{"index":1,"finish_reason":"abort"},{"index":2,"finish_reason":"length"}]}`, stats.FinishAbort},
		{`{"choices":[{"index":0,"finish_reason":"length","finish_reason":"stop"},{"index":1,"finish_reason":"stop"}]}`, stats.FinishStop},
		{`{"choices":[{"index":0,"finish_reason":"length","finish_reason":null},{"index":1,"finish_reason":"stop"}]}`, stats.FinishStop},
	} {
		var o observer
		o.init(endpoint{stats.OperationTextCompletion, dOpenAI}, time.Unix(1000, 0), false)
		o.write([]byte(c.body))
		if r := o.result(time.Unix(1001, 0), end{status: 200}); r.Reason != c.want {
			t.Errorf("%s: reason %v, want %v", c.body, r.Reason, c.want)
		}
	}
}

// observed is what an observer tells, times aside: its facts, content
// chunks, choices timed and inter-chunk times recorded, and values it
// reported dropped.
type observed struct {
	facts   bodyFacts
	chunks  int64
	seen    uint32
	many    bool
	gaps    int
	dropped int
}

// counting returns an observer's sinks: its gaps and dropped values counted
// in o.
func counting(o *observed) (gapRecorder, func(error)) {
	return gapCount{&o.gaps}, func(error) { o.dropped++ }
}

type gapCount struct{ n *int }

func (g gapCount) RecordChunkGap(context.Context, stats.Operation, float64) { *g.n++ }

func (o *observed) take(obs *observer) {
	o.facts, o.chunks, o.seen, o.many = obs.bodyFacts, obs.chunks, obs.choices.seen, obs.choices.many
}

// An event stream of one document with its content string changed from
// event to event, each event a data line and an empty line (as streams
// send chunks: the scanner takes each document after the first whole from
// the last one's result, see observer.sameEvent), observes the same,
// inter-chunk times and values dropped included, written an event at a
// time and byte by byte: any document and contents, the space after
// "data:" or not, any line ending.
func FuzzSameEvent(f *testing.F) {
	doc := []byte(`{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"A"},"finish_reason":null}]}`)
	for i, c := range []string{" t", "a\nb", "a\rb", `\"`, "", `"`, "x\x00y"} {
		for _, framing := range []uint8{0, 1, 3, 4 * 5, 4 * 6, 4 * 7} { // leads and blanks
			f.Add(doc, []byte(c), []byte("tok"), uint8(i)+framing)
		}
	}
	f.Add([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`), []byte("yo"), []byte("b"), uint8(1))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"A"}}],"usage":{"prompt_tokens":99999999999}}`), []byte("x"), []byte("y"), uint8(0))
	f.Fuzz(func(t *testing.T, doc, content, other []byte, flags uint8) {
		at := bytes.Index(doc, []byte(`"content":"`))
		if at < 0 {
			at = bytes.Index(doc, []byte(`"text":"`))
		}
		if at < 0 {
			return
		}
		at = bytes.IndexByte(doc[at:], ':') + at + 2
		n := bytes.IndexByte(doc[at:], '"')
		if n < 0 {
			return
		}
		// The first event is a data line and an empty line; in the others
		// the last lead puts the document in an event begun on a line
		// before, the last blanks are a data line after it and a comment
		// and [DONE] after the empty line.
		lead := []string{"data: ", "data:", "data:  ", "data: {\"a\":\ndata: "}[flags%4]
		blank := []string{"\n\n", "\r\n\r\n", "\n", "\r\r", "\r\n\n", "", "\ndata: [DONE]\n\n", "\n\n: c\n\ndata: [DONE]\n\n"}[flags/4%8]
		var events [][]byte
		for i, c := range [][]byte{doc[at : at+n], content, other, content, doc[at : at+n]} {
			l, b := lead, blank
			if i == 0 {
				l, b = "data: ", "\n\n"
			}
			e := append(append(append([]byte(l), doc[:at]...), c...), doc[at+n:]...)
			events = append(events, append(e, b...))
		}
		ep := endpoint{stats.OperationChat, []uint8{dOpenAI, dAnthropic}[flags/32%2]}
		var whole, bytewise observed
		for _, w := range []struct {
			o    *observed
			step int
		}{{&whole, 0}, {&bytewise, 1}} {
			var o observer
			o.init(ep, time.Now(), true)
			o.gaps, o.onErr = counting(w.o)
			for _, e := range events {
				for p := e; len(p) > 0; {
					k := len(p)
					if w.step > 0 {
						k = w.step
					}
					o.write(p[:k])
					p = p[k:]
				}
			}
			w.o.take(&o)
		}
		if whole != bytewise {
			t.Errorf("%q:\nan event at a time %+v\nbyte by byte       %+v", bytes.Join(events, nil), whole, bytewise)
		}
	})
}

// A response's finish reason is read by stats.ParseFinishReason, the one
// mapping: llm-d-inference-sim's remote_decode (a P/D prefill handed over)
// is length, its cache_threshold abort, as an engine recording them counts.
func TestFinishReasonIsParseFinishReason(t *testing.T) {
	for _, reason := range []string{"stop", "length", "abort", "error", "repetition", "max_tokens",
		"end_turn", "tool_calls", "remote_decode", "cache_threshold", "compaction", "no such reason"} {
		want, _ := stats.ParseFinishReason(reason)
		body := `{"object":"chat.completion","choices":[{"index":0,"message":{"content":"a"},"finish_reason":"` + reason + `"}]}`
		var o observer
		o.init(endpoint{stats.OperationChat, dOpenAI}, time.Unix(1000, 0), false)
		o.write([]byte(body))
		if r := o.result(time.Unix(1001, 0), end{status: 200}); r.Reason != want {
			t.Errorf("finish_reason %q: recorded %v, want %v (stats.ParseFinishReason)", reason, r.Reason, want)
		}
	}
}
