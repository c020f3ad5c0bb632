package openaihttp

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// jsonScan is an incremental JSON scanner that extracts the few fields this
// package reads from requests and responses of the APIs it knows, in
// constant memory: fed any split of a document, it keeps only its state, a
// short key and a short captured value, never the document. Strings it does
// not capture (message content) are skipped, not buffered; the ones it
// captures (keys, a model name, a finish reason) have their escapes decoded
// as Python's json module decodes them. Input that is not JSON makes it stop
// reading the document (bad); it never fails otherwise.
type jsonScan struct {
	st     uint8
	inKey  bool  // the string being read is a key
	capStr bool  // the string being read is captured
	fresh  bool  // no byte of the string being read was taken yet
	keyR   uint8 // the role of the value of the key just read
	root   uint8 // the context of a document's root object (the dialect's)
	depth  int
	stack  [maxDepth]uint8 // per open container: its context, with arrayBit
	top    uint8           // the innermost open container's context, with arrayBit
	role   uint8           // role of the value being read
	klen   int
	kover  bool
	vlen   int
	over   bool
	slen   int   // length of the string value being read, decoded
	hex    rune  // the \u escape being read
	hexN   uint8 // its digits read
	hi     rune  // a high surrogate waiting for its low half
	key    [maxKey]byte
	val    [maxValue]byte
	d      doc

	// model is the request's model, req the rest it told, kept across
	// documents.
	model    [maxValue]byte
	modelLen int
	req      request
	// user is the request's "user" (OpenAI's end-user identifier) and
	// userID its "metadata.user_id" (Anthropic's), each cut to maxUser
	// bytes: a longer one is not a label value (see attribution).
	user, userID       [maxUser]byte
	userLen, userIDLen int

	// resp is the model a response names (gen_ai.response.model): the
	// first one, kept across documents; respLen is 0 until one is read. A
	// "model" read once is skipped after, so the members of a stream's
	// later chunks before their content stay a start nothing reads (pre).
	resp    [maxValue]byte
	respLen int

	// pre is the start of the last document whose first members nothing
	// reads (a streamed chunk's id, object, created and model), up to the
	// start of the key after them: a document that starts with the same
	// bytes is in the same state there, and is read on from it.
	pre    [maxPrefix]byte
	preLen int

	// last is the last document read whole from one feed, when it had one
	// non-empty content string with no escape (a streamed content chunk):
	// its bytes before the string and from the closing quote on, and what
	// it told. A document that is those bytes around another such string
	// tells the same (content is read for being non-empty, nothing more),
	// so it is taken whole (see same).
	last struct {
		bytes [maxLast]byte
		pre   int // bytes[:pre] before the string, bytes[pre:n] after it
		n     int
		ok    bool
		d     doc
	}
	// The current document while it lies in one feed's input: where it
	// began (-1: not in this input), and its content strings read in
	// place (contentN, at p[contentAt:contentEnd]) and not (contentElse).
	docBegin, contentAt, contentEnd int
	contentN                        int
	contentElse                     bool

	// deep continues stack beyond maxDepth, where no context is read: a
	// bit per open container, set for an array.
	deep [(maxNesting - maxDepth) / 8]uint8
}

const (
	maxDepth   = 32   // containers whose context is kept; below them only unknown ones
	maxNesting = 1024 // containers in all, as deep as Python's json reads (its recursion limit)
	maxKey     = 32
	maxValue   = 256 // a model name (instrument.MaxModelNameLen)
	maxUser    = instrument.MaxAttributionValueLen + 1
	maxPrefix  = 256
	maxLast    = 512
	arrayBit   = 0x80

	// maxCount bounds every token count and request parameter (n,
	// max_tokens) read: stats.MaxRequestTokens (2^27), above any model's
	// context length. A value beyond is dropped for its request and
	// reported (ErrDropped): recorded, it could overflow the engine's
	// running totals.
	maxCount = stats.MaxRequestTokens
	// maxChoices is how many choices of a stream are timed one by one, for
	// the inter-chunk times and time per output token of each (see
	// choiceTimes).
	maxChoices = 16
)

// doc is what one document told.
type doc struct {
	content       bool       // output (text, reasoning, tool calls) in this document
	choiceContent bool       // output in the choice being read
	choice        int64      // index of the choice being read
	choices       uint32     // choices (bit per index < maxChoices) with output
	manyChoices   bool       // a choice of index >= maxChoices had output
	deltaText     bool       // Responses API: a non-empty string "delta"
	event         uint8      // the "type" of an event (evNone, ...)
	status        uint8      // Responses API: the response's status
	filtered      bool       // Responses API: incomplete for content_filter
	finish        reasonSeen // the worst of the choices', or the document's own
	choiceFinish  reasonSeen // the choice being read's, the last key winning
	errSeen       bool       // a non-null top-level "error", or an error event or document
	errClass      uint8      // what the error's type, code or message says (errNone, ...: see errors.go)
	done          bool       // Ollama: "done": true
	dropped       uint8

	usageSeen, usageBad bool
	has                 uint16 // fields seen (f...)
	prompt, completion  int64
	cached, cacheRead   int64
	cacheCreation       int64
	numCached           int64 // Mistral's usage.num_cached_tokens
	// The usage's details beyond the cached count: cache writes
	// (cache_write_tokens), reasoning, and audio and image tokens of the
	// input and of the output.
	cacheWrite, reasoning int64
	inAudio, inImage      int64
	outAudio, outImage    int64
	cacheN                int64   // llama.cpp timings.cache_n
	remoteCached          int64   // vLLM's kv_transfer_params.remote_prefill_cached_tokens
	prefill, decode       float64 // server-reported, in seconds
	model                 bool    // the response's model was read (jsonScan.resp)
}

// request is what a request body told, its model aside. includeUsage is
// also set by a stream_options.include_usage that is no bool, which the
// server refuses: a request WithIncludeUsage leaves for it to judge.
type request struct {
	hasStream, stream, includeUsage bool
	n                               int64
	maxTokens                       [3]int64 // by role: max_tokens, max_output_tokens, max_completion_tokens
}

// askedUsage takes in stream_options.include_usage read as a lax bool.
func (r *request) askedUsage(value, ok bool) { r.includeUsage = value || !ok }

// unasked reports a request that streams and did not ask for usage: the
// chat or text completion request WithIncludeUsage rewrites.
func (r *request) unasked() bool { return r.stream && !r.includeUsage }

