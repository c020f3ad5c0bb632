package openaihttp

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// The response fuzz targets write any body, split anywhere, through the
// observer of one dialect, and require of it what the oracle reads of the
// same bytes (pyLoads, by Python's rules) for a body Python reads: each
// document's content, finish reason, error and usage, folded over the
// documents as the package documents it. Bodies whose framing or JSON a
// Python client refuses (an event whose data is not one JSON value, a line
// of NDJSON that is not one object, bytes not UTF-8) and documents with
// duplicate keys (no server sends them; requests are where Python's rule
// for them matters, FuzzRequestScan) are observed for panics only.

// outcome is what a response told: the observed request's figures.
type outcome struct {
	reason                     stats.FinishReason
	usage                      bool
	prompt, completion, cached int64
	chunks                     int64
}

// observeBody observes body as a response of ep, written step bytes at a
// time.
func observeBody(ep endpoint, streaming bool, body []byte, step int) outcome {
	var o observer
	start := time.Unix(1000, 0)
	o.init(ep, start, streaming)
	for p := body; len(p) > 0; {
		n := min(step, len(p))
		o.write(p[:n])
		p = p[n:]
	}
	r := o.result(start.Add(time.Second), end{status: 200})
	return outcome{r.Reason, r.UsageKnown, r.PromptTokens, r.GenerationTokens, r.CachedPromptTokens, o.chunks}
}

// sseData returns the data of each event of an event stream, as the SSE
// standard reads them (one leading byte order mark dropped; lines ending
// in "\n", "\r\n" or "\r"; data lines joined by "\n"); the last event is
// taken without its empty line too, as the observer takes a document when
// it completes.
func sseData(body []byte) [][]byte {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	var events [][]byte
	var data []byte
	has := false
	dispatch := func() {
		if has {
			events = append(events, data)
		}
		data, has = nil, false
	}
	for len(body) > 0 {
		i := bytes.IndexAny(body, "\r\n")
		line := body
		if i >= 0 {
			line = body[:i]
			if body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n' {
				i++
			}
			body = body[i+1:]
		} else {
			body = nil
		}
		if len(line) == 0 {
			dispatch()
			continue
		}
		field, value, colon := bytes.Cut(line, []byte(":"))
		if colon {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		if string(field) != "data" {
			continue
		}
		if has {
			data = append(data, '\n')
		}
		data, has = append(data, value...), true
	}
	dispatch()
	return events
}

// documents returns the JSON objects of a body as a Python client reads
// them: one JSON body, each event's data of a stream ([DONE] and empty
// data skipped), or each line of NDJSON; ok false when a client refuses
// one, or an object has duplicate keys.
func documents(body []byte, framing uint8) (docs []object, ok bool) {
	var parts [][]byte
	switch framing {
	case framingJSON:
		parts = [][]byte{body}
	case framingSSE:
		for _, d := range sseData(body) {
			if t := bytes.TrimSpace(d); len(t) > 0 && string(t) != "[DONE]" {
				parts = append(parts, d)
			}
		}
	case framingNDJSON:
		for _, l := range bytes.Split(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				parts = append(parts, l)
			}
		}
	}
	for _, p := range parts {
		if framing != framingJSON && bytes.HasPrefix(p, []byte("\xef\xbb\xbf")) {
			return nil, false // a client decodes the text first: Python's json.loads refuses a str with a mark
		}
		v, ok := pyLoads(p)
		o, isObject := v.(object)
		switch {
		case !ok || duplicateKeys(v):
			return nil, false
		case isObject:
			docs = append(docs, o)
		case framing != framingSSE:
			return nil, false // not a document: the observer stops reading the body
		}
	}
	return docs, true
}

const (
	framingJSON uint8 = iota
	framingSSE
	framingNDJSON
)

// duplicateKeys reports an object, at any depth, with a key twice.
func duplicateKeys(v any) bool {
	switch v := v.(type) {
	case object:
		seen := map[string]bool{}
		for _, m := range v {
			if seen[m.key] || duplicateKeys(m.val) {
				return true
			}
			seen[m.key] = true
		}
	case []any:
		for _, e := range v {
			if duplicateKeys(e) {
				return true
			}
		}
	}
	return false
}

// facts is what one document tells, by the oracle.
type facts struct {
	content, errSeen, done bool
	event                  uint8 // the "type" of a Responses or Anthropic event
	deltaText              bool  // Responses: a non-empty string "delta"
	status                 uint8 // Responses: the response's status
	filtered               bool
	finish                 reasonSeen
	usage                  usageFacts
	cacheN                 int64
	hasCacheN              bool
	bad                    bool // a known context deeper than the scanner keeps: nothing counts
}

