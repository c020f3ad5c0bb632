package main

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// The OpenAI-compatible API of an instance: POST /v1/chat/completions and
// /v1/completions, streamed (SSE) or not, in vLLM's response format (see
// openaihttp/testdata/README.md for the vLLM sources it follows). A request
// becomes a job of the simulated engine, which drives its stats.Timeline and
// the Recorder exactly as for a generated request.
//
// Prompt tokens are counted by a simple rule (promptTokens); a completion
// prompt given as token ids counts one token per id, which pins the count
// for tests. The output ends at max_tokens (finish_reason length) or at a
// stop token drawn from the workload's output length distribution (stop);
// vLLM's ignore_eos makes it run to max_tokens.

const (
	maxRequestBytes = 4 << 20
	// messageTokens is the chat template's tokens around each message.
	messageTokens = 4
	// apiPrefixBase offsets the prefix-cache keys of API system prompts from
	// the workload's shared prompts (0 to 5).
	apiPrefixBase = 1 << 20
	// Draw salts of an API request's output length and KV blocks.
	outputSalt = 0x0a7
	blockSalt  = 0xb10c
	// sideChannelPort is vLLM's default NIXL side-channel port
	// (VLLM_NIXL_SIDE_CHANNEL_PORT), plus the data-parallel rank. The
	// example never dials it: its KV moves inside the process.
	sideChannelPort = 5600
)

// apiRequest is the part of a completion request the example reads.
type apiRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"` // chat
	Prompt              json.RawMessage `json:"prompt"`   // completions
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	N                   *int64          `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS        bool              `json:"ignore_eos"` // vLLM's extension
	KVTransferParams *kvTransferParams `json:"kv_transfer_params"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // a string or a list of parts
}

// kvTransferParams is vLLM's kv_transfer_params in the shape of its NIXL
// connector: a P/D proxy sends {"do_remote_decode": true, ...: null} with
// the prefill leg, the prefill node returns what NixlConnectorScheduler.
// request_finished returns (vllm/distributed/kv_transfer/kv_connector/v1/
// nixl_connector.py), and the proxy passes that on with the decode leg
// (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py).
type kvTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteBlockIDs  []int64 `json:"remote_block_ids"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteRequestID string  `json:"remote_request_id,omitempty"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	TPSize          int     `json:"tp_size,omitempty"`
	// RemotePrefillCachedTokens is the prefill instance's cached prompt
	// tokens, which vLLM's prefill instance returns (and its decode
	// instance reports in its usage) from PR #54222 on.
	RemotePrefillCachedTokens *int64 `json:"remote_prefill_cached_tokens,omitempty"`
}

// The values of -cached-tokens.
const (
	cachedTransfer = "transfer"
	cachedPrefill  = "prefill"
)