// maxTokensParam is the request's output limit as vLLM reads it:
// max_completion_tokens when set (not 0), else max_output_tokens (the
// Responses API's), else max_tokens.
func (r *request) maxTokensParam() int64 {
	for i := len(r.maxTokens) - 1; i >= 0; i-- {
		if r.maxTokens[i] != 0 {
			return r.maxTokens[i]
		}
	}
	return 0
}

// Fields of doc.has.
const (
	fPrompt uint16 = 1 << iota
	fCompletion
	fCached
	fCacheRead
	fCacheCreation
	fCacheN
	fPrefill
	fDecode
	fRemoteCached
	fCacheWrite
	fReasoning
	fInAudio
	fInImage
	fOutAudio
	fOutImage
	fNumCached

	detailFields = fCacheWrite | fReasoning | fInAudio | fInImage | fOutAudio | fOutImage
	usageFields  = fPrompt | fCompletion | fCached | fCacheRead | fCacheCreation | fNumCached | detailFields
)

// Values dropped from a document (doc.dropped), beyond maxCount.
const (
	dropMaxTokens uint8 = 1 << iota
	dropN
	dropUsage
)

// Event types (doc.event).
const (
	evNone        uint8 = iota
	evDelta             // a Responses API "*.delta" event
	evError             // "error"
	evMessageStop       // Anthropic's "message_stop"
)

// Responses API statuses (doc.status).
const (
	stNone uint8 = iota
	stCompleted
	stIncomplete
	stFailed
	stCancelled
)

// Scanner states.
const (
	stValue     uint8 = iota // a value is expected
	stObjFirst               // after '{': a key or '}'
	stObjKey                 // after ',' in an object: a key
	stColon                  // after a key
	stArrFirst               // after '[': a value or ']'
	stString                 // in a string (key or value)
	stStringEsc              // after '\' in a string
	stStringHex              // in the digits of a \u escape
	stScalar                 // in a number or literal
	stAfter                  // after a value: ',' or a close
	stBad                    // not JSON, or too deep: ignore the rest
)

// Contexts: the container a key or element is read in.
const (
	cOther uint8 = iota
	cRequest
	cRoot // OpenAI chat and completions, embeddings, pooling
	cChoices
	cChoice
	cDelta
	cToolCalls
	cUsage
	cDetails    // prompt_tokens_details, input_tokens_details
	cOutDetails // completion_tokens_details, output_tokens_details
	cStreamOptions
	cTimings            // llama.cpp
	cRespRoot           // Responses API: an event, or a response
	cIncomplete         // Responses API: incomplete_details
	cAnthRoot           // Anthropic: an event, or a message
	cAnthDelta          // Anthropic: an event's delta
	cOllamaRoot         // Ollama native
	cOllamaMsg          // Ollama native: message
	cOllamaRequest      // Ollama native: a request
	cOllamaOptions      // Ollama native: a request's options
	cOllamaEmbedRequest // Ollama native: an embeddings request
	cKVParams           // vLLM: a response's kv_transfer_params
	cMetadata           // a request's metadata (Anthropic's user_id)
	cError              // an "error" object
	cErrRoot            // the body of a response of status 400 or above
	cErrList            // such a body that is an array of them (Gemini's)
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
	rDetails
	rOutDetails
	rError
	rStreamOptions

	// Roles rPrompt through rIncludeUsage take a scalar only (see
	// notScalar).
	rPrompt
	rCompletion
	rCached
	rNumCached
	rCacheRead
	rCacheCreation
	rCacheWrite // rCacheWrite through rOutImage: the usage's details (doc.count)
	rReasoning
	rInAudio
	rInImage
	rOutAudio
	rOutImage
	rModel
	rUser   // a request's "user"
	rUserID // its "metadata.user_id"
	rStream
	rN
	rMaxTokens // max_tokens; rMaxOutput and rMaxCompletion follow it
	rMaxOutput
	rMaxCompletion
	rNumPredict // Ollama's options.num_predict
	rIncludeUsage

	rIndex
	rTimings
	rCacheN
	rPrefillMs
	rDecodeMs
	rPrefillNs
	rDecodeNs
	rType
	rDeltaText
	rResponse
	rStatus
	rIncomplete
	rIncompleteReason
	rAnthMessage
	rAnthDelta
	rOllamaMsg
	rDone
	rOllamaOptions
	rKVParams
	rRemoteCached // kv_transfer_params.remote_prefill_cached_tokens
	rMetadata
	rRespModel // the response's model (gen_ai.response.model)
	rErrType   // an error's type (Anthropic's "type":"error" too)
	rErrCode   // an error's code (or Gemini's status)
	rErrMsg    // an error's message
	rErrObject // an error body's "object" (vLLM's "error")
	rErrDoc    // an error document in an array of them
)

// utf8BOM is the UTF-8 byte order mark. Python's json.loads skips one that
// bytes start with (vLLM's server reads request bodies so, and OpenAI's
// Python client response bodies), and the SSE standard one that a stream
// starts with; anywhere else it is not JSON.
var utf8BOM = []byte("\xef\xbb\xbf")

// trimBOM returns p past one leading UTF-8 byte order mark.
func trimBOM(p []byte) []byte { return bytes.TrimPrefix(p, utf8BOM) }

// scanRequest reads a request body's first bytes into s: its model,
// stream, n, max_tokens and stream_options.include_usage (root cRequest),
// or Ollama's model, stream and options.num_predict (cOllamaRequest), past
// one leading byte order mark.
func scanRequest(s *jsonScan, p []byte, root uint8) {
	s.root = root
	s.feed(trimBOM(p))
}

// reset readies the scanner for a new document of the same dialect.
func (s *jsonScan) reset() {
	s.st, s.depth, s.d = stValue, 0, doc{}
}

// bad reports a scanner that stopped reading the document.
func (s *jsonScan) bad() bool { return s.st == stBad }

// started reports a scanner that has read part of a document.
func (s *jsonScan) started() bool { return s.depth > 0 || s.st != stValue }