// usageFacts are a usage object's counts (or Ollama's, at the root).
type usageFacts struct {
	seen, bad bool
	has       uint16    // f... bits
	counts    [16]int64 // by bitIndex
}

// usageKeys are the count names of a usage object (Ollama's at its root),
// by the bit of each count.
var usageKeys = map[string]uint16{
	"prompt_tokens": fPrompt, "input_tokens": fPrompt, "prompt_eval_count": fPrompt,
	"completion_tokens": fCompletion, "output_tokens": fCompletion, "eval_count": fCompletion,
	"cache_read_input_tokens": fCacheRead, "cache_creation_input_tokens": fCacheCreation,
	"num_cached_tokens": fNumCached,
}

func bitIndex(bit uint16) int {
	for i := range 16 {
		if bit == 1<<i {
			return i
		}
	}
	return -1
}

// count takes in a count: null is unknown (bad for the prompt), and any
// value not a count within maxCount makes the usage unknown.
func (u *usageFacts) count(bit uint16, v any) {
	i := bitIndex(bit)
	if v == nil && bit != fPrompt {
		u.has &^= bit
		u.counts[i] = 0
		return
	}
	n, ok, _ := pyCount(v)
	if !ok {
		u.bad = true
		return
	}
	u.counts[i], u.has = n, u.has|bit
}

// usageObject reads a usage object, its details' cached_tokens too.
func (u *usageFacts) usageObject(o object, ollama bool) {
	if !ollama {
		*u = usageFacts{seen: true}
	}
	for _, m := range o {
		if bit, ok := usageKeys[m.key]; ok && (bit == fPrompt || bit == fCompletion || !ollama) &&
			(ollama == (m.key == "prompt_eval_count" || m.key == "eval_count")) {
			u.count(bit, m.val)
		}
		if d, ok := m.val.(object); ok && !ollama && (m.key == "prompt_tokens_details" || m.key == "input_tokens_details") {
			for _, dm := range d {
				if dm.key == "cached_tokens" {
					u.count(fCached, dm.val)
				}
			}
		}
	}
}

func nonEmpty(v any) bool {
	s, ok := v.(string)
	return ok && s != ""
}

// container reports an object or an array.
func container(v any) bool {
	switch v.(type) {
	case object, []any:
		return true
	}
	return false
}

// toolCalls reports a tool_calls array with an element that is a
// container (a call).
func toolCalls(v any) bool {
	a, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range a {
		if container(e) {
			return true
		}
	}
	return false
}

// finishOf sets a finish reason from a finish_reason, stop_reason or
// done_reason value: a string maps to one, anything else unsets it.
func finishOf(r *reasonSeen, v any) {
	if s, ok := v.(string); ok {
		*r = reasonSeen{true, finishReason([]byte(s), len(s) > maxValue)}
		return
	}
	if !container(v) {
		*r = reasonSeen{}
	}
}

func errorValue(v any) bool { return v != nil && v != false }

// openAIFacts reads a chat or text completion document.
func openAIFacts(root object) (f facts) {
	for _, m := range root {
		switch m.key {
		case "choices":
			choices, _ := m.val.([]any)
			for _, c := range choices {
				choice, ok := c.(object)
				if !ok {
					continue
				}
				var fin reasonSeen
				for _, cm := range choice {
					switch cm.key {
					case "text":
						f.content = f.content || nonEmpty(cm.val)
					case "finish_reason":
						finishOf(&fin, cm.val)
					case "delta", "message":
						d, _ := cm.val.(object)
						for _, dm := range d {
							switch dm.key {
							case "content", "reasoning_content", "reasoning", "refusal":
								f.content = f.content || nonEmpty(dm.val)
							case "tool_calls":
								f.content = f.content || toolCalls(dm.val)
							case "function_call":
								f.content = f.content || container(dm.val)
							}
						}
					}
				}
				if fin.ok {
					f.finish.merge(fin.reason)
				}
			}
		case "usage":
			if u, ok := m.val.(object); ok {
				f.usage.usageObject(u, false)
			}
		case "error":
			f.errSeen = f.errSeen || errorValue(m.val)
		case "timings":
			t, _ := m.val.(object)
			for _, tm := range t {
				if n, ok, _ := pyCount(tm.val); ok && tm.key == "cache_n" {
					f.cacheN, f.hasCacheN = n, true
				}
			}
		}
	}
	return f
}

