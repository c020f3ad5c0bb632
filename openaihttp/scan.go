package openaihttp

import (
	"bytes"
	"math"

	"github.com/infermetrics/infermetrics/stats"
)

// jsonScan is an incremental JSON scanner that extracts the few fields this
// package reads from OpenAI-compatible requests and responses, in constant
// memory: fed any split of a document, it keeps only its state, a short key
// and a short captured value, never the document. Strings it does not
// capture (message content) are skipped, not buffered. Input that is not
// JSON makes it stop reading the document (bad); it never fails otherwise.
type jsonScan struct {
	st    uint8
	depth int
	stack [maxDepth]uint8 // per open container: its context, with arrayBit
	role  uint8           // role of the value being read
	key   [maxKey]byte
	klen  int
	val   [maxValue]byte
	vlen  int
	slen  int // length of the string value being read
	over  bool
	d     doc
}

const (
	maxDepth = 32
	maxKey   = 32
	maxValue = 256 // a model name (instrument.MaxModelNameLen)
	arrayBit = 0x80
)

// doc is what one document told.
type doc struct {
	content   bool // a choice carried output (text, content, reasoning, tool calls)
	hasFinish bool
	finish    stats.FinishReason
	errSeen   bool // a non-null top-level "error"

	usageSeen, usageBad, hasPrompt, hasCompletion bool
	prompt, completion, cached                    int64

	// Request fields.
	model                       [maxValue]byte
	modelLen                    int
	hasStream, stream           bool
	n, maxTokens                int64
	streamOptions, includeUsage bool
}

// usage returns the document's usage when it is whole and consistent.
func (d *doc) usage() (prompt, completion, cached int64, ok bool) {
	if !d.usageSeen || d.usageBad || !d.hasPrompt || !d.hasCompletion || d.cached > d.prompt {
		return 0, 0, 0, false
	}
	return d.prompt, d.completion, d.cached, true
}

// Scanner states.
const (
	stValue     uint8 = iota // a value is expected
	stObjFirst               // after '{': a key or '}'
	stObjKey                 // after ',' in an object: a key
	stKey                    // in a key
	stKeyEsc                 // after '\' in a key
	stColon                  // after a key
	stArrFirst               // after '[': a value or ']'
	stString                 // in a string value
	stStringEsc              // after '\' in a string value
	stScalar                 // in a number or literal
	stAfter                  // after a value: ',' or a close
	stBad                    // not JSON, or too deep: ignore the rest
)

// Contexts: the container a key or element is read in.
const (
	cOther uint8 = iota
	cRoot
	cChoices
	cChoice
	cDelta
	cToolCalls
	cUsage
	cDetails
	cStreamOptions
)

// Roles: what a value means.
const (
	rNone uint8 = iota
	rRoot
	rChoices
	rChoice
	rDelta
	rContent
	rToolCalls
	rToolCall
	rFinish
	rUsage
	rPrompt
	rCompletion
	rDetails
	rCached
	rError
	rModel
	rStream
	rN
	rMaxTokens
	rStreamOptions
	rIncludeUsage
)

// reset readies the scanner for a new document.
func (s *jsonScan) reset() { *s = jsonScan{} }

// bad reports a scanner that stopped reading the document.
func (s *jsonScan) bad() bool { return s.st == stBad }

// started reports a scanner that has read part of a document.
func (s *jsonScan) started() bool { return s.depth > 0 || s.st != stValue }

