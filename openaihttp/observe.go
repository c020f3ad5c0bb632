package openaihttp

import (
	"bytes"
	"context"
	"time"

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
	op          stats.Operation // from the endpoint
	start       time.Time
	first, last time.Time
	chunks      int64
	streaming   bool // SSE: content chunks are counted

	js  jsonScan
	sse sseState

	hasFinish bool
	finish    stats.FinishReason
	errSeen   bool
	done      bool // [DONE], or the JSON document ended
	usage     struct {
		known                      bool
		prompt, completion, cached int64
	}

	gaps gapRecorder
	ctx  context.Context
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

func (o *observer) init(op stats.Operation, start time.Time, streaming bool) {
	o.op, o.start, o.streaming = op, start, streaming
	o.sse = sseState{empty: true}
}

// write observes the next bytes of the body.
func (o *observer) write(p []byte) {
	if o.streaming {
		o.writeSSE(p)
		return
	}
	o.writeJSON(p)
}

func (o *observer) writeJSON(p []byte) {
	for len(p) > 0 && !o.done {
		n, complete := o.js.feed(p)
		p = p[n:]
		if complete {
			o.apply(time.Time{})
			o.done = true
		}
		if o.js.bad() {
			return
		}
	}
}

func (o *observer) writeSSE(p []byte) {
	s := &o.sse
	for len(p) > 0 {
		if s.cr && p[0] == '\n' { // "\r\n" ends one line
			s.cr = false
			p = p[1:]
			continue
		}
		s.cr = false
		end := bytes.IndexAny(p, "\r\n")
		seg := p
		if end >= 0 {
			seg = p[:end]
		}
		o.lineBytes(seg)
		if end < 0 {
			return
		}
		s.cr = p[end] == '\r'
		o.endLine()
		p = p[end+1:]
	}
}

// lineBytes observes bytes of the current line (no line break among them).
func (o *observer) lineBytes(seg []byte) {
	s := &o.sse
	if len(seg) > 0 {
		s.empty = false
	}
	for len(seg) > 0 {
		switch s.line {
		case lineStart:
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
				if seg[0] == '[' && !o.js.started() {
					s.line = lineDone
					continue
				}
			}
			for len(seg) > 0 {
				n, complete := o.js.feed(seg)
				seg = seg[n:]
				if complete {
					o.apply(time.Now())
					o.js.reset()
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

// endLine ends a line: an empty one ends an event.
func (o *observer) endLine() {
	s := &o.sse
	if s.line == lineDone && string(bytes.TrimSpace(s.doneBuf[:s.doneLen])) == "[DONE]" {
		o.done = true
	}
	if s.empty && o.js.started() {
		o.js.reset() // an event whose document did not complete: not JSON
	}
	if o.js.bad() {
		o.js.reset()
	}
	*s = sseState{empty: true}
}

// apply takes in a complete document; at is the time of a streamed chunk.
func (o *observer) apply(at time.Time) {
	d := &o.js.d
	if d.hasFinish {
		// With n > 1 the request's reason is its choices' worst (see rank).
		if !o.hasFinish || rank(d.finish) > rank(o.finish) {
			o.finish = d.finish
		}
		o.hasFinish = true
	}
	if d.errSeen {
		o.errSeen = true
	}
	if p, c, cached, ok := d.usage(); ok {
		o.usage.known = true
		o.usage.prompt, o.usage.completion, o.usage.cached = p, c, cached
	}
	if o.streaming && d.content {
		o.chunk(at)
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

// chunk counts a content chunk at a time.
func (o *observer) chunk(at time.Time) {
	if o.chunks == 0 {
		o.first = at
	} else if o.gaps != nil {
		o.gaps.RecordChunkGap(o.ctx, o.op, at.Sub(o.last).Seconds())
	}
	o.last = at
	o.chunks++
}

// end is how a response ended, as the caller saw it.
type end struct {
	status  int  // the HTTP status
	aborted bool // the client went away, or the caller closed the body early
}

// result returns the observed request, ended at a time as e says; an end
// that is neither complete nor aborted (a failure, a cut) is an error.
func (o *observer) result(at time.Time, e end) stats.ObservedRequest {
	r := stats.ObservedRequest{Operation: o.op, E2ELatency: nonNegative(at.Sub(o.start))}
	switch {
	case e.status >= 400 || o.errSeen:
		r.Reason = stats.FinishError
	case o.hasFinish:
		r.Reason = o.finish
	case e.aborted:
		r.Reason = stats.FinishAbort
	default: // truncated: ended without a finish reason, or failed
		r.Reason = stats.FinishError
	}
	if o.chunks > 0 {
		r.FirstToken = true
		r.TimeToFirstToken = nonNegative(o.first.Sub(o.start))
		r.TimeToLastToken = min(max(nonNegative(o.last.Sub(o.start)), r.TimeToFirstToken), r.E2ELatency)
		r.TimeToFirstToken = min(r.TimeToFirstToken, r.TimeToLastToken)
	}
	if u := o.usage; u.known {
		r.UsageKnown, r.PromptTokens, r.GenerationTokens, r.CachedPromptTokens = true, u.prompt, u.completion, u.cached
	}
	return r
}

// complete reports a response that said all it had to: a finish reason, or
// [DONE], or (not streamed) the end of its JSON document.
func (o *observer) complete() bool { return o.hasFinish || o.done }

func nonNegative(d time.Duration) float64 { return max(d.Seconds(), 0) }