// feed scans p and returns how many bytes it read: all of them, or up to
// and including the byte that completed the document (complete true).
func (s *jsonScan) feed(p []byte) (n int, complete bool) {
	docAt := -1 // where the document's '{' is in p, until its first members are read
	s.docBegin = -1
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch s.st {
		case stString:
			if s.inKey && s.fresh {
				// A key from its first byte: the members that lie whole in
				// p are read in one go.
				j := s.members(p, i, docAt)
				docAt = -1
				if j != i {
					i = j - 1
					continue
				}
			}
			// Up to the next quote or backslash in bulk.
			rest := p[i:]
			j := stringEnd(rest)
			if j < 0 {
				s.take(rest)
				return len(p), false
			}
			if s.fresh && rest[j] == '"' {
				// The whole string is here, with no escape: read in place.
				i += j
				s.fresh = false
				if !s.inKey && s.role == rNone {
					s.st = stAfter // a value nothing reads
					continue
				}
				if !s.inKey && s.role == rContent {
					s.contentIn(i-j, i)
				}
				s.whole(rest[:j])
				if s.st == stColon && i+1 < len(p) && p[i+1] == ':' { // compact JSON: "key":
					i++
					s.role, s.st, s.inKey = s.keyR, stValue, false
				}
				continue
			}
			if j > 0 {
				s.take(rest[:j])
			}
			i += j
			if p[i] == '\\' {
				s.st = stStringEsc
				continue
			}
			s.endStr()
		case stScalar:
			j := i
			for j < len(p) && class[p[j]]&delim == 0 {
				j++
			}
			if s.role != rNone {
				s.capture(p[i:j])
			}
			if j == len(p) {
				return len(p), false
			}
			if s.role == rNone {
				s.st = stAfter // a value nothing reads
			} else {
				s.endScalar()
			}
			i = j - 1 // the delimiter is read in stAfter
		case stAfter:
			switch {
			case c == ',':
				if s.top&arrayBit != 0 {
					s.st, s.role = stValue, elementRole(s.top)
				} else if i+1 < len(p) && p[i+1] == '"' { // compact JSON: ,"key"
					i++
					s.startKey()
				} else {
					s.st = stObjKey
				}
			case c == '}' || c == ']':
				if (c == ']') != (s.top&arrayBit != 0) {
					s.st = stBad
					continue
				}
				if s.close() {
					s.keep(p, i+1)
					return i + 1, true
				}
			case isSpace(c):
			default:
				s.st = stBad
			}
		case stObjFirst, stObjKey:
			switch {
			case c == '"':
				s.startKey()
			case c == '}' && s.st == stObjFirst:
				if s.close() {
					s.keep(p, i+1)
					return i + 1, true
				}
			case isSpace(c):
			default:
				s.st = stBad
			}
		case stColon:
			switch {
			case c == ':':
				s.role, s.st, s.inKey = s.keyR, stValue, false
			case isSpace(c):
			default:
				s.st = stBad
			}
		case stValue, stArrFirst:
			if isSpace(c) {
				continue
			}
			if s.st == stArrFirst && c == ']' {
				if s.close() {
					s.keep(p, i+1)
					return i + 1, true
				}
				continue
			}
			if s.depth == 0 {
				if c != '{' && (c != '[' || s.root != cErrRoot) {
					s.st = stBad
					continue
				}
				if n := s.same(p, i); n > 0 {
					return n, true
				}
				s.role = rRoot
				s.docBegin, s.contentN, s.contentElse = i, 0, false
				if s.preLen > 0 && len(p)-i >= s.preLen && bytes.Equal(p[i:i+s.preLen], s.pre[:s.preLen]) {
					// The start of the last document again: its state after
					// it, as members left it (see pre). Members after it
					// that nothing reads (a response model read before)
					// make it longer.
					s.begin(c)
					s.startKey()
					s.role, s.keyR = rNone, rNone
					docAt = i
					i += s.preLen - 1
					continue
				}
				docAt = i
			}
			if c == '"' && s.role == rNone { // a string nothing reads: skipped
				s.st, s.inKey, s.capStr, s.fresh, s.slen = stString, false, false, true, 0
				continue
			}
			s.begin(c)
		case stStringEsc:
			s.st = stString
			switch c {
			case 'u':
				s.st, s.hex, s.hexN = stStringHex, 0, 0
			case '"', '\\', '/':
				s.lit(c)
			case 'b':
				s.lit('\b')
			case 'f':
				s.lit('\f')
			case 'n':
				s.lit('\n')
			case 'r':
				s.lit('\r')
			case 't':
				s.lit('\t')
			default:
				s.st = stBad
			}
		case stStringHex:
			v := hexValue(c)
			if v < 0 {
				s.st = stBad
				continue
			}
			s.hex = s.hex<<4 | v
			if s.hexN++; s.hexN == 4 {
				s.st = stString
				s.code(s.hex)
			}
		case stBad:
			return len(p), false
		}
	}
	return len(p), false
}

// members is the fast path of feed for compact object members, from p[i],
// the first byte of a key: while a key, its ':' and its value (a string
// with no escape, or a scalar) lie whole in p, they are read in place, as
// whole strings are (whole, endScalar), and a ',"' that follows starts the
// next key. It returns the index of the next byte feed reads, with the
// scanner in the state the byte by byte path would be in there; i itself
// when it read nothing (an escape, or the key not whole in p). docAt is
// where the document began in p when this is its first key, else -1: the
// members nothing reads from there are kept as its start (pre).
func (s *jsonScan) members(p []byte, i, docAt int) int {
	start, pre := docAt, 0
	defer func() {
		if pre > 0 {
			s.preLen = copy(s.pre[:], p[start:start+pre])
		}
	}()
	for {
		j := stringEnd(p[i:])
		if j < 0 || p[i+j] == '\\' {
			return i
		}
		s.fresh = false
		s.whole(p[i : i+j]) // stColon, keyR
		i += j + 1
		if i == len(p) || p[i] != ':' {
			return i
		}
		i++
		s.role, s.st, s.inKey = s.keyR, stValue, false
		if i == len(p) {
			return i
		}
		switch c := p[i]; {
		case c == '"':
			j := stringEnd(p[i+1:])
			if j < 0 || p[i+1+j] == '\\' {
				return i
			}
			if s.role != rNone { // as begin, then the whole string in place
				docAt = -1
				s.vlen, s.over, s.capStr = 0, false, captured(s.role)
				if s.role == rContent {
					s.contentIn(i+1, i+1+j)
				}
				s.whole(p[i+1 : i+1+j])
			}
			i += j + 2
		case c == '{' || c == '[' || isSpace(c):
			return i
		default: // a scalar: its first byte is taken whatever it is, as begin does
			j := i + 1
			for j < len(p) && class[p[j]]&delim == 0 {
				j++
			}
			if j == len(p) {
				return i
			}
			if s.role != rNone {
				docAt = -1
				s.vlen, s.over = 0, false
				s.capture(p[i:j])
				s.endScalar()
			}
			i = j
		}
		s.st = stAfter
		if i+1 >= len(p) || p[i] != ',' || p[i+1] != '"' {
			return i
		}
		i += 2
		s.startKey()
		if docAt >= 0 && i-docAt <= maxPrefix {
			pre = i - docAt
		}
	}
}

