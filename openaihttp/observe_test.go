package openaihttp

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if !o.first.Equal(o.last) {
		t.Errorf("first chunk at %v, last at %v: want one time", o.first, o.last)
	}
}

func chunkEvent(content string) string {
	return `data: {"choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}` + "\n\n"
}

// The in-place path for whole members (members), and the start of a
// document read before (pre), read what the byte by byte path reads: every
// fixture document, and documents shaped to stop them at each of their
// exits, scanned whole and one byte at a time, in every dialect's root
// context, tell the same.
func TestMembersAgreeByteByByte(t *testing.T) {
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
	files, _ := filepath.Glob(filepath.Join("testdata", "*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
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
	type result struct {
		n        int
		complete bool
		st       uint8
		d        doc
		model    string
	}
	scan := func(s *jsonScan, p []byte, step int) result {
		s.reset()
		s.modelLen = 0
		var r result
		for len(p) > 0 && !r.complete {
			k := min(step, len(p))
			n, complete := s.feed(p[:k])
			r.n, r.complete, p = r.n+n, complete, p[n:]
		}
		r.st, r.d, r.model = s.st, s.d, string(s.model[:s.modelLen])
		return r
	}
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
				w := scan(&whole, p, len(p))
				if b := scan(&jsonScan{root: root}, p, 1); w != b {
					t.Errorf("root %d, %s (start read before: %v):\nwhole        %+v\nbyte by byte %+v", root, doc, hit, w, b)
				}
			}
		}
	}
	if hits < 20 {
		t.Errorf("%d documents read on from a start read before, want 20 or more", hits)
	}
	if len(docs) < 50 {
		t.Fatalf("only %d documents", len(docs))
	}
}
