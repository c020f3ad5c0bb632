package openaihttp

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// feedAt gives the observer one streamed document observed at a time.
func feedAt(t *testing.T, o *observer, doc string, at time.Time) {
	t.Helper()
	if o.sc == nil {
		o.sc = new(scanner)
		o.sc.reset(o.ep)
	}
	o.sc.js.reset()
	if _, complete := o.sc.js.feed([]byte(doc)); !complete {
		t.Fatalf("%s: not one complete document", doc)
	}
	o.now, o.timed = at.Sub(o.start), true
	o.apply(&o.sc.js.d, true)
}

func choiceChunk(index int, content string) string {
	return `{"object":"chat.completion.chunk","choices":[{"index":` + string(rune('0'+index)) +
		`,"delta":{"content":"` + content + `"},"finish_reason":null}]}`
}

// With n = 2 the time per output token is per choice: two choices decoding
// side by side, 3 tokens each 30 ms apart, take 30 ms per token each; the
// request records their token-weighted mean, 30 ms. Before, the decode time
// of the request (first chunk of any choice to the last of any) was divided
// by the tokens of both choices: 62 ms / 5 = 12.4 ms.
func TestTimePerOutputTokenPerChoice(t *testing.T) {
	var o observer
	start := time.Unix(1000, 0)
	o.init(endpoint{stats.OperationChat, dOpenAI}, start, true)
	ms := func(v int) time.Time { return start.Add(time.Duration(v) * time.Millisecond) }
	for _, c := range []struct {
		at, index int
	}{{10, 0}, {12, 1}, {40, 0}, {42, 1}, {70, 0}, {72, 1}} {
		feedAt(t, &o, choiceChunk(c.index, "tok"), ms(c.at))
	}
	feedAt(t, &o, `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"stop"}]}`, ms(73))
	feedAt(t, &o, `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6}}`, ms(74))
	r := o.result(ms(75), end{status: 200})
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.DecodeChoices != 2 || math.Abs(r.ChoicesDecodeTime-0.120) > 1e-9 {
		t.Fatalf("DecodeChoices %d ChoicesDecodeTime %v, want 2 and 0.120", r.DecodeChoices, r.ChoicesDecodeTime)
	}
	// Per choice: (70 - 10) / (3 - 1) = (72 - 12) / (3 - 1) = 30 ms.
	if tpot, ok := r.TimePerOutputToken(); !ok || math.Abs(tpot-0.030) > 1e-9 {
		t.Errorf("time per output token %v (%v), want 0.030", tpot, ok)
	}
	if r.Reason != stats.FinishStop || r.GenerationTokens != 6 {
		t.Errorf("reason %v, generation %d", r.Reason, r.GenerationTokens)
	}
}

// One choice keeps vLLM's definition: (last - first) / (tokens - 1).
func TestTimePerOutputTokenOneChoice(t *testing.T) {
	var o observer
	start := time.Unix(1000, 0)
	o.init(endpoint{stats.OperationChat, dOpenAI}, start, true)
	for i, at := range []int{10, 30, 50} {
		feedAt(t, &o, choiceChunk(0, "t"+string(rune('a'+i))), start.Add(time.Duration(at)*time.Millisecond))
	}
	feedAt(t, &o, `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}`, start.Add(51*time.Millisecond))
	r := o.result(start.Add(52*time.Millisecond), end{status: 200})
	if tpot, ok := r.TimePerOutputToken(); r.DecodeChoices != 0 || !ok || math.Abs(tpot-0.020) > 1e-9 {
		t.Errorf("DecodeChoices %d, time per output token %v, want 0.020", r.DecodeChoices, tpot)
	}
}