// startKey starts reading a key, after its opening quote.
func (s *jsonScan) startKey() {
	s.st, s.inKey, s.klen, s.kover, s.fresh = stString, true, 0, false, true
	s.capStr = s.top != cOther // keys of unknown objects are skipped
}

// begin starts a value whose first byte is c, of role s.role.
func (s *jsonScan) begin(c byte) {
	switch c {
	case '{', '[':
		ctx := containerContext(s.role, c == '[', s.root)
		if s.depth == maxNesting || (s.depth >= maxDepth && ctx != cOther) {
			s.st = stBad
			return
		}
		s.opened(ctx)
		if s.role >= rPrompt && s.role <= rIncludeUsage {
			s.notScalar()
		}
		if c == '[' {
			ctx |= arrayBit
			s.st, s.role = stArrFirst, elementRole(ctx)
		} else {
			s.st = stObjFirst
		}
		s.push(ctx)
	case '"':
		s.st, s.inKey, s.vlen, s.slen, s.over, s.fresh = stString, false, 0, 0, false, true
		s.capStr = captured(s.role)
	default:
		s.st, s.vlen, s.over = stScalar, 0, false
		s.captureByte(c)
	}
}

// push adds an open container of a context (with arrayBit).
func (s *jsonScan) push(ctx uint8) {
	s.top = ctx
	if s.depth < maxDepth {
		s.stack[s.depth] = ctx
	} else if i, bit := (s.depth-maxDepth)/8, uint8(1)<<((s.depth-maxDepth)%8); ctx&arrayBit != 0 {
		s.deep[i] |= bit
	} else {
		s.deep[i] &^= bit
	}
	s.depth++
}

// pop ends the innermost open container.
func (s *jsonScan) pop() {
	s.depth--
	switch i := s.depth - 1 - maxDepth; {
	case s.depth == 0:
	case i < 0:
		s.top = s.stack[s.depth-1]
	default:
		s.top = cOther | (s.deep[i/8]>>(i%8)&1)<<7
	}
}

// opened takes in a container of s.role opening a context.
func (s *jsonScan) opened(ctx uint8) {
	d := &s.d
	switch s.role {
	case rError:
		d.errSeen = true
	case rToolCall:
		d.content, d.choiceContent = true, true
	case rUsage:
		// A repeated key replaces the whole object (last wins).
		d.usageSeen, d.usageBad, d.has = true, false, d.has&^usageFields
	case rStreamOptions:
		s.req.includeUsage = false
	case rMetadata: // a repeated key replaces the whole object
		s.userIDLen = 0
	case rOllamaOptions:
		// Go's encoding/json decodes a repeated "options" into the map the
		// first made, keeping its entries; an array is refused (400).
		if ctx != cOllamaOptions {
			s.req.maxTokens[0] = 0
		}
	case rChoice:
		if ctx == cChoice {
			d.choice, d.choiceContent, d.choiceFinish = 0, false, reasonSeen{}
		}
	}
}

// notScalar takes in a container where a role takes a scalar only: what
// the key held before is replaced by a value no server takes, as in
// Python the last key wins.
func (s *jsonScan) notScalar() {
	d := &s.d
	switch s.role {
	case rModel:
		s.modelLen = 0
	case rUser, rUserID:
		s.setUser(nil)
	case rStream:
		s.req.hasStream, s.req.stream = true, false
	case rIncludeUsage:
		s.req.askedUsage(false, false)
	case rN, rMaxTokens, rMaxOutput, rMaxCompletion:
		s.param(nil, false)
	case rNumPredict:
		s.req.maxTokens[0] = 0
	default: // a count
		d.usageBad = true
	}
}

// close ends the innermost container and reports whether it ended the
// document.
func (s *jsonScan) close() bool {
	if s.top == cChoice {
		d := &s.d
		if d.choiceContent {
			if d.choice < maxChoices {
				d.choices |= 1 << d.choice
			} else {
				d.manyChoices = true
			}
		}
		if d.choiceFinish.ok {
			d.finish.merge(d.choiceFinish.reason)
		}
	}
	s.pop()
	s.st = stAfter
	return s.depth == 0
}

// contentIn notes a content string read in place at p[at:end].
func (s *jsonScan) contentIn(at, end int) {
	s.contentN++
	s.contentAt, s.contentEnd = at, end
}

// keep remembers the document that ended at p[end-1] as last when it lay
// whole in p with one non-empty content string read in place; otherwise
// last is forgotten, so that it is always the document read before.
func (s *jsonScan) keep(p []byte, end int) {
	l := &s.last
	l.ok = s.docBegin >= 0 && s.contentN == 1 && !s.contentElse && s.contentEnd > s.contentAt &&
		end-s.docBegin-(s.contentEnd-s.contentAt) <= maxLast
	if !l.ok {
		return
	}
	l.pre = copy(l.bytes[:], p[s.docBegin:s.contentAt])
	l.n = l.pre + copy(l.bytes[l.pre:], p[s.contentEnd:end])
	l.d = s.d
	l.d.model = false // read once: the next documents skip it (see resp)
}

// same reads a document at p[i] that is last's bytes around another
// non-empty content string with no escape, and returns the index after
// it; 0 (nothing read) for any other document.
func (s *jsonScan) same(p []byte, i int) int {
	end, _, _ := s.sameEnd(p, i)
	if end > 0 {
		s.d, s.st, s.depth = s.last.d, stAfter, 0
	}
	return end
}

