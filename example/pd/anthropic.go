package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/infermetrics/infermetrics/stats"
)

// Anthropic's Messages API on an instance, POST /v1/messages, streamed
// (SSE with event lines) or not, in the format of vLLM's
// vllm/entrypoints/anthropic/serving.py at
// 82df3f491008e46124f7afb5008c789dc7432515 (messages_full_converter,
// message_stream_converter: message_start, content_block_start/delta/stop,
// message_delta with the usage, message_stop, then data: [DONE]), with the
// usage of vLLM PR #40912 (not in that commit, which sets input_tokens to
// the whole prompt): input_tokens is the prompt's uncached part,
// cache_read_input_tokens its cached part and cache_creation_input_tokens
// 0, so that the whole prompt is their sum; message_start carries them
// too, the example knowing its cached tokens before the first output. vLLM
// turns the request into a chat completion; so does the example. Beyond
// vLLM, a request may carry kv_transfer_params as the chat endpoints take
// them, so that the router splits it into a prefill and a decode leg
// (vLLM's Anthropic request model has no such field at that commit).

// messagesRequest is the part of a Messages API request the example reads.
type messagesRequest struct {
	Model            string            `json:"model"`
	MaxTokens        *int64            `json:"max_tokens"`
	System           json.RawMessage   `json:"system"` // a string or a list of text blocks
	Messages         []chatMessage     `json:"messages"`
	Stream           bool              `json:"stream"`
	KVTransferParams *kvTransferParams `json:"kv_transfer_params"`
}

// Messages API objects, in the field order of vLLM's protocol.py.
type (
	anthropicMessage struct {
		ID               string            `json:"id"`
		Type             string            `json:"type"`
		Role             string            `json:"role"`
		Content          []anthropicBlock  `json:"content"`
		Model            string            `json:"model"`
		StopReason       *string           `json:"stop_reason"`
		StopSequence     *string           `json:"stop_sequence"`
		Usage            anthropicUsage    `json:"usage"`
		KVTransferParams *kvTransferParams `json:"kv_transfer_params,omitempty"`
	}
	anthropicBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	anthropicUsage struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	}
	anthropicEvent struct {
		Type         string            `json:"type"`
		Message      *anthropicMessage `json:"message,omitempty"`
		Index        *int              `json:"index,omitempty"`
		ContentBlock *anthropicBlock   `json:"content_block,omitempty"`
		Delta        any               `json:"delta,omitempty"`
		Usage        *anthropicUsage   `json:"usage,omitempty"`
	}
	textDelta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	stopDelta struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
)

// serveMessages answers POST /v1/messages.
func (in *instance) serveMessages(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes)).Decode(&req); err != nil {
		writeAnthropicError(w, badRequest("invalid request body: %v", err))
		return
	}
	if req.MaxTokens == nil {
		writeAnthropicError(w, badRequest("max_tokens: Field required"))
		return
	}
	chat := apiRequest{Model: req.Model, MaxTokens: req.MaxTokens, Stream: req.Stream, KVTransferParams: req.KVTransferParams}
	if len(req.System) > 0 && string(req.System) != "null" {
		chat.Messages = append(chat.Messages, chatMessage{Role: "system", Content: req.System})
	}
	chat.Messages = append(chat.Messages, req.Messages...)
	c, err := in.accept(&chat, true, requestID(r), time.Now())
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	// vLLM asks its chat completion for the usage of every stream.
	c.anthropic, c.includeUsage = true, req.Stream
	in.run(w, r, c)
}

// writeAnthropicError writes err in the Messages API's error shape.
func writeAnthropicError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{http.StatusInternalServerError, err.Error()}
	}
	kind := map[int]string{400: "invalid_request_error", 404: "not_found_error", 503: "overloaded_error"}[ae.status]
	if kind == "" {
		kind = "api_error"
	}
	type info struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	writeJSON(w, ae.status, struct {
		Type  string `json:"type"`
		Error info   `json:"error"`
	}{"error", info{kind, ae.message}})
}

// stopReason is the Messages API's stop_reason of a finished job: vLLM's
// stop_reason_map (stop end_turn, length max_tokens), null otherwise.
func stopReason(st streamState) *string {
	if !st.done {
		return nil
	}
	switch st.reason {
	case stats.FinishStop:
		return new("end_turn")
	case stats.FinishLength:
		return new("max_tokens")
	}
	return nil
}

// anthropicUsageOf is the Messages API usage of a job so far.
func anthropicUsageOf(c *apiCall, st streamState, output int64) anthropicUsage {
	cached := c.cachedTokens(st)
	return anthropicUsage{InputTokens: c.job.prompt - cached, OutputTokens: output, CacheReadInputTokens: cached}
}

func (c *apiCall) message(st streamState, output int64) *anthropicMessage {
	return &anthropicMessage{ID: "chatcmpl-" + c.id, Type: "message", Role: "assistant", Content: []anthropicBlock{},
		Model: c.model, StopReason: stopReason(st), Usage: anthropicUsageOf(c, st, output)}
}

// fullMessage answers with one message once the job is done.
func (in *instance) fullMessage(w http.ResponseWriter, r *http.Request, c *apiCall, s *stream, e *engine) {
	t, last, done := in.collect(w, r, c, s, writeAnthropicError)
	if !done {
		return
	}
	m := c.message(last, last.generated)
	m.Content = []anthropicBlock{{Type: "text", Text: t}}
	if c.remoteDecode && last.reason == stats.FinishLength {
		m.KVTransferParams = in.kvParams(c, e, last.cached)
	}
	writeJSON(w, http.StatusOK, m)
}

// streamMessages answers with the Messages API's events, one
// content_block_delta per batch of tokens taken from the engine.
func (in *instance) streamMessages(w http.ResponseWriter, r *http.Request, c *apiCall, s *stream) {
	sse := newSSE(w)
	send := func(ev anthropicEvent) error { return sse.send(ev.Type, ev) }
	var sent int64
	started, blockOpen := false, false
	index := 0
	done := in.follow(r, s, func(st streamState) error {
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			if err := send(anthropicEvent{Type: "message_start", Message: c.message(streamState{cached: st.cached}, 0)}); err != nil {
				return err
			}
		}
		t := text(c.job.id, sent, st.tokens, st.done && st.reason == stats.FinishStop)
		sent += st.tokens
		if t != "" {
			if !blockOpen {
				blockOpen = true
				if err := send(anthropicEvent{Type: "content_block_start", Index: &index,
					ContentBlock: &anthropicBlock{Type: "text"}}); err != nil {
					return err
				}
			}
			if err := send(anthropicEvent{Type: "content_block_delta", Index: &index, Delta: textDelta{"text_delta", t}}); err != nil {
				return err
			}
		}
		if !st.done {
			return nil
		}
		if blockOpen {
			if err := send(anthropicEvent{Type: "content_block_stop", Index: &index}); err != nil {
				return err
			}
		}
		u := anthropicUsageOf(c, st, st.generated)
		return send(anthropicEvent{Type: "message_delta", Delta: stopDelta{StopReason: stopReason(st)}, Usage: &u})
	})
	if done && send(anthropicEvent{Type: "message_stop"}) == nil {
		sse.done()
	}
}