// eventFacts reads a Responses API or Anthropic document, whose root
// context recurs (a response in an event, a message in an event), at a
// depth: a container of a known context deeper than the scanner keeps
// makes it bad.
func eventFacts(f *facts, o object, anthropic bool, depth int) {
	known := func(v any, levels int) bool {
		if depth+levels >= maxDepth && container(v) {
			f.bad = true
		}
		return !f.bad
	}
	for _, m := range o {
		switch m.key {
		case "type":
			if s, ok := m.val.(string); ok {
				f.event = eventType([]byte(s), len(s) > maxValue)
			}
		case "error":
			f.errSeen = f.errSeen || errorValue(m.val)
		case "usage":
			if u, ok := m.val.(object); ok && known(u, 1) {
				for _, um := range u {
					if um.key == "prompt_tokens_details" || um.key == "input_tokens_details" {
						known(um.val, 2)
					}
				}
				f.usage.usageObject(u, false)
			}
		case "response", "message":
			if r, ok := m.val.(object); ok && (m.key == "message") == anthropic && known(r, 1) {
				eventFacts(f, r, anthropic, depth+1)
			}
		}
		if anthropic {
			switch m.key {
			case "stop_reason":
				finishOf(&f.finish, m.val)
			case "delta":
				if d, ok := m.val.(object); ok && known(d, 1) {
					for _, dm := range d {
						switch dm.key {
						case "text", "thinking", "partial_json":
							f.content = f.content || nonEmpty(dm.val)
						case "stop_reason":
							finishOf(&f.finish, dm.val)
						}
					}
				}
			}
			continue
		}
		switch m.key {
		case "delta":
			f.deltaText = f.deltaText || nonEmpty(m.val)
		case "status":
			if s, ok := m.val.(string); ok {
				f.status = responseStatus([]byte(s))
			}
		case "incomplete_details":
			if d, ok := m.val.(object); ok && known(d, 1) {
				for _, dm := range d {
					if s, ok := dm.val.(string); ok && dm.key == "reason" {
						f.filtered = s == "content_filter"
					}
				}
			}
		}
	}
}

// ollamaFacts reads a document of Ollama's native API.
func ollamaFacts(root object) (f facts) {
	f.usage.usageObject(root, true)
	for _, m := range root {
		switch m.key {
		case "message":
			msg, _ := m.val.(object)
			for _, mm := range msg {
				switch mm.key {
				case "content", "thinking":
					f.content = f.content || nonEmpty(mm.val)
				case "tool_calls":
					f.content = f.content || toolCalls(mm.val)
				}
			}
		case "response", "thinking":
			f.content = f.content || nonEmpty(m.val)
		case "tool_calls":
			f.content = f.content || toolCalls(m.val)
		case "done":
			f.done = m.val == true
		case "done_reason":
			finishOf(&f.finish, m.val)
		case "error":
			f.errSeen = f.errSeen || errorValue(m.val)
		}
	}
	return f
}