// sameEnd returns the index after a document at p[i] that same reads, and
// where its content string lies, p[at:atEnd]; end is 0 for any other
// document. It reads nothing.
func (s *jsonScan) sameEnd(p []byte, i int) (end, at, atEnd int) {
	l := &s.last
	if !l.ok || !bytes.HasPrefix(p[i:], l.bytes[:l.pre]) {
		return 0, 0, 0
	}
	at = i + l.pre
	j := stringEnd(p[at:])
	if j <= 0 || p[at+j] != '"' || !bytes.HasPrefix(p[at+j:], l.bytes[l.pre:l.n]) {
		return 0, 0, 0
	}
	return at + j + l.n - l.pre, at, at + j
}

// whole takes in a string read whole in place, with no escape: a key,
// whose value's role it finds, or a value.
func (s *jsonScan) whole(b []byte) {
	if s.inKey {
		s.st, s.keyR = stColon, rNone
		if s.capStr && len(b) <= maxKey {
			s.keyR = s.keyRole(b)
		}
		return
	}
	s.slen = len(b)
	s.endString(b, len(b) > maxValue)
}

// take takes in bytes of a string with no quote or backslash among them.
func (s *jsonScan) take(b []byte) {
	s.fresh = false
	s.slen += len(b)
	if !s.capStr {
		return
	}
	s.flushHi()
	if s.inKey {
		n := copy(s.key[s.klen:], b)
		s.klen += n
		s.kover = s.kover || n < len(b)
		return
	}
	n := copy(s.val[s.vlen:], b)
	s.vlen += n
	s.over = s.over || n < len(b)
}

// lit takes in a byte a simple escape stands for.
func (s *jsonScan) lit(c byte) {
	s.fresh = false
	s.slen++
	if s.capStr {
		s.flushHi()
		s.put(c)
	}
}

// code takes in the code unit of a \u escape: a surrogate pair makes one
// code point, a lone surrogate U+FFFD.
func (s *jsonScan) code(r rune) {
	s.fresh = false
	s.slen++
	if !s.capStr {
		return
	}
	if s.hi != 0 {
		hi := s.hi
		s.hi = 0
		if r >= 0xDC00 && r <= 0xDFFF {
			s.putRune((hi-0xD800)<<10 | (r - 0xDC00) + 0x10000)
			return
		}
		s.putRune(utf8.RuneError)
	}
	switch {
	case r >= 0xD800 && r <= 0xDBFF:
		s.hi = r
	case r >= 0xDC00 && r <= 0xDFFF:
		s.putRune(utf8.RuneError)
	default:
		s.putRune(r)
	}
}

func (s *jsonScan) flushHi() {
	if s.hi != 0 {
		s.hi = 0
		s.putRune(utf8.RuneError)
	}
}

func (s *jsonScan) putRune(r rune) {
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	for _, c := range b[:n] {
		s.put(c)
	}
}

// put adds a decoded byte to the key or the value being captured.
func (s *jsonScan) put(c byte) {
	if s.inKey {
		if s.klen < maxKey {
			s.key[s.klen] = c
			s.klen++
		} else {
			s.kover = true
		}
		return
	}
	s.captureByte(c)
}

func (s *jsonScan) captureByte(c byte) {
	if s.vlen < maxValue {
		s.val[s.vlen] = c
		s.vlen++
	} else {
		s.over = true
	}
}

// capture adds bytes to the value being captured.
func (s *jsonScan) capture(b []byte) {
	n := copy(s.val[s.vlen:], b)
	s.vlen += n
	s.over = s.over || n < len(b)
}

// endStr ends a string: a key, or a value.
func (s *jsonScan) endStr() {
	if s.capStr {
		s.flushHi()
	}
	if s.inKey {
		s.st, s.keyR = stColon, rNone
		if s.capStr && !s.kover {
			s.keyR = s.keyRole(s.key[:s.klen])
		}
		return
	}
	if s.role == rContent {
		s.contentElse = true
	}
	s.endString(s.val[:s.vlen], s.over)
}

// endString ends a string value v (over: longer than the bytes kept).
func (s *jsonScan) endString(v []byte, over bool) {
	s.st = stAfter
	d := &s.d
	switch s.role {
	case rContent:
		if s.slen > 0 {
			d.content, d.choiceContent = true, true
		}
	case rDeltaText:
		d.deltaText = d.deltaText || s.slen > 0
	case rRemoteCached:
		d.has &^= fRemoteCached // a string: not an integer
	case rFinish:
		s.setFinish(reasonSeen{true, finishReason(v, over)})
	case rError: // a string: Ollama's {"error": "..."}
		d.errSeen = true
		noteError(&d.errClass, messageClass(v))
	case rErrType:
		if string(v) == "error" { // Anthropic's error document
			d.errSeen = true
		} else {
			noteError(&d.errClass, codeClass(v))
		}
	case rErrCode:
		noteError(&d.errClass, codeClass(v))
	case rErrMsg:
		noteError(&d.errClass, messageClass(v))
	case rErrObject:
		d.errSeen = d.errSeen || string(v) == "error" // vLLM's ErrorResponse before its "error" object
	case rType:
		d.event = eventType(v, over)
	case rStatus:
		d.status = responseStatus(v)
	case rIncompleteReason:
		d.filtered = string(v) == "content_filter"
	case rModel:
		s.modelLen = 0 // the last "model" wins, as in Python
		if !over {
			s.modelLen = copy(s.model[:], v)
		}
	case rUser, rUserID:
		s.setUser(v) // one longer than kept is cut, still too long for a label value
	case rMetadata:
		s.userIDLen = 0 // a metadata that is no object has no user_id
	case rRespModel:
		if !over && len(v) > 0 {
			s.respLen, d.model = copy(s.resp[:], v), true
		}
	case rStream:
		s.req.hasStream = true
		s.req.stream, _ = laxBool(v, over, true)
	case rIncludeUsage:
		s.req.askedUsage(laxBool(v, over, true))
	case rN, rMaxTokens, rMaxOutput, rMaxCompletion:
		s.param(v, true)
	case rNumPredict, rOllamaOptions:
		s.req.maxTokens[0] = 0 // not a number, not an object: Ollama answers 400
	case rPrompt, rCompletion, rCached, rNumCached, rCacheRead, rCacheCreation, rCacheWrite, rReasoning, rInAudio, rInImage, rOutAudio, rOutImage:
		d.usageBad = true // a count must be a number
	}
}

// setFinish sets the finish reason of the choice being read, or with no
// choices (Anthropic, Ollama) the document's: the last key wins.
func (s *jsonScan) setFinish(r reasonSeen) {
	if s.top == cChoice {
		s.d.choiceFinish = r
	} else {
		s.d.finish = r
	}
}