// feed scans p and returns how many bytes it read: all of them, or up to
// and including the byte that completed the document (complete true).
func (s *jsonScan) feed(p []byte) (n int, complete bool) {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch s.st {
		case stBad:
			return len(p), false
		case stValue, stArrFirst:
			if isSpace(c) {
				continue
			}
			if s.st == stArrFirst && c == ']' {
				if s.close() {
					return i + 1, true
				}
				continue
			}
			if s.depth == 0 {
				if c != '{' {
					s.st = stBad
					continue
				}
				s.role = rRoot
			}
			s.begin(c)
		case stObjFirst, stObjKey:
			switch {
			case isSpace(c):
			case c == '"':
				s.st, s.klen, s.over = stKey, 0, false
			case c == '}' && s.st == stObjFirst:
				if s.close() {
					return i + 1, true
				}
			default:
				s.st = stBad
			}
		case stKey:
			switch c {
			case '"':
				s.st = stColon
			case '\\':
				s.st = stKeyEsc
			default:
				if s.klen < maxKey {
					s.key[s.klen] = c
					s.klen++
				} else {
					s.over = true
				}
			}
		case stKeyEsc:
			s.over = true // an escaped key is none this package reads
			s.st = stKey
		case stColon:
			switch {
			case isSpace(c):
			case c == ':':
				s.role = rNone
				if !s.over {
					s.role = keyRole(s.stack[s.depth-1], s.key[:s.klen])
				}
				s.st = stValue
			default:
				s.st = stBad
			}
		case stString:
			// Skip to the next quote or backslash in bulk.
			j := bytes.IndexAny(p[i:], `"\`)
			if j < 0 {
				s.take(p[i:])
				return len(p), false
			}
			s.take(p[i : i+j])
			i += j
			if p[i] == '\\' {
				s.st = stStringEsc
				continue
			}
			s.endString()
		case stStringEsc:
			s.take(p[i : i+1])
			s.st = stString
		case stScalar:
			if c == ',' || c == '}' || c == ']' || isSpace(c) {
				s.endScalar()
				i-- // the delimiter is read in stAfter
				continue
			}
			s.capture(c)
		case stAfter:
			switch {
			case isSpace(c):
			case c == ',':
				if s.stack[s.depth-1]&arrayBit != 0 {
					s.st, s.role = stValue, elementRole(s.stack[s.depth-1])
				} else {
					s.st = stObjKey
				}
			case c == '}' || c == ']':
				if (c == ']') != (s.stack[s.depth-1]&arrayBit != 0) {
					s.st = stBad
					continue
				}
				if s.close() {
					return i + 1, true
				}
			default:
				s.st = stBad
			}
		}
	}
	return len(p), false
}

// begin starts a value whose first byte is c, of role s.role.
func (s *jsonScan) begin(c byte) {
	switch c {
	case '{', '[':
		if s.depth == maxDepth {
			s.st = stBad
			return
		}
		ctx := containerContext(s.role, c == '[')
		switch s.role {
		case rError:
			s.d.errSeen = true
		case rToolCall:
			s.d.content = true
		case rUsage:
			s.d.usageSeen = true
		case rStreamOptions:
			s.d.streamOptions = true
		}
		if c == '[' {
			s.stack[s.depth] = ctx | arrayBit
			s.st, s.role = stArrFirst, elementRole(ctx|arrayBit)
		} else {
			s.stack[s.depth] = ctx
			s.st = stObjFirst
		}
		s.depth++
	case '"':
		s.st, s.vlen, s.slen, s.over = stString, 0, 0, false
	default:
		s.st, s.vlen, s.over = stScalar, 0, false
		s.capture(c)
	}
}

// close ends the innermost container and reports whether it ended the
// document.
func (s *jsonScan) close() bool {
	s.depth--
	s.st = stAfter
	return s.depth == 0
}

func (s *jsonScan) take(b []byte) {
	s.slen += len(b)
	if s.role == rFinish || s.role == rModel {
		for _, c := range b {
			s.capture(c)
		}
	}
}

func (s *jsonScan) capture(c byte) {
	if s.vlen < maxValue {
		s.val[s.vlen] = c
		s.vlen++
	} else {
		s.over = true
	}
}

func (s *jsonScan) endString() {
	s.st = stAfter
	v := s.val[:s.vlen]
	switch s.role {
	case rContent:
		if s.slen > 0 {
			s.d.content = true
		}
	case rFinish:
		s.d.hasFinish, s.d.finish = true, finishReason(v, s.over)
	case rError:
		s.d.errSeen = true
	case rModel:
		if !s.over && s.d.modelLen == 0 {
			s.d.modelLen = copy(s.d.model[:], v)
		}
	case rPrompt, rCompletion, rCached:
		s.d.usageBad = true // a count must be a number
	}
}

func (s *jsonScan) endScalar() {
	s.st = stAfter
	v := s.val[:s.vlen]
	null := string(v) == "null"
	switch s.role {
	case rError:
		if !null && string(v) != "false" {
			s.d.errSeen = true
		}
	case rPrompt, rCompletion, rCached:
		if null && s.role == rCached {
			return
		}
		n, ok := parseCount(v, s.over)
		if !ok {
			s.d.usageBad = true
			return
		}
		switch s.role {
		case rPrompt:
			s.d.prompt, s.d.hasPrompt = n, true
		case rCompletion:
			s.d.completion, s.d.hasCompletion = n, true
		default:
			s.d.cached = n
		}
	case rN:
		if n, ok := parseCount(v, s.over); ok {
			s.d.n = n
		}
	case rMaxTokens:
		if n, ok := parseCount(v, s.over); ok {
			s.d.maxTokens = n
		}
	case rStream:
		s.d.hasStream, s.d.stream = true, string(v) == "true"
	case rIncludeUsage:
		s.d.includeUsage = string(v) == "true"
	}
}

// keyRole is the role of the value of a key read in a context.
func keyRole(ctx uint8, key []byte) uint8 {
	switch ctx {
	case cRoot:
		switch string(key) {
		case "choices":
			return rChoices
		case "usage":
			return rUsage
		case "error":
			return rError
		case "model":
			return rModel
		case "stream":
			return rStream
		case "n":
			return rN
		case "max_tokens", "max_completion_tokens":
			return rMaxTokens
		case "stream_options":
			return rStreamOptions
		}
	case cChoice:
		switch string(key) {
		case "finish_reason":
			return rFinish
		case "delta", "message":
			return rDelta
		case "text":
			return rContent
		}
	case cDelta:
		switch string(key) {
		case "content", "reasoning_content", "reasoning", "refusal":
			return rContent
		case "tool_calls":
			return rToolCalls
		case "function_call":
			return rToolCall
		}
	case cUsage:
		switch string(key) {
		case "prompt_tokens":
			return rPrompt
		case "completion_tokens":
			return rCompletion
		case "prompt_tokens_details":
			return rDetails
		}
	case cDetails:
		if string(key) == "cached_tokens" {
			return rCached
		}
	case cStreamOptions:
		if string(key) == "include_usage" {
			return rIncludeUsage
		}
	}
	return rNone
}

// containerContext is the context a container of a role opens.
func containerContext(role uint8, array bool) uint8 {
	switch {
	case role == rRoot && !array:
		return cRoot
	case role == rChoices && array:
		return cChoices
	case role == rChoice && !array:
		return cChoice
	case role == rDelta && !array:
		return cDelta
	case role == rToolCalls && array:
		return cToolCalls
	case role == rUsage && !array:
		return cUsage
	case role == rDetails && !array:
		return cDetails
	case role == rStreamOptions && !array:
		return cStreamOptions
	}
	return cOther
}

// elementRole is the role of the elements of an array context.
func elementRole(ctx uint8) uint8 {
	switch ctx &^ arrayBit {
	case cChoices:
		return rChoice
	case cToolCalls:
		return rToolCall
	}
	return rNone
}

// finishReason maps an OpenAI finish_reason to vLLM's: tool_calls,
// function_call, content_filter and any other value a server invents end a
// generation normally, as stop.
func finishReason(v []byte, over bool) stats.FinishReason {
	if over {
		return stats.FinishStop
	}
	switch string(v) {
	case "length":
		return stats.FinishLength
	case "abort", "cancelled", "canceled":
		return stats.FinishAbort
	case "error":
		return stats.FinishError
	case "repetition":
		return stats.FinishRepetition
	}
	return stats.FinishStop
}

// parseCount parses a non-negative JSON integer (an exponent or fraction is
// not a count).
func parseCount(v []byte, over bool) (int64, bool) {
	if over || len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' || n > (math.MaxInt64-9)/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