// expect folds the documents of a response of a dialect as the package
// documents it: content chunks (streamed), the worst finish reason, an
// error, the last whole usage (Anthropic's fields merged over events,
// Ollama's from its done document); complete says the body said all it had
// to (a whole document, [DONE]), which makes a response without a finish
// reason stop, not an error.
func expect(dialect uint8, streaming bool, docs []object, complete bool) outcome {
	var out outcome
	var finish reasonSeen
	var errSeen bool
	var usage usageFacts
	var anth [5]int64
	var anthHas uint16
	var cacheN int64
	var hasCacheN bool
	for i, d := range docs {
		var f facts
		switch dialect {
		case dOpenAI:
			f = openAIFacts(d)
		case dResponses, dAnthropic:
			eventFacts(&f, d, dialect == dAnthropic, 0)
		case dOllama, dOllamaEmbed:
			f = ollamaFacts(d)
		}
		if f.bad {
			continue
		}
		content := streaming && f.content
		switch dialect {
		case dResponses:
			f.finish = responseFinish(&doc{status: f.status, filtered: f.filtered})
			content = f.deltaText && f.event == evDelta
		case dOllama:
			if f.done && !f.finish.ok {
				f.finish = reasonSeen{true, stats.FinishStop}
			}
			content = f.content && (!f.done || i > 0)
		}
		if content {
			out.chunks++
		}
		complete = complete || (dialect == dAnthropic && f.event == evMessageStop)
		if f.finish.ok {
			finish.merge(f.finish.reason)
		}
		errSeen = errSeen || f.errSeen || f.event == evError
		if f.hasCacheN {
			cacheN, hasCacheN = f.cacheN, true
		}
		u := f.usage
		switch {
		case u.bad:
		case dialect == dAnthropic && u.seen:
			for _, bit := range []uint16{fPrompt, fCompletion, fCacheRead, fCacheCreation} {
				if u.has&bit != 0 {
					anth[bitIndex(bit)], anthHas = u.counts[bitIndex(bit)], anthHas|bit
				}
			}
			if anthHas&(fPrompt|fCompletion) == fPrompt|fCompletion {
				usage = usageFacts{seen: true, has: fPrompt | fCompletion | anthHas&fCacheRead}
				usage.counts[bitIndex(fPrompt)] = anth[bitIndex(fPrompt)] + anth[bitIndex(fCacheRead)] + anth[bitIndex(fCacheCreation)]
				usage.counts[bitIndex(fCompletion)] = anth[bitIndex(fCompletion)]
				usage.counts[bitIndex(fCached)] = anth[bitIndex(fCacheRead)]
				if anthHas&fCacheRead != 0 {
					usage.has |= fCached
				}
			}
		case dialect == dOllama:
			if f.done && u.has&(fPrompt|fCompletion) != 0 {
				usage = u
				usage.seen, usage.has = true, u.has|fPrompt
			}
		case dialect == dOllamaEmbed:
			if u.has&fPrompt != 0 {
				usage = u
				usage.seen, usage.counts[bitIndex(fCompletion)] = true, 0
			}
		case u.seen && u.has&fPrompt != 0:
			usage = u
		}
	}
	switch {
	case errSeen:
		out.reason = stats.FinishError
	case finish.ok:
		out.reason = finish.reason
	case complete:
		out.reason = stats.FinishStop
	default:
		out.reason = stats.FinishError
	}
	if usage.seen {
		out.usage = true
		out.prompt, out.completion = usage.counts[bitIndex(fPrompt)], usage.counts[bitIndex(fCompletion)]
		switch {
		case usage.has&fCached != 0:
			out.cached = usage.counts[bitIndex(fCached)]
		case usage.has&fNumCached != 0 && dialect != dAnthropic:
			out.cached = usage.counts[bitIndex(fNumCached)]
		case hasCacheN && dialect == dOpenAI:
			out.cached = cacheN
		}
	}
	return out
}

// fuzzResponse is the body of each response fuzz target: framing is how
// the body frames its documents when it is streamed (sse), else it is one
// JSON document (Ollama: NDJSON either way).
func fuzzResponse(f *testing.F, ep endpoint) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b, bytes.HasPrefix(bytes.TrimSpace(b), []byte("data:")) || bytes.Contains(b, []byte("\nevent:")), uint8(len(b)))
	}
	f.Fuzz(func(t *testing.T, body []byte, sse bool, step uint8) {
		framing := framingJSON
		switch {
		case ep.dialect == dOllama:
			framing, sse = framingNDJSON, false
		case sse:
			framing = framingSSE
		}
		got := observeBody(ep, sse, body, int(step)%64+1)
		docs, ok := documents(body, framing)
		if !ok {
			return
		}
		if framing == framingJSON && len(docs) == 0 {
			return // not an object: an error, as a cut body
		}
		complete := framing == framingJSON || (framing == framingSSE && sentDone(body))
		if want := expect(ep.dialect, sse, docs, complete); got != want {
			t.Errorf("%q (sse %v, step %d):\nobserved %+v\nwant     %+v", body, sse, int(step)%64+1, got, want)
		}
	})
}

// sentDone reports an event stream with a whole line "data: [DONE]" (one
// optional space after the colon, spaces around the mark).
func sentDone(body []byte) bool {
	for len(body) > 0 {
		i := bytes.IndexAny(body, "\r\n")
		if i < 0 {
			return false // a line without its end is not read
		}
		line := body[:i]
		body = body[i+1:]
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if len(v) > 0 && v[0] == '[' && string(bytes.TrimSpace(v)) == "[DONE]" {
				return true
			}
		}
	}
	return false
}