func (s *jsonScan) endScalar() {
	s.st = stAfter
	d := &s.d
	v := s.val[:s.vlen]
	null := string(v) == "null"
	switch s.role {
	case rFinish:
		s.setFinish(reasonSeen{}) // null, or not a reason: none
	case rModel:
		s.modelLen = 0 // the last "model" wins: not a string, none
	case rUser, rUserID:
		s.setUser(nil) // null, or not a string: none
	case rMetadata:
		s.userIDLen = 0
	case rError:
		if !null && string(v) != "false" {
			d.errSeen = true
		}
	case rPrompt, rCompletion, rCached, rNumCached, rCacheRead, rCacheCreation, rCacheWrite, rReasoning, rInAudio, rInImage, rOutAudio, rOutImage:
		bit, dst := d.count(s.role)
		if null && s.role != rPrompt {
			*dst, d.has = 0, d.has&^bit // unknown, not zero; a completion count unknown is none (see applyUsage)
			return
		}
		n, st := parseCount(v, s.over)
		switch st {
		case countHuge:
			d.dropped |= dropUsage
			d.usageBad = true
			return
		case countBad:
			d.usageBad = true
			return
		}
		*dst, d.has = n, d.has|bit
	case rCacheN:
		if n, st := parseCount(v, s.over); st == countOK {
			d.cacheN, d.has = n, d.has|fCacheN
		}
	case rRemoteCached:
		// An integer, as vLLM's decode instance reads it; anything else
		// (null included) is none, the last key winning.
		if n, st := parseCount(v, s.over); st == countOK {
			d.remoteCached, d.has = n, d.has|fRemoteCached
		} else {
			d.has &^= fRemoteCached
		}
	case rIndex:
		if n, st := parseCount(v, s.over); st == countOK {
			d.choice = n
		} else {
			d.choice = maxChoices
		}
	case rPrefillMs, rDecodeMs:
		s.duration(v, 1e-3)
	case rPrefillNs, rDecodeNs:
		s.duration(v, 1e-9)
	case rN, rMaxTokens, rMaxOutput, rMaxCompletion:
		s.param(v, false)
	case rNumPredict:
		s.numPredict(v)
	case rOllamaOptions:
		s.req.maxTokens[0] = 0 // null: no options (Go sets the map nil), else refused
	case rStream:
		s.req.hasStream = true
		s.req.stream, _ = laxBool(v, s.over, false)
	case rIncludeUsage:
		if null {
			s.req.includeUsage = false // pydantic's None: not asked
		} else {
			s.req.askedUsage(laxBool(v, s.over, false))
		}
	case rStreamOptions:
		s.req.includeUsage = false // null, or not an object
	case rDone:
		d.done = string(v) == "true"
	}
}

// count returns the field of a usage count's role and its bit in has.
func (d *doc) count(role uint8) (uint16, *int64) {
	switch role {
	case rPrompt:
		return fPrompt, &d.prompt
	case rCompletion:
		return fCompletion, &d.completion
	case rCached:
		return fCached, &d.cached
	case rNumCached:
		return fNumCached, &d.numCached
	case rCacheRead:
		return fCacheRead, &d.cacheRead
	case rCacheWrite:
		return fCacheWrite, &d.cacheWrite
	case rReasoning:
		return fReasoning, &d.reasoning
	case rInAudio:
		return fInAudio, &d.inAudio
	case rInImage:
		return fInImage, &d.inImage
	case rOutAudio:
		return fOutAudio, &d.outAudio
	case rOutImage:
		return fOutImage, &d.outImage
	}
	return fCacheCreation, &d.cacheCreation
}

// param takes in a request's n or max_tokens (max_output_tokens,
// max_completion_tokens), as vLLM's pydantic models read an int in lax
// mode: an integer, a float with no fraction (100.0), a string of digits
// ("100") or a bool. The last occurrence wins; null or a value the server
// refuses (negative, 100.5, text) unsets it; one beyond maxCount is
// dropped and reported.
func (s *jsonScan) param(v []byte, str bool) {
	n, st := int64(0), countBad
	if string(v) != "null" || str {
		n, st = parseParam(v, s.over, str)
	}
	if st != countOK {
		n = 0
	}
	if s.role == rN {
		s.req.n = n
		if st == countHuge {
			s.d.dropped |= dropN
		}
		return
	}
	s.req.maxTokens[s.role-rMaxTokens] = n
	if st == countHuge {
		s.d.dropped |= dropMaxTokens
	}
}

// numPredict takes in Ollama's options.num_predict as Ollama reads it
// (api.Options.FromMap): a JSON number, truncated toward zero. A positive
// one is the request's max_tokens; 0 (no limit in Ollama's runners) and the
// negative ones (-1 infinite, -2 fill the context; Ollama caps both at 10
// times num_ctx) set none, as an absent max_tokens; null sets none (Ollama
// keeps its default, -1). One beyond maxCount is dropped and reported, as
// max_tokens is; a string or a bool (Ollama answers 400) sets none.
func (s *jsonScan) numPredict(v []byte) {
	n, st := parseCount(v, s.over)
	if st == countBad && !s.over {
		f, err := strconv.ParseFloat(string(v), 64)
		switch f = math.Trunc(f); {
		case err != nil || !(f >= 1) || math.IsInf(f, 0): // -1, 0.5, NaN, Infinity (not JSON to Go), true
			n = 0
		case f > maxCount:
			st = countHuge
		default:
			n, st = int64(f), countOK
		}
	}
	if st != countOK {
		n = 0
	}
	s.req.maxTokens[0] = n
	if st == countHuge {
		s.d.dropped |= dropMaxTokens
	}
}

// duration takes in a server-reported time, a number of units of the
// given size in seconds: non-negative and within stats.MaxSeconds, or
// ignored.
func (s *jsonScan) duration(v []byte, unit float64) {
	if s.over || len(v) == 0 || v[0] == '-' || string(v) == "null" {
		return
	}
	f, err := strconv.ParseFloat(string(v), 64)
	f *= unit
	if err != nil || !(f >= 0 && f <= stats.MaxSeconds) {
		return
	}
	if s.role == rPrefillMs || s.role == rPrefillNs {
		s.d.prefill, s.d.has = f, s.d.has|fPrefill
	} else {
		s.d.decode, s.d.has = f, s.d.has|fDecode
	}
}