// Response objects, with the fields and order of vLLM's.
type (
	response struct {
		ID               string            `json:"id"`
		Object           string            `json:"object"`
		Created          int64             `json:"created"`
		Model            string            `json:"model"`
		Choices          []choice          `json:"choices"`
		Usage            *usage            `json:"usage,omitempty"`
		KVTransferParams *kvTransferParams `json:"kv_transfer_params,omitempty"`
	}
	choice struct {
		Index        int       `json:"index"`
		Text         *string   `json:"text,omitempty"`    // completions
		Message      *message  `json:"message,omitempty"` // chat, not streamed
		Delta        *message  `json:"delta,omitempty"`   // chat, streamed
		Logprobs     *struct{} `json:"logprobs"`
		FinishReason *string   `json:"finish_reason"`
	}
	message struct {
		Role    string `json:"role,omitempty"`
		Content string `json:"content"`
	}
	usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		TotalTokens         int64 `json:"total_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
)

// apiCall is one accepted API request: how to answer it and the job it is.
type apiCall struct {
	chat         bool
	anthropic    bool   // POST /v1/messages: answered in the Anthropic format (see anthropic.go)
	id           string // the X-Request-Id, or a random one
	model        string
	created      int64
	stream       bool
	includeUsage bool
	job          request
	limit        int64 // max_tokens (0: none)
	transfer     bool  // do_remote_prefill: the prompt's KV comes from the prefill node
	remoteDecode bool  // do_remote_decode: keep the KV for the decode node
	cachedExcess int64 // added to the usage's cached tokens (-cached-excess)
	// remoteCached is the prefill instance's cached tokens that a decode
	// instance of vLLM from PR #54222 reports in place of its own (nil:
	// its own, see cachedTokens).
	remoteCached *int64
}

// cachedTokens is the cached prompt tokens the usage reports: the prompt
// tokens found computed at the first scheduling (on a decode instance, its
// prefix-cache hits and the KV received), or with -cached-tokens prefill
// the prefill instance's count that came with a remote prefill's
// kv_transfer_params, as vLLM's OutputProcessor reports it since PR #54222.
func (c *apiCall) cachedTokens(st streamState) int64 {
	if c.remoteCached != nil {
		return *c.remoteCached
	}
	return st.cached
}

// apiError is an error answer in vLLM's shape.
type apiError struct {
	status  int
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// writeError writes err as {"error": {...}} with its status (500 for an
// error that is not an *apiError).
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{http.StatusInternalServerError, err.Error()}
	}
	kind := map[int]string{400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}[ae.status]
	if kind == "" {
		kind = "InternalServerError"
	}
	type info struct { // vLLM's ErrorInfo, in its field order
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	body, _ := json.Marshal(struct {
		Error info `json:"error"`
	}{info{Message: ae.message, Type: kind, Code: ae.status}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.status)
	_, _ = w.Write(body)
}

// apiHandler serves the instance's OpenAI-compatible endpoints, Anthropic's
// POST /v1/messages and GET /v1/models, and answers any other path 404 as
// vLLM does. It is the one handler to wrap with server middleware
// (openaihttp.NewHandler).
func (in *instance) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { in.serveAPI(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { in.serveAPI(w, r, false) })
	mux.HandleFunc("POST /v1/messages", in.serveMessages)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) { writeModels(w, in.model) })
	return withNotFound(mux)
}

// serveAPI runs one completion request on the least loaded engine and
// answers it as the engine emits its tokens.
func (in *instance) serveAPI(w http.ResponseWriter, r *http.Request, chat bool) {
	var req apiRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes)).Decode(&req); err != nil {
		writeError(w, badRequest("invalid request body: %v", err))
		return
	}
	c, err := in.accept(&req, chat, requestID(r), time.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	in.run(w, r, c)
}

// requestID is a request's X-Request-Id, or a random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" {
		return id
	}
	return rand.Text()
}

// run submits an accepted call to the least loaded engine and answers it
// in its API's format as the engine emits its tokens.
func (in *instance) run(w http.ResponseWriter, r *http.Request, c *apiCall) {
	s := newStream(c.remoteDecode)
	e := in.leastLoaded()
	if err := e.submitStream(c.job, c.limit, c.transfer, s); err != nil {
		writeError(w, err)
		return
	}
	switch {
	case c.anthropic && c.stream:
		in.streamMessages(w, r, c, s)
	case c.anthropic:
		in.fullMessage(w, r, c, s, e)
	case c.stream:
		in.streamResponse(w, r, c, s)
	default:
		in.fullResponse(w, r, c, s, e)
	}
}

// accept validates a request (known model or LoRA adapter, n = 1, prompt
// within the context length, token limits)
// and makes it a job.
func (in *instance) accept(req *apiRequest, chat bool, id string, now time.Time) (*apiCall, error) {
	if req.Model != "" && req.Model != in.model && !slices.Contains(loraAdapters[:], req.Model) {
		return nil, &apiError{http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model)}
	}
	if req.N != nil && *req.N != 1 {
		return nil, badRequest("this example serves n=1 only")
	}
	c := &apiCall{chat: chat, id: id, model: cmp.Or(req.Model, in.model), created: now.Unix(), stream: req.Stream,
		includeUsage: req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage, cachedExcess: in.cachedExcess}
	c.job = request{id: requestNumber(id), arrival: now, prefix: -1}
	var err error
	if chat {
		err = chatPrompt(req.Messages, &c.job)
	} else {
		c.job.prompt, err = completionPrompt(req.Prompt)
	}
	if err != nil {
		return nil, err
	}
	if c.job.prompt >= maxModelLen {
		return nil, badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens.",
			maxModelLen, c.job.prompt)
	}
	limit := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		limit = req.MaxCompletionTokens
	}
	if limit != nil {
		if *limit < 1 {
			return nil, badRequest("max_tokens must be at least 1, got %d.", *limit)
		}
		if c.job.prompt+*limit > maxModelLen {
			return nil, badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion).",
				maxModelLen, c.job.prompt+*limit, c.job.prompt, *limit)
		}
		c.limit = *limit
	}
	rng := mrand.New(mrand.NewPCG(uint64(c.job.id), outputSalt))
	c.job.output = logNormal(rng, outputMedian, outputSigma, 1, maxModelLen-c.job.prompt)
	if req.IgnoreEOS && c.limit > 0 {
		c.job.output = c.limit
	}
	c.job.maxTokens = c.limit
	if p := req.KVTransferParams; p != nil {
		c.transfer, c.remoteDecode = p.DoRemotePrefill, p.DoRemoteDecode
		if in.prefillCached && p.DoRemotePrefill {
			c.remoteCached = p.RemotePrefillCachedTokens
		}
	}
	return c, nil
}

// requestNumber is the simulation's request id of an API request: a hash of
// its X-Request-Id, so that the prefill and decode instances draw the same
// priority and adapter for both legs of a P/D request.
func requestNumber(id string) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum64() >> 2)
}

// promptTokens is the example's tokenizer: 4 tokens per 3 words (English
// text averages about 0.75 words per token), rounded up.
func promptTokens(text string) int64 {
	return (int64(len(strings.Fields(text)))*4 + 2) / 3
}

// chatPrompt sets r's prompt tokens from the messages: each message's
// content by promptTokens plus messageTokens of chat template. A leading
// system (or developer) message is a shared prefix the prefix cache keeps.
func chatPrompt(msgs []chatMessage, r *request) error {
	if len(msgs) == 0 {
		return badRequest("messages must not be empty")
	}
	for i, m := range msgs {
		text, err := messageText(m.Content)
		if err != nil {
			return badRequest("messages[%d].content: %v", i, err)
		}
		n := promptTokens(text) + messageTokens
		r.prompt += n
		if i == 0 && (m.Role == "system" || m.Role == "developer") && len(msgs) > 1 {
			h := fnv.New32a()
			_, _ = h.Write([]byte(text))
			r.prefix, r.prefixLen = apiPrefixBase+int(h.Sum32()>>2), n
		}
	}
	return nil
}

// messageText is a message's text: a string, or the text of its parts.
func messageText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or a list of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
		b.WriteByte(' ')
	}
	return b.String(), nil
}

// completionPrompt is the prompt tokens of a completion prompt: a string by
// promptTokens (at least 1, the BOS token), or a list of token ids.
func completionPrompt(raw json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return max(promptTokens(s), 1), nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		return int64(len(ids)), nil
	}
	return 0, badRequest("prompt must be a string or a non-empty list of token ids (one prompt per request in this example)")
}

// words of the synthetic output: token i of a request is one of them.
var words = strings.Fields("the model answers every question with a short list of plain words that mean " +
	"nothing at all but stream one token at a time so that each chunk shows how fast decode runs")

// text is the output of n tokens from token number from on; a request
// that stopped ends with its stop token, whose text is empty.
func text(id int, from, n int64, stopped bool) string {
	if stopped {
		n--
	}
	var b strings.Builder
	for i := from; i < from+n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[(uint64(id)+uint64(i)*7)%uint64(len(words))])
	}
	return b.String()
}

// follow waits for the job's outputs and passes each batch to out until
// the job finishes (true), or the client or out fails, or the instance
// stops (false: the job is marked gone and the engine aborts it).
func (in *instance) follow(r *http.Request, s *stream, out func(st streamState) error) bool {
	for {
		select {
		case <-s.ready:
		case <-r.Context().Done():
			s.leave()
			return false
		case <-in.stopped:
			s.leave()
			return false
		}
		st := s.take()
		if st.tokens > 0 || st.done {
			if err := out(st); err != nil {
				s.leave()
				return false
			}
		}
		if st.done {
			return true
		}
	}
}

// usageOf is the usage object of a finished job.
func usageOf(c *apiCall, st streamState) *usage {
	u := &usage{PromptTokens: c.job.prompt, CompletionTokens: st.generated, TotalTokens: c.job.prompt + st.generated}
	u.PromptTokensDetails.CachedTokens = c.cachedTokens(st) + c.cachedExcess
	return u
}

// object is the response's object name, streamed or not.
func (c *apiCall) object() string {
	switch {
	case !c.chat:
		return "text_completion"
	case c.stream:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

func (c *apiCall) response(choices []choice) response {
	prefix := "cmpl-"
	if c.chat {
		prefix = "chatcmpl-"
	}
	return response{ID: prefix + c.id, Object: c.object(), Created: c.created, Model: c.model, Choices: choices}
}

// finishReason is the finish_reason of a finished job, or null.
func finishReason(st streamState) *string {
	if !st.done {
		return nil
	}
	return new(st.reason.String())
}

// streamResponse answers with SSE chunks in vLLM's format, one per batch of
// tokens taken from the engine, flushed as they come.
func (in *instance) streamResponse(w http.ResponseWriter, r *http.Request, c *apiCall, s *stream) {
	sse := newSSE(w)
	send := func(v any) error { return sse.send("", v) }
	var sent int64
	started := false
	done := in.follow(r, s, func(st streamState) error {
		if !started {
			// vLLM sends its headers and the role chunk with the first output.
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			if c.chat {
				role := c.response([]choice{{Delta: &message{Role: "assistant"}}})
				if err := send(role); err != nil {
					return err
				}
			}
		}
		t := text(c.job.id, sent, st.tokens, st.done && st.reason == stats.FinishStop)
		sent += st.tokens
		ch := choice{FinishReason: finishReason(st)}
		if c.chat {
			ch.Delta = &message{Content: t}
		} else {
			ch.Text = &t
		}
		if err := send(c.response([]choice{ch})); err != nil {
			return err
		}
		if st.done && c.includeUsage {
			u := c.response([]choice{})
			u.Usage = usageOf(c, st)
			return send(u)
		}
		return nil
	})
	if done {
		sse.done()
	}
}

// sse writes one answer's server-sent events, each flushed as it is sent.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
}

func newSSE(w http.ResponseWriter) *sse { return &sse{w: w, rc: http.NewResponseController(w)} }

// send writes v as one event's JSON data, after an event line when event
// is not empty.
func (e *sse) send(event string, v any) error {
	e.buf.Reset()
	if event != "" {
		e.buf.WriteString("event: " + event + "\n")
	}
	e.buf.WriteString("data: ")
	if err := json.NewEncoder(&e.buf).Encode(v); err != nil { // Encode ends the line
		return err
	}
	e.buf.WriteByte('\n')
	if _, err := e.w.Write(e.buf.Bytes()); err != nil {
		return err
	}
	return e.rc.Flush()
}

// done ends the stream as vLLM does: data: [DONE].
func (e *sse) done() {
	_, _ = e.w.Write([]byte("data: [DONE]\n\n"))
	_ = e.rc.Flush()
}

// collect waits for the whole output of a job that is not streamed and
// returns its text and last state; false when the client went away or the
// instance stopped first (the latter answered 503 with fail).
func (in *instance) collect(w http.ResponseWriter, r *http.Request, c *apiCall, s *stream, fail func(http.ResponseWriter, error)) (string, streamState, bool) {
	var b strings.Builder
	var sent int64
	var last streamState
	done := in.follow(r, s, func(st streamState) error {
		b.WriteString(text(c.job.id, sent, st.tokens, st.done && st.reason == stats.FinishStop))
		sent += st.tokens
		last = st
		return nil
	})
	if !done && r.Context().Err() == nil {
		fail(w, &apiError{http.StatusServiceUnavailable, "the engine stopped"})
	}
	return b.String(), last, done
}

// fullResponse answers with one JSON object once the job is done, with
// kv_transfer_params when it leaves its KV for a decode node.
func (in *instance) fullResponse(w http.ResponseWriter, r *http.Request, c *apiCall, s *stream, e *engine) {
	t, last, done := in.collect(w, r, c, s, writeError)
	if !done {
		return
	}
	ch := choice{FinishReason: finishReason(last)}
	if c.chat {
		ch.Message = &message{Role: "assistant", Content: t}
	} else {
		ch.Text = &t
	}
	resp := c.response([]choice{ch})
	resp.Usage = usageOf(c, last)
	if c.remoteDecode && last.reason == stats.FinishLength {
		resp.KVTransferParams = in.kvParams(c, e, last.cached)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// kvParams is what the prefill node returns for the decode node to read
// the request's KV: NixlConnectorScheduler.request_finished's fields, with
// made-up block ids and this instance's host; with -cached-tokens prefill,
// its cached prompt tokens too (vLLM from PR #54222).
func (in *instance) kvParams(c *apiCall, e *engine, cached int64) *kvTransferParams {
	blocks := (c.job.prompt + blockSize - 1) / blockSize
	first := int64(draw(c.job.id, blockSalt) * float64(max(e.kvCapacity/blockSize-blocks, 1)))
	ids := make([]int64, blocks)
	for i := range ids {
		ids[i] = first + int64(i)
	}
	host, _, err := net.SplitHostPort(in.listener.Addr().String())
	if err != nil {
		host = in.listener.Addr().String()
	}
	p := &kvTransferParams{DoRemotePrefill: true, RemoteBlockIDs: ids,
		RemoteEngineID:  new(string(in.role) + "-dp" + strconv.Itoa(e.rec.Rank())),
		RemoteRequestID: c.id, RemoteHost: &host, RemotePort: new(sideChannelPort + e.rec.Rank()), TPSize: 1}
	if in.prefillCached {
		p.RemotePrefillCachedTokens = &cached
	}
	return p
}