// llama.cpp's timings.cache_n gives the cached tokens when usage has no
// prompt_tokens_details (an older server); prompt_tokens_details wins when
// present. prompt_ms and predicted_ms are the server-reported prefill and
// decode times.
func TestLlamaCppTimings(t *testing.T) {
	for _, tc := range []struct {
		usage  string
		cached int64
	}{
		{`"usage":{"completion_tokens":4,"prompt_tokens":40,"total_tokens":44}`, 32},
		{`"usage":{"completion_tokens":4,"prompt_tokens":40,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":30}}`, 30},
	} {
		var o observer
		o.init(endpoint{stats.OperationChat, dOpenAI}, time.Unix(1000, 0), false)
		o.write([]byte(`{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}],` + tc.usage +
			`,"timings":{"cache_n":32,"prompt_n":8,"prompt_ms":38.5,"predicted_n":4,"predicted_ms":210.0}}`))
		r := o.result(time.Unix(1001, 0), end{status: 200})
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		if r.CachedPromptTokens != tc.cached || !r.ServerTimes || r.PrefillTime != 0.0385 || r.DecodeTime != 0.21 {
			t.Errorf("%s: cached %d, server times %v %v %v", tc.usage, r.CachedPromptTokens, r.ServerTimes, r.PrefillTime, r.DecodeTime)
		}
	}
}

// Anthropic usage merges over the events, each field's last value winning:
// a message_start with the whole prompt in input_tokens and no cache
// fields, then a message_delta with the uncached part and the cache reads
// (vLLM after PR #40912) record the prompt once, 40 tokens, 32 cached.
func TestAnthropicUsageMerged(t *testing.T) {
	var o observer
	start := time.Unix(1000, 0)
	o.init(endpoint{stats.OperationChat, dAnthropic}, start, true)
	for _, doc := range []string{
		`{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":40,"output_tokens":0}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3,"input_tokens":8,"cache_read_input_tokens":32,"cache_creation_input_tokens":0}}`,
		`{"type":"message_stop"}`,
	} {
		feedAt(t, &o, doc, start.Add(time.Millisecond))
	}
	r := o.result(start.Add(2*time.Millisecond), end{status: 200})
	if r.PromptTokens != 40 || r.CachedPromptTokens != 32 || r.GenerationTokens != 3 || r.Reason != stats.FinishStop || !r.FirstToken {
		t.Errorf("got %+v", r)
	}
}

// BenchmarkScanChunk is the scanner alone on one content chunk as vLLM
// streams it (no SSE framing, no recording).
func BenchmarkScanChunk(b *testing.B) {
	doc := func(content string) []byte {
		return []byte(`{"id":"chatcmpl-3f9a1c2e7b5d4e8f9a0b1c2d3e4f5a6b","object":"chat.completion.chunk","created":1764489600,"model":"Qwen/Qwen2.5-1.5B-Instruct","choices":[{"index":0,"delta":{"content":"` +
			content + `"},"logprobs":null,"finish_reason":null,"token_ids":null}]}`)
	}
	docs := [2][]byte{doc(" token"), doc(" word")}
	// read: every chunk read through (the last one forgotten); next: each
	// chunk after one with other content, as a stream's are.
	for _, forget := range []bool{true, false} {
		b.Run(map[bool]string{true: "read", false: "next"}[forget], func(b *testing.B) {
			var s jsonScan
			s.root = cRoot
			i := 0
			for b.Loop() {
				s.reset()
				if forget {
					s.last.ok = false
				}
				if _, ok := s.feed(docs[i&1]); !ok || !s.d.content {
					b.Fatal("not scanned")
				}
				i++
			}
		})
	}
}

// stringEnd finds the first quote or backslash wherever it is, as a byte
// loop does, in runs of every length around its 8-byte steps and the
// switch to bytes.IndexByte.
func TestStringEnd(t *testing.T) {
	naive := func(p []byte) int {
		for i, c := range p {
			if c == '"' || c == '\\' {
				return i
			}
		}
		return -1
	}
	for n := 0; n <= 140; n++ {
		base := make([]byte, n)
		for i := range base {
			base[i] = byte(i*37 + n) // every byte value, UTF-8's high bytes and '!', '#', '[', ']' too
			if base[i] == '"' || base[i] == '\\' {
				base[i] = '#'
			}
		}
		if got := stringEnd(base); got != -1 {
			t.Fatalf("len %d, no stop: %d", n, got)
		}
		for _, stopByte := range []byte{'"', '\\'} {
			for at := 0; at < n; at++ {
				p := append([]byte(nil), base...)
				p[at] = stopByte
				if at+1 < n {
					p[n-1] = '"' // a later stop must not win
				}
				if got, want := stringEnd(p), naive(p); got != want {
					t.Fatalf("len %d, %q at %d: %d, want %d", n, stopByte, at, got, want)
				}
			}
		}
	}
}