// setUser keeps v, a request's user (rUser) or user_id (rUserID), cut to
// maxUser bytes; nil is none. The last key wins, as in Python.
func (s *jsonScan) setUser(v []byte) {
	if s.role == rUser {
		s.userLen = copy(s.user[:], v)
	} else {
		s.userIDLen = copy(s.userID[:], v)
	}
}

// captured reports a role whose string value is kept (decoded).
func captured(role uint8) bool {
	switch role {
	case rFinish, rModel, rUser, rUserID, rRespModel, rError, rErrType, rErrCode, rErrMsg, rErrObject, rType, rStatus, rIncompleteReason, rStream, rIncludeUsage, rN, rMaxTokens, rMaxOutput, rMaxCompletion:
		return true
	}
	return false
}

// keyRole is the role of the value of a key read in the innermost
// container: a response's model once one was read is none.
func (s *jsonScan) keyRole(key []byte) uint8 {
	r := keyRole(s.top, key)
	if r == rRespModel && s.respLen > 0 {
		return rNone
	}
	return r
}

// keyRole is the role of the value of a key read in a context.
func keyRole(ctx uint8, key []byte) uint8 {
	switch ctx {
	case cRoot:
		switch string(key) {
		case "model":
			return rRespModel
		case "choices":
			return rChoices
		case "usage":
			return rUsage
		case "error":
			return rError
		case "timings":
			return rTimings
		case "kv_transfer_params":
			return rKVParams
		}
	case cKVParams:
		// What a vLLM prefill instance counts cached for the decode
		// instance (PR #54222): see Leg.PrefillCached.
		if string(key) == "remote_prefill_cached_tokens" {
			return rRemoteCached
		}
	case cChoice:
		switch string(key) {
		case "index":
			return rIndex
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
		case "prompt_tokens", "input_tokens":
			return rPrompt
		case "completion_tokens", "output_tokens":
			return rCompletion
		case "prompt_tokens_details", "input_tokens_details":
			return rDetails
		case "completion_tokens_details", "output_tokens_details":
			return rOutDetails
		case "cache_read_input_tokens":
			return rCacheRead
		case "cache_creation_input_tokens":
			return rCacheCreation
		case "num_cached_tokens": // Mistral's, beside no prompt_tokens_details
			return rNumCached
		}
	case cDetails:
		switch string(key) {
		case "cached_tokens":
			return rCached
		case "cache_write_tokens": // OpenRouter's, Bedrock's and OpenAI's Responses API's
			return rCacheWrite
		case "audio_tokens":
			return rInAudio
		case "image_tokens":
			return rInImage
		}
	case cOutDetails:
		switch string(key) {
		case "reasoning_tokens", "thinking_tokens": // thinking_tokens: Anthropic's
			return rReasoning
		case "audio_tokens":
			return rOutAudio
		case "image_tokens":
			return rOutImage
		}
	case cTimings:
		switch string(key) {
		case "cache_n":
			return rCacheN
		case "prompt_ms":
			return rPrefillMs
		case "predicted_ms":
			return rDecodeMs
		}
	case cRequest:
		switch string(key) {
		case "model":
			return rModel
		case "stream":
			return rStream
		case "n":
			return rN
		case "max_tokens":
			return rMaxTokens
		case "max_output_tokens":
			return rMaxOutput
		case "max_completion_tokens":
			return rMaxCompletion
		case "stream_options":
			return rStreamOptions
		case "user":
			return rUser
		case "metadata":
			return rMetadata
		}
	case cMetadata:
		if string(key) == "user_id" {
			return rUserID
		}
	case cStreamOptions:
		if string(key) == "include_usage" {
			return rIncludeUsage
		}
	case cOllamaRequest:
		// Ollama's GenerateRequest and ChatRequest (api/types.go): no n,
		// max_tokens or stream_options, which it ignores.
		switch string(key) {
		case "model":
			return rModel
		case "stream":
			return rStream
		case "options":
			return rOllamaOptions
		}
	case cOllamaOptions:
		if string(key) == "num_predict" {
			return rNumPredict
		}
	case cOllamaEmbedRequest:
		// EmbedRequest and EmbeddingRequest: no stream, and options that
		// set no output limit.
		if string(key) == "model" {
			return rModel
		}
	case cRespRoot:
		switch string(key) {
		case "code": // an error event's
			return rErrCode
		case "message":
			return rErrMsg
		case "model":
			return rRespModel
		case "type":
			return rType
		case "delta":
			return rDeltaText
		case "response":
			return rResponse
		case "status":
			return rStatus
		case "incomplete_details":
			return rIncomplete
		case "usage":
			return rUsage
		case "error":
			return rError
		}
	case cIncomplete:
		if string(key) == "reason" {
			return rIncompleteReason
		}
	case cAnthRoot:
		switch string(key) {
		case "model":
			return rRespModel
		case "type":
			return rType
		case "message":
			return rAnthMessage
		case "delta":
			return rAnthDelta
		case "usage":
			return rUsage
		case "stop_reason":
			return rFinish
		case "error":
			return rError
		case "kv_transfer_params": // vLLM's /v1/messages, as its chat completions
			return rKVParams
		}
	case cAnthDelta:
		switch string(key) {
		case "text", "thinking", "partial_json":
			return rContent
		case "stop_reason":
			return rFinish
		}
	case cOllamaRoot:
		switch string(key) {
		case "model":
			return rRespModel
		case "message":
			return rOllamaMsg
		case "response", "thinking":
			return rContent
		case "tool_calls":
			return rToolCalls
		case "done":
			return rDone
		case "done_reason":
			return rFinish
		case "prompt_eval_count":
			return rPrompt
		case "eval_count":
			return rCompletion
		case "prompt_eval_duration":
			return rPrefillNs
		case "eval_duration":
			return rDecodeNs
		case "error":
			return rError
		}
	case cError:
		switch string(key) {
		case "type":
			return rErrType
		case "code", "status": // status: Gemini's (RESOURCE_EXHAUSTED, ...)
			return rErrCode
		case "message":
			return rErrMsg
		}
	case cErrRoot:
		switch string(key) {
		case "error":
			return rError
		case "type":
			return rErrType
		case "object":
			return rErrObject
		case "code":
			return rErrCode
		case "message":
			return rErrMsg
		}
	case cOllamaMsg:
		switch string(key) {
		case "content", "thinking":
			return rContent
		case "tool_calls":
			return rToolCalls
		}
	}
	return rNone
}