func FuzzOpenAIResponse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"text":"a","finish_reason":"length"},{"index":1,"message":{"content":"b","tool_calls":[{}]},"finish_reason":null}],`+
		`"usage":{"prompt_tokens":5,"completion_tokens":null,"prompt_tokens_details":{"cached_tokens":7}},"timings":{"cache_n":3},"error":null}`), false, uint8(9))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"x\",\"function_call\":[]},\"finish_reason\":\"stop\"}]}\r\n\r\n"+
		"data: {\"choices\":[],\r\ndata: \"usage\":{\"input_tokens\":3,\"output_tokens\":1}}\r\r: c\ndata: [DONE]\n\n"), true, uint8(3))
	for _, doc := range []string{
		`{"choices":[1,"x",null,{"text":"a","finish_reason":5},{"delta":{"tool_calls":[1]},"finish_reason":"length"}],"usage":null,"error":0}`,
		`{"choices":[{"delta":{"content":"\u0000"}}],"usage":{"prompt_tokens":134217728,"prompt_tokens_details":null}}`,
		`{"choices":[],"usage":{"prompt_tokens":134217729,"completion_tokens":1}}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":"5"}}}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1e3}}`,
		`{"choices":[{"delta":{"content":"a","x":` + strings.Repeat("[", 60) + strings.Repeat("]", 60) + `}}],"error":[]}`,
	} {
		f.Add([]byte(doc), false, uint8(5))
		f.Add([]byte("data: "+doc+"\n\n"), true, uint8(5))
	}
	fuzzResponse(f, endpoint{stats.OperationChat, dOpenAI})
}

func FuzzResponsesAPIResponse(f *testing.F) {
	f.Add([]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"+
		"data: {\"type\":\"response.completed\",\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},"+
		"\"usage\":{\"input_tokens\":4,\"output_tokens\":2,\"input_tokens_details\":{\"cached_tokens\":1}}}}\n\n"), true, uint8(5))
	f.Add([]byte(`{"object":"response","status":"completed","usage":{"input_tokens":4,"output_tokens":0},"error":{"code":"x"}}`), false, uint8(64))
	for _, doc := range []string{
		`{"type":"response.completed","status":"failed","response":{"status":"completed","incomplete_details":{"reason":5}}}`,
		`{"response":{"status":"incomplete"},"status":"cancelled","type":"x.delta","delta":""}`,
		`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"content_filter"},"usage":{"input_tokens":2}}}`,
	} {
		f.Add([]byte("data: "+doc+"\n\n"), true, uint8(5))
	}
	fuzzResponse(f, endpoint{stats.OperationChat, dResponses})
}

func FuzzAnthropicResponse(f *testing.F) {
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"+
		"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"t\"}}\n\n"+
		"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":4,\"cache_read_input_tokens\":2}}\n\n"+
		"data: {\"type\":\"message_stop\"}\n\n"), true, uint8(7))
	f.Add([]byte(`{"type":"message","stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":2,"cache_creation_input_tokens":null}}`), false, uint8(2))
	f.Add([]byte(`data: {"type":"message_start","message":{"usage":{"input_tokens":5}}}`+"\n\n"+
		`data: {"type":"message_delta","usage":{"output_tokens":2,"cache_read_input_tokens":null,"input_tokens":null}}`+"\n\n"+
		`data: {"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":3,"cache_read_input_tokens":1}}`+"\n\n"), true, uint8(4))
	fuzzResponse(f, endpoint{stats.OperationChat, dAnthropic})
}

func FuzzOllamaEmbedResponse(f *testing.F) {
	f.Add([]byte(`{"model":"all-minilm","embeddings":[[0.1,-0.2]],"total_duration":1,"load_duration":1,"prompt_eval_count":8}`), false, uint8(5))
	f.Add([]byte(`{"model":"all-minilm","embeddings":[]}`), false, uint8(64))
	f.Add([]byte(`{"embedding":[0.5,0.25]}`), false, uint8(3))
	f.Add([]byte(`{"prompt_eval_count":"8","done":true,"done_reason":"length","response":"a"}`), true, uint8(2))
	fuzzResponse(f, endpoint{stats.OperationEmbeddings, dOllamaEmbed})
}

func FuzzOllamaResponse(f *testing.F) {
	f.Add([]byte(`{"message":{"content":"a","tool_calls":[[]]},"done":false}`+"\n"+`{"response":"","done":true,"done_reason":"length","prompt_eval_count":4,"eval_count":null}`+"\n"), false, uint8(11))
	f.Add([]byte(`{"response":"a","done":1}`+"\n"+`{"done":true,"done_reason":null,"prompt_eval_count":4}`+"\n"), false, uint8(3))
	fuzzResponse(f, endpoint{stats.OperationChat, dOllama})
}
