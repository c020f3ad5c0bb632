package openaihttp

import (
	"bytes"
	"context"
	"math/bits"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// gapRecorder records inter-chunk times of an operation: an
// *instrument.Backend (client side), or an engineGaps (server side).
type gapRecorder interface {
	RecordChunkGap(ctx context.Context, op stats.Operation, seconds float64)
}

// engineGaps records inter-chunk times on an Engine, whose
// vllm:inter_token_latency_seconds has no operation.
type engineGaps struct{ e *instrument.Engine }

func (g engineGaps) RecordChunkGap(ctx context.Context, _ stats.Operation, seconds float64) {
	g.e.RecordChunkGap(ctx, seconds)
}

// observer follows one response as its bytes pass: the content chunks and
// their times, the finish reason, the usage and whether it completed. It
// keeps no part of the body: its memory is constant.
type observer struct {
	ep          endpoint // from the path
	start       time.Time
	first, last time.Duration // the first and last content chunk, from start
	now         time.Duration // the time of the bytes being written, once taken (at)
	timed       bool          // now is taken
	chunks      int64
	choices     choiceTimes
	bodyFacts

	// sc is where in the body's framing and JSON the observer stands: nil
	// until it reads bytes itself (a handler that takes what a transport
	// read never does, see share.go).
	sc *scanner
	// pub, when not nil, gets the content chunks and dropped values of
	// each document read (a leg publishing for its handler, see share.go).
	pub *feed

	gaps  gapRecorder
	ctx   context.Context
	onErr func(error) // values a response sent beyond the bounds (ErrDropped)
	// trace, when not nil, is the request's Trace, by which a handler and
	// the leg it passes on report a response's drops once (Trace.once);
	// handler says the observer is the handler's.
	trace   *Trace
	handler bool

	// resp is the model the response named (gen_ai.response.model), the
	// first one; respLen 0 when none yet.
	resp    [maxValue]byte
	respLen int

	// errDoc says the body is that of a status of 400 or above: one error
	// document, read up to maxErrorBody bytes (errBytes so far); gateway
	// that a server in between marked it as its own rate limit.
	errDoc   bool
	errBytes int
	gateway  bool
}

// bodyFacts are what the bytes of a body told so far, their times aside:
// what a handler takes from the leg it passes on (see share.go).
type bodyFacts struct {
	streaming bool // SSE: content chunks are counted
	sniff     bool // the first byte of the body says whether it is SSE (see kind)
	bomN      int  // bytes of the body matched against a leading byte order mark; 3 once past it
	docs      int64

	finish  reasonSeen // the worst of the documents'
	errSeen bool       // an error document or event (a provider's error body)
	// errClass is what the errors read named (errNone, ...: errors.go).
	errClass uint8
	done     bool // [DONE], message_stop, Ollama's done, or the JSON document ended
	usage    struct {
		known              bool
		prompt, completion int64
		// details are the kinds the usage broke out
		// (stats.ObservedRequest.Details): cache reads whenever a cached
		// count was reported, cache writes, reasoning, audio
		// and image tokens.
		details stats.TokenUsage
	}
	anth      doc // Anthropic: usage fields merged over the events
	cacheN    int64
	hasCacheN bool
	// remoteCached is vLLM's kv_transfer_params.remote_prefill_cached_tokens
	// (hasRemoteCached: the last document that had one).
	remoteCached    int64
	hasRemoteCached bool
	server          struct {
		known           bool
		prefill, decode float64
	}
}

// scanner is the state of an observer's reading of the body: its SSE line
// and its JSON document.
type scanner struct {
	js  jsonScan
	sse sseState
}

// reset readies s for a body of ep, as a new scanner is.
func (s *scanner) reset(ep endpoint) {
	s.js = jsonScan{root: ep.rootContext()}
	s.sse = sseState{empty: true}
}

// clean reports a scanner between documents and SSE lines: it reads on as
// a new one would (what it keeps of the last document, pre and last, only
// saves work).
func (s *scanner) clean() bool { return s.sse == sseState{empty: true} && !s.js.started() }

// choiceTimes are the first and last content chunk times of each choice of
// a stream, in nanoseconds from the start, for the per-choice inter-chunk
// times (chunk) and, with n > 1, time per output token
// (stats.ObservedRequest.DecodeChoices).
type choiceTimes struct {
	seen        uint32
	many        bool // a choice beyond maxChoices: not timed one by one
	first, last [maxChoices]int64
}

// sseState is the line state of a text/event-stream body.
type sseState struct {
	line     uint8 // lineStart, lineData, lineDone, lineSkip
	field    [5]byte
	flen     int
	space    bool // after "data:": an optional space may follow
	empty    bool // the line has no byte yet
	cr       bool // the previous byte was '\r'
	doneBuf  [8]byte
	doneLen  int
	payload0 bool // the data line's payload has not started
}

const (
	lineStart uint8 = iota
	lineData
	lineDone
	lineSkip
)

func (o *observer) init(ep endpoint, start time.Time, streaming bool) {
	o.ep, o.start, o.streaming = ep, start, streaming
}

// kind says what the body is, from its Content-Type: an event stream; any
// other type (Ollama's NDJSON aside) is what the body's first byte says,
// '{' or '[' a JSON document and anything else SSE. OpenAI's API has sent
// streams as application/json (testdata/corpus, entries 0204-0206 and
// 0212), and its SDKs read a stream they asked for whatever its type; a
// body that is neither is an error either way.
func (o *observer) kind(contentType string) {
	o.streaming = strings.HasPrefix(contentType, "text/event-stream")
	o.sniff = !o.streaming && o.ep.dialect != dOllama
}

// failed takes in a response's status and header: the body of a status
// of 400 or above is read as an error document (see errors.go).
func (o *observer) failed(status int, h http.Header) {
	if status < 400 {
		return
	}
	o.errDoc, o.gateway = true, gatewayMarked(h)
	if o.sc != nil {
		o.sc.js.root = cErrRoot
	}
}

// write observes the next bytes of the body.
func (o *observer) write(p []byte) {
	o.timed = false
	if o.sc == nil {
		o.sc = new(scanner)
		o.sc.reset(o.ep)
		if o.errDoc {
			o.sc.js.root = cErrRoot
		}
	}
	if o.errDoc {
		p = p[:min(len(p), maxErrorBody-o.errBytes)]
		o.errBytes += len(p)
	}
	if o.bomN < len(utf8BOM) {
		p = o.skipBOM(p)
	}
	o.scan(p)
}

func (o *observer) scan(p []byte) {
	if o.errDoc {
		o.writeJSON(p)
		return
	}
	if o.sniff {
		i := 0
		for i < len(p) && isSpace(p[i]) {
			i++
		}
		if i == len(p) {
			return
		}
		o.sniff, o.streaming = false, p[i] != '{' && p[i] != '['
		p = p[i:]
	}
	if o.streaming {
		o.writeSSE(p)
		return
	}
	o.writeJSON(p)
}

// skipBOM returns p past the part of a leading UTF-8 byte order mark it
// holds, in whatever writes the mark comes. Bytes that only began like
// one are observed after all.
func (o *observer) skipBOM(p []byte) []byte {
	for ; len(p) > 0 && o.bomN < len(utf8BOM); p = p[1:] {
		if p[0] != utf8BOM[o.bomN] {
			held := utf8BOM[:o.bomN]
			o.bomN = len(utf8BOM)
			o.scan(held)
			return p
		}
		o.bomN++
	}
	return p
}

// writeJSON observes a JSON body: one document, or with Ollama a stream of
// them (NDJSON, or one document when not streamed).
func (o *observer) writeJSON(p []byte) {
	multi := o.ep.dialect == dOllama && !o.errDoc
	js := &o.sc.js
	for len(p) > 0 && (multi || !o.done) {
		n, complete := js.feed(p)
		p = p[n:]
		if complete {
			if multi {
				o.apply(&js.d, true)
				js.reset()
				continue
			}
			o.apply(&js.d, false)
			o.done = true
		}
		if js.bad() {
			return
		}
	}
}

func (o *observer) writeSSE(p []byte) {
	s := &o.sc.sse
	for len(p) > 0 {
		if s.line == lineStart && s.flen == 0 && !s.cr && !o.sc.js.started() { // between events
			if n := o.sameEvent(p); n > 0 {
				p = p[n:]
				continue
			}
		}
		if s.cr && p[0] == '\n' { // "\r\n" ends one line
			s.cr = false
			p = p[1:]
			continue
		}
		s.cr = false
		end := lineEnd(p)
		seg := p
		if end >= 0 {
			seg = p[:end]
		}
		o.lineBytes(seg)
		if end < 0 {
			return
		}
		o.endLine()
		s.cr = p[end] == '\r'
		p = p[end+1:]
	}
}

// sameEvent reads the event at p[0], between events, when it is a data
// line of a document the scanner takes whole (jsonScan.same: the last
// document's bytes around another content string) and an empty line, in
// one go as the line by line path would read it, and returns its length;
// 0 for any other event. The last document was read from one line, so only
// the new content string could break the line.
func (o *observer) sameEvent(p []byte) int {
	js := &o.sc.js
	if !js.last.ok || len(p) < 5 || string(p[:5]) != "data:" {
		return 0
	}
	i := 5
	if i < len(p) && p[i] == ' ' {
		i++
	}
	end, at, atEnd := js.sameEnd(p, i)
	if end == 0 {
		return 0
	}
	var blank int
	switch t := p[end:]; {
	case len(t) >= 2 && t[0] == '\n' && t[1] == '\n':
		blank = 2
	case len(t) >= 4 && string(t[:4]) == "\r\n\r\n":
		blank = 4
	default:
		return 0
	}
	for _, c := range p[at:atEnd] {
		if c == '\n' || c == '\r' {
			return 0
		}
	}
	o.apply(&js.last.d, true)
	return end + blank
}

// lineEnd returns the index of the first '\r' or '\n' in p, or -1.
func lineEnd(p []byte) int {
	n := bytes.IndexByte(p, '\n')
	q := p
	if n >= 0 {
		q = p[:n]
	}
	if r := bytes.IndexByte(q, '\r'); r >= 0 {
		return r
	}
	return n
}

// lineBytes observes bytes of the current line (no line break among them).
func (o *observer) lineBytes(seg []byte) {
	s, js := &o.sc.sse, &o.sc.js
	if len(seg) > 0 {
		s.empty = false
	}
	for len(seg) > 0 {
		switch s.line {
		case lineStart:
			if s.flen == 0 && len(seg) >= 5 && string(seg[:5]) == "data:" { // the whole field name at once
				seg = seg[5:]
				s.line, s.space, s.payload0 = lineData, true, true
				continue
			}
			c := seg[0]
			seg = seg[1:]
			if c == ':' && s.flen == 4 && string(s.field[:4]) == "data" {
				s.line, s.space, s.payload0 = lineData, true, true
				continue
			}
			if s.flen == 4 || c == ':' {
				s.line = lineSkip
				continue
			}
			s.field[s.flen] = c
			s.flen++
		case lineData:
			if s.space {
				s.space = false
				if seg[0] == ' ' {
					seg = seg[1:]
					continue
				}
			}
			if s.payload0 {
				s.payload0 = false
				if seg[0] == '[' && !js.started() {
					s.line = lineDone
					continue
				}
			}
			for len(seg) > 0 {
				n, complete := js.feed(seg)
				seg = seg[n:]
				if complete {
					o.apply(&js.d, true)
					js.reset()
				}
			}
		case lineDone:
			for _, c := range seg {
				if s.doneLen < len(s.doneBuf) {
					s.doneBuf[s.doneLen] = c
					s.doneLen++
				}
			}
			return
		case lineSkip:
			return
		}
	}
}

// endLine ends a line: an empty one ends an event. The data lines of an
// event are joined by a line feed, as the SSE standard joins them.
func (o *observer) endLine() {
	s, js := &o.sc.sse, &o.sc.js
	if s.line == lineDone && string(bytes.TrimSpace(s.doneBuf[:s.doneLen])) == "[DONE]" {
		o.done = true
	}
	if s.line == lineData && js.started() {
		js.feed(lineFeed)
	}
	if s.empty && js.started() {
		js.reset() // an event whose document did not complete: not JSON
	}
	if js.bad() {
		js.reset()
	}
	*s = sseState{empty: true}
}

var lineFeed = []byte{'\n'}

// at returns the time of the bytes being written, from the start: the
// monotonic clock is read once per write, at the first content chunk they
// complete. The documents of one write (one Write of the handler, one Read
// of the caller, one decoded block) arrive together: they are timed alike,
// the gaps between their content chunks 0.
func (o *observer) at() time.Duration {
	if !o.timed {
		o.now, o.timed = time.Since(o.start), true
	}
	return o.now
}

// apply takes in a complete document; timed is false for a document not
// streamed, whose content (if any) is no chunk in time.
func (o *observer) apply(d *doc, timed bool) {
	o.docs++
	if d.dropped != 0 {
		o.dropped(d.dropped)
	}
	finish := d.finish
	switch o.ep.dialect {
	case dResponses:
		finish = responseFinish(d)
	case dAnthropic:
		o.done = o.done || d.event == evMessageStop
	case dOllama:
		if d.done {
			o.done = true
			if !finish.ok {
				finish = reasonSeen{true, stats.FinishStop}
			}
		}
	}
	if finish.ok {
		o.finish.merge(finish.reason)
	}
	if d.errSeen || d.event == evError {
		o.errSeen = true
	}
	noteError(&o.errClass, d.errClass)
	o.applyUsage(d)
	if d.model && o.respLen == 0 {
		o.respLen = copy(o.resp[:], o.sc.js.resp[:o.sc.js.respLen])
	}
	if d.has&fCacheN != 0 {
		o.cacheN, o.hasCacheN = d.cacheN, true
	}
	if d.has&fRemoteCached != 0 {
		o.remoteCached, o.hasRemoteCached = d.remoteCached, true
	}
	if d.has&(fPrefill|fDecode) == fPrefill|fDecode || (d.done && d.has&(fPrefill|fDecode) != 0) {
		o.server.known, o.server.prefill, o.server.decode = true, d.prefill, d.decode
	}
	var content bool
	switch o.ep.dialect {
	case dResponses:
		content = d.deltaText && d.event == evDelta
	case dOllama:
		// A document not streamed is one, done: its content is no chunk.
		content = d.content && (!d.done || o.docs > 1)
	default:
		content = o.streaming && d.content
	}
	if content {
		o.content(timed, d.choices, d.manyChoices)
	}
}

// dropped reports the values a document dropped (ErrDropped).
func (o *observer) dropped(bits uint8) {
	if o.pub != nil {
		o.pub.dropped(bits)
	}
	o.reportDropped(bits)
}

// reportDropped reports values a document dropped, unless the other side
// of the trace reported the same already (Trace.once).
func (o *observer) reportDropped(bits uint8) {
	if o.onErr != nil && o.trace.once(drop{handler: o.handler, bits: bits}) {
		o.onErr(droppedErr("response", bits))
	}
}

// content counts a content chunk of the bytes being written, timed (see
// at) unless the document was not streamed.
func (o *observer) content(timed bool, choices uint32, many bool) {
	if o.pub != nil {
		o.pub.content(timed, choices, many)
	}
	var at time.Duration
	if timed {
		at = o.at()
	}
	o.chunk(at, choices, many)
}

// applyUsage takes in a document's usage. OpenAI-style usage (chat,
// completions, embeddings, pooling, the Responses API) counts when it has
// the prompt tokens, the last one winning; without completion_tokens (an
// empty completion, as OpenAI's API reports it) it generated none.
// Anthropic's is merged over the events, each field's
// last value winning (message_start, then message_delta); Ollama's is its
// final document's, its embeddings' the prompt_eval_count of its document.
func (o *observer) applyUsage(d *doc) {
	switch o.ep.dialect {
	case dAnthropic:
		if !d.usageSeen || d.usageBad {
			return
		}
		a := &o.anth
		for _, f := range [...]struct {
			bit      uint16
			dst, src *int64
		}{
			{fPrompt, &a.prompt, &d.prompt}, {fCompletion, &a.completion, &d.completion},
			{fCacheRead, &a.cacheRead, &d.cacheRead}, {fCacheCreation, &a.cacheCreation, &d.cacheCreation},
			{fReasoning, &a.reasoning, &d.reasoning},
		} {
			if d.has&f.bit != 0 {
				*f.dst, a.has = *f.src, a.has|f.bit
			}
		}
		if a.has&(fPrompt|fCompletion) != fPrompt|fCompletion {
			return
		}
		// input_tokens is the uncached part (vLLM since PR #40912, as
		// Anthropic defines it): the prompt is its sum with the cache reads
		// and writes; the cache reads are the cached tokens, the cache
		// writes (cache_creation_input_tokens) the tokens of kind
		// cache_write.
		u := &o.usage
		u.known, u.prompt, u.completion = true, a.prompt+a.cacheRead+a.cacheCreation, a.completion
		u.details = a.details(fCacheRead, a.cacheRead, fCacheCreation, a.cacheCreation)
	case dOllama:
		if d.done && d.has&(fPrompt|fCompletion) != 0 && !d.usageBad {
			o.usage.known, o.usage.prompt, o.usage.completion = true, d.prompt, d.completion
		}
	case dOllamaEmbed:
		// /api/embed's prompt_eval_count, left out when 0 (an empty input);
		// the legacy /api/embeddings reports none.
		if d.has&fPrompt != 0 && !d.usageBad {
			o.usage.known, o.usage.prompt, o.usage.completion = true, d.prompt, 0
		}
	default:
		if !d.usageSeen || d.usageBad || d.has&fPrompt == 0 {
			return
		}
		u := &o.usage
		u.known, u.prompt, u.completion = true, d.prompt, d.completion
		readBit, read := fCached, d.cached
		if d.has&fCached == 0 && d.has&fNumCached != 0 {
			readBit, read = fNumCached, d.numCached // Mistral's: a part of the prompt too
		}
		u.details = d.details(readBit, read, fCacheWrite, d.cacheWrite)
	}
}

// details returns the kinds of tokens a usage reported apart, as
// stats.ObservedRequest.Details holds them: the cache reads (read, when
// the field of bit readBit was reported: OpenAI's cached_tokens,
// Anthropic's cache_read_input_tokens), the cache writes (write, of bit
// writeBit: cache_write_tokens, Anthropic's cache_creation_input_tokens),
// and the reasoning, audio and image tokens. A kind not reported is not
// set.
func (d *doc) details(readBit uint16, read int64, writeBit uint16, write int64) stats.TokenUsage {
	var u stats.TokenUsage
	for _, f := range [...]struct {
		bit  uint16
		kind stats.TokenKind
		n    int64
	}{
		{readBit, stats.TokenCacheRead, read},
		{writeBit, stats.TokenCacheWrite, write},
		{fReasoning, stats.TokenReasoning, d.reasoning},
		{fInAudio, stats.TokenInputAudio, d.inAudio},
		{fInImage, stats.TokenInputImage, d.inImage},
		{fOutAudio, stats.TokenOutputAudio, d.outAudio},
		{fOutImage, stats.TokenOutputImage, d.outImage},
	} {
		if d.has&f.bit != 0 {
			u.Set(f.kind, f.n)
		}
	}
	return u
}

// responseFinish is a Responses API document's finish: its response's
// status (completed, incomplete for max_output_tokens or content_filter,
// failed, cancelled).
func responseFinish(d *doc) reasonSeen {
	switch d.status {
	case stCompleted:
		return reasonSeen{true, stats.FinishStop}
	case stIncomplete:
		if d.filtered {
			return reasonSeen{true, stats.FinishStop}
		}
		return reasonSeen{true, stats.FinishLength}
	case stFailed:
		return reasonSeen{true, stats.FinishError}
	case stCancelled:
		return reasonSeen{true, stats.FinishAbort}
	}
	return reasonSeen{}
}

// add takes in a chunk's choices with output, at ns from the start.
func (c *choiceTimes) add(choices uint32, many bool, ns int64) {
	c.many = c.many || many
	for ; choices != 0; choices &= choices - 1 {
		i := bits.TrailingZeros32(choices)
		if c.seen&(1<<i) == 0 {
			c.seen |= 1 << i
			c.first[i] = ns
		}
		c.last[i] = ns
	}
}

// decode returns the number of choices timed and the sum of their
// first-to-last chunk times, in seconds; 0 choices unless more than one
// was timed, all of them.
func (c *choiceTimes) decode() (int64, float64) {
	if c.many || bits.OnesCount32(c.seen) < 2 {
		return 0, 0
	}
	var sum int64
	for i := range maxChoices {
		if c.seen&(1<<i) != 0 {
			sum += c.last[i] - c.first[i]
		}
	}
	return int64(bits.OnesCount32(c.seen)), max(time.Duration(sum).Seconds(), 0)
}

// reasonSeen is a finish reason, once one is known (ok).
type reasonSeen struct {
	ok     bool
	reason stats.FinishReason
}

// merge takes in the finish reason of one more choice: with n > 1, or a
// batch of prompts, the request's reason is its choices' worst (see rank),
// in one document as over several.
func (s *reasonSeen) merge(r stats.FinishReason) {
	if !s.ok || rank(r) > rank(s.reason) {
		s.ok, s.reason = true, r
	}
}

// rank orders finish reasons for a request of several choices: one choice
// at its length limit makes the request's reason length, as an abort or an
// error of one makes it abort or error.
func rank(r stats.FinishReason) int {
	switch r {
	case stats.FinishRepetition:
		return 1
	case stats.FinishLength:
		return 2
	case stats.FinishAbort:
		return 3
	case stats.FinishError:
		return 4
	}
	return 0
}

// chunk counts a content chunk at a time from the start, with output for
// choices (a bit per index below maxChoices) and, when many, for a choice
// beyond them. Its inter-chunk times are per choice, as vLLM's: from each
// choice's previous content chunk, none for a choice's first or one beyond
// maxChoices (not timed). A chunk of an API without choices is timed from
// the last chunk.
func (o *observer) chunk(at time.Duration, choices uint32, many bool) {
	if o.chunks == 0 {
		o.first = at
	}
	if choices == 0 && !many {
		if o.chunks > 0 {
			o.gap(at - o.last)
		}
	} else {
		ns := at.Nanoseconds()
		for timed := choices & o.choices.seen; timed != 0; timed &= timed - 1 {
			o.gap(time.Duration(ns - o.choices.last[bits.TrailingZeros32(timed)]))
		}
		o.choices.add(choices, many, ns)
	}
	o.last = at
	o.chunks++
}

// gap records an inter-chunk time.
func (o *observer) gap(d time.Duration) {
	if o.gaps != nil {
		o.gaps.RecordChunkGap(o.ctx, o.ep.op, d.Seconds())
	}
}

// end is how a response ended, as the caller saw it.
type end struct {
	status  int  // the HTTP status; 0 when no response came
	aborted bool // the client went away, or the caller closed the body early
	// cause is the error that ended it: the transport's (no response, or
	// the body cut), or the handler's request context's (the client went
	// away, or its deadline passed); nil for none.
	cause error
}

// result returns the observed request, ended at a time as e says; an end
// that is neither complete nor aborted (a failure, a cut) is an error.
func (o *observer) result(at time.Time, e end) stats.ObservedRequest {
	r := stats.ObservedRequest{Operation: o.ep.op, E2ELatency: nonNegative(at.Sub(o.start))}
	switch {
	case e.status >= 400 || o.errSeen:
		r.Reason = stats.FinishError
	case o.finish.ok:
		r.Reason = o.finish.reason
	case o.done:
		// Complete ([DONE], message_stop, Ollama's done, the document's
		// end) with no finish reason: embeddings and pooling, a background
		// Responses API response (queued), servers that send none
		// (Snowflake's streams): the server ended it normally.
		r.Reason = stats.FinishStop
	case e.aborted:
		r.Reason = stats.FinishAbort
	default: // truncated: ended without a finish reason, or failed
		r.Reason = stats.FinishError
	}
	r.ErrorType = o.errorType(r.Reason, e)
	if o.chunks > 0 {
		r.FirstToken = true
		r.TimeToFirstToken = nonNegative(o.first)
		r.TimeToLastToken = min(max(nonNegative(o.last), r.TimeToFirstToken), r.E2ELatency)
		r.TimeToFirstToken = min(r.TimeToFirstToken, r.TimeToLastToken)
		r.DecodeChoices, r.ChoicesDecodeTime = o.choices.decode()
	}
	// Cached tokens above the prompt are passed on as they came: the
	// recording drops them and says so (stats.ObservedRequest.Bounded).
	if u := o.usage; u.known {
		cached, cachedKnown := u.details.Get(stats.TokenCacheRead) // from usage, not timings
		r.UsageKnown, r.PromptTokens, r.GenerationTokens, r.CachedPromptTokens = true, u.prompt, u.completion, cached
		r.Details = u.details
		if !cachedKnown && o.hasCacheN {
			r.CachedPromptTokens = o.cacheN // llama.cpp's timings.cache_n
			r.Details.Set(stats.TokenCacheRead, o.cacheN)
		}
	}
	if o.respLen > 0 && utf8.Valid(o.resp[:o.respLen]) { // else none, as a model too long to read
		r.ResponseModel = string(o.resp[:o.respLen])
	}
	if o.server.known {
		r.ServerTimes, r.PrefillTime, r.DecodeTime = true, o.server.prefill, o.server.decode
	}
	return r
}

// prefillCached returns the prompt tokens a response reported cached for
// a decode instance (see Leg.PrefillCached): its
// kv_transfer_params.remote_prefill_cached_tokens, else its usage's
// cached_tokens; false when it reported neither.
func (o *observer) prefillCached() (int64, bool) {
	switch {
	case o.hasRemoteCached:
		return o.remoteCached, true
	case o.usage.known && o.usage.details.Has(stats.TokenCacheRead):
		return o.usage.details.Get(stats.TokenCacheRead)
	}
	return 0, false
}

// errorType is why a request that ended with reason failed (or was
// aborted): from its response when that said it failed (a status of 400 or
// above, an error in the stream: responseError), else from the error that
// ended it (causeType), else client_canceled when the client went away;
// none for an abort of no known cause (a finish reason abort the server
// sent), _OTHER for a failure of none (a stream cut while its client
// stayed).
func (o *observer) errorType(reason stats.FinishReason, e end) stats.ErrorType {
	switch {
	case reason != stats.FinishError && reason != stats.FinishAbort:
		return stats.ErrorNone
	case e.status >= 400 || o.errSeen:
		return responseError(e.status, o.errClass, o.errSeen, o.gateway)
	case e.cause != nil:
		return causeType(e.cause, e.status == 0)
	case e.aborted:
		return stats.ErrorClientCanceled
	case reason == stats.FinishAbort:
		return stats.ErrorNone
	}
	return stats.ErrorOther
}

// complete reports a response that said all it had to: a finish reason, or
// [DONE], or (not streamed) the end of its JSON document.
func (o *observer) complete() bool { return o.finish.ok || o.done }

func nonNegative(d time.Duration) float64 { return max(d.Seconds(), 0) }