// containerContext is the context a container of a role opens; root is
// the dialect's root context.
func containerContext(role uint8, array bool, root uint8) uint8 {
	if array {
		switch {
		case role == rChoices:
			return cChoices
		case role == rToolCalls:
			return cToolCalls
		case role == rRoot && root == cErrRoot:
			return cErrList
		}
		return cOther
	}
	switch role {
	case rRoot:
		return root
	case rError:
		return cError
	case rErrDoc:
		return cErrRoot
	case rChoice:
		return cChoice
	case rDelta:
		return cDelta
	case rUsage:
		return cUsage
	case rDetails:
		return cDetails
	case rOutDetails:
		return cOutDetails
	case rStreamOptions:
		return cStreamOptions
	case rTimings:
		return cTimings
	case rKVParams:
		return cKVParams
	case rResponse:
		return cRespRoot
	case rIncomplete:
		return cIncomplete
	case rAnthMessage:
		return cAnthRoot
	case rAnthDelta:
		return cAnthDelta
	case rOllamaMsg:
		return cOllamaMsg
	case rOllamaOptions:
		return cOllamaOptions
	case rMetadata:
		return cMetadata
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
	case cErrList:
		return rErrDoc
	}
	return rNone
}

// finishReason maps a finish reason (OpenAI's finish_reason, Anthropic's
// stop_reason, Ollama's done_reason, ...) to vLLM's by
// stats.ParseFinishReason; a value too long to read is stop.
func finishReason(v []byte, over bool) stats.FinishReason {
	if over {
		return stats.FinishStop
	}
	r, _ := stats.ParseFinishReason(string(v))
	return r
}

// eventType classifies the "type" of a Responses API or Anthropic event.
func eventType(v []byte, over bool) uint8 {
	switch {
	case over:
		return evNone
	case string(v) == "error":
		return evError
	case string(v) == "message_stop":
		return evMessageStop
	case bytes.HasSuffix(v, []byte(".delta")):
		return evDelta
	}
	return evNone
}

// responseStatus classifies a Responses API response status.
func responseStatus(v []byte) uint8 {
	switch string(v) {
	case "completed":
		return stCompleted
	case "incomplete":
		return stIncomplete
	case "failed":
		return stFailed
	case "cancelled":
		return stCancelled
	}
	return stNone
}

// Results of parseCount and parseParam.
const (
	countOK uint8 = iota
	countBad
	countHuge // a count beyond maxCount
)

// parseCount parses a non-negative JSON integer (an exponent or fraction is
// not a count) within maxCount.
func parseCount(v []byte, over bool) (int64, uint8) {
	if len(v) == 0 {
		return 0, countBad
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, countBad
		}
		if n <= maxCount {
			n = n*10 + int64(c-'0')
		}
	}
	if over || n > maxCount {
		return 0, countHuge
	}
	return n, countOK
}

// parseParam parses an int as pydantic's lax mode does: an integer, a
// float with no fractional part, or a bool; in a string (str), an integer
// only.
func parseParam(v []byte, over, str bool) (int64, uint8) {
	n, st := parseCount(v, over)
	if st != countBad || str || over {
		return n, st
	}
	switch string(v) {
	case "true":
		return 1, countOK
	case "false":
		return 0, countOK
	}
	f, err := strconv.ParseFloat(string(v), 64)
	switch {
	case err != nil && !isRange(err):
		return 0, countBad
	case f < 0 || f != math.Trunc(f): // 100.5, -1; NaN is not JSON
		return 0, countBad
	case f > maxCount: // 1e300, or beyond float range
		return 0, countHuge
	}
	return int64(f), countOK
}

func isRange(err error) bool {
	e, ok := err.(*strconv.NumError)
	return ok && e.Err == strconv.ErrRange
}

// laxBool reads a bool as pydantic's lax mode does: true, false, the
// numbers 0 and 1 (also as 0.0 and 1.0), or a string that lower-cased is
// one of 0, off, f, false, n, no, 1, on, t, true, y, yes. Anything else is
// refused (ok false): vLLM answers such a request 400.
func laxBool(v []byte, over, str bool) (value, ok bool) {
	if over {
		return false, false
	}
	if str {
		switch string(bytes.ToLower(v)) {
		case "1", "on", "t", "true", "y", "yes":
			return true, true
		case "0", "off", "f", "false", "n", "no":
			return false, true
		}
		return false, false
	}
	switch string(v) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err == nil && (f == 0 || f == 1) {
		return f == 1, true
	}
	return false, false
}

// Byte classes.
const (
	space = 1 << iota // JSON white space
	delim             // ends a scalar: white space, ',', '}' or ']'
	stop              // ends a run of string bytes: '"' or '\\'
)

var class = func() (c [256]uint8) {
	for _, b := range " \t\n\r" {
		c[b] |= space | delim
	}
	for _, b := range ",}]" {
		c[b] |= delim
	}
	c['"'] |= stop
	c['\\'] |= stop
	return c
}()

// stringEnd returns the index of the first quote or backslash in p, or -1:
// eight bytes at a time over the first bytes (keys and short values end
// there), then bytes.IndexByte (long content).
func stringEnd(p []byte) int {
	const short = 64
	i := 0
	for ; i+8 <= len(p) && i < short; i += 8 {
		if m := quoteOrBackslash(binary.LittleEndian.Uint64(p[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	if i < short {
		for ; i < len(p); i++ {
			if class[p[i]]&stop != 0 {
				return i
			}
		}
		return -1
	}
	q := p[i:]
	j := bytes.IndexByte(q, '"')
	if j >= 0 {
		q = q[:j]
	}
	if k := bytes.IndexByte(q, '\\'); k >= 0 {
		return i + k
	}
	if j < 0 {
		return -1
	}
	return i + j
}

// quoteOrBackslash returns x's bytes that are '"' or '\\' as their high
// bits, the lowest one exact (a borrow can mark a byte above a match only).
func quoteOrBackslash(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ ('"' * ones)
	b := x ^ ('\\' * ones)
	return ((q-ones)&^q | (b-ones)&^b) & highs
}

func hexValue(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return rune(c-'A') + 10
	}
	return -1
}

func isSpace(c byte) bool { return class[c]&space != 0 }