// BenchmarkObserveChunk is the observer alone on one streamed content chunk
// per write, SSE framing and the inter-chunk time included (recorded into
// a sink, not OpenTelemetry): one choice, and two choices taking turns as
// an n = 2 stream's do.
func BenchmarkObserveChunk(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(map[int]string{1: "n1", 2: "n2"}[n], func(b *testing.B) {
			var events [2][]byte
			for i := range events {
				events[i] = []byte("data: " + choiceChunk(i%n, " tok") + "\n\n")
			}
			var o observer
			var sink gapSink
			o.init(endpoint{stats.OperationChat, dOpenAI}, time.Now(), true)
			o.gaps, o.ctx = &sink, b.Context()
			i := 0
			for b.Loop() {
				o.write(events[i&1])
				i++
			}
			if o.chunks != int64(i) {
				b.Fatalf("%d chunks observed of %d", o.chunks, i)
			}
		})
	}
}

// gapSink counts the inter-chunk times an observer records, keeping none.
type gapSink struct{ n int }

func (g *gapSink) RecordChunkGap(context.Context, stats.Operation, float64) { g.n++ }

// With n = 2 each choice's inter-chunk times are its own, as vLLM records
// them: two choices streaming 25 ms apart each, 2 ms from one another,
// record 25 ms every time, not 2 ms and 23 ms in turn. A chunk carrying
// both choices gives a gap for each; a choice's first chunk gives none; a
// choice of index 16 or more is not timed, so gives none.
func TestInterChunkTimesPerChoice(t *testing.T) {
	var o observer
	var gaps gapLog
	start := time.Unix(1000, 0)
	o.init(endpoint{stats.OperationChat, dOpenAI}, start, true)
	o.gaps, o.ctx = &gaps, context.Background()
	ms := func(v int) time.Time { return start.Add(time.Duration(v) * time.Millisecond) }
	for step := range 4 {
		feedAt(t, &o, choiceChunk(0, "tok"), ms(10+25*step))
		feedAt(t, &o, choiceChunk(1, "tok"), ms(12+25*step))
	}
	feedAt(t, &o, `{"choices":[{"index":1,"delta":{"content":"x"}},{"index":0,"delta":{"content":"y"}}]}`, ms(115))
	for _, at := range []int{116, 150} {
		feedAt(t, &o, `{"choices":[{"index":16,"delta":{"content":"z"}}]}`, ms(at))
	}
	want := []float64{0.025, 0.025, 0.025, 0.025, 0.025, 0.025, 0.030, 0.028}
	if len(gaps) != len(want) {
		t.Fatalf("gaps %v, want %v", gaps, want)
	}
	for i := range want {
		if math.Abs(gaps[i]-want[i]) > 1e-9 {
			t.Fatalf("gaps %v, want %v", gaps, want)
		}
	}
	if o.chunks != 11 {
		t.Errorf("%d chunks, want 11", o.chunks)
	}
}

// A stream's chunks after the one whose model was read start with members
// nothing reads up to their content, model included: the start a chunk is
// read on from (pre) covers it from the second chunk on.
func TestPreCoversResponseModel(t *testing.T) {
	doc := func(content string) []byte {
		return []byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"Qwen/Qwen2.5-1.5B-Instruct","choices":[{"index":0,"delta":{"content":"` +
			content + `\n"},"finish_reason":null}]}`) // an escape: not read whole from the last one (same)
	}
	s := jsonScan{root: cRoot}
	for i, c := range []string{"a", "b", "c"} {
		s.reset()
		if _, ok := s.feed(doc(c)); !ok {
			t.Fatalf("chunk %d not read", i)
		}
	}
	if got := string(s.resp[:s.respLen]); got != "Qwen/Qwen2.5-1.5B-Instruct" {
		t.Errorf("response model %q", got)
	}
	if !bytes.Contains(s.pre[:s.preLen], []byte(`"model":`)) {
		t.Errorf("pre %q stops before the model", s.pre[:s.preLen])
	}
}
