package corpus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/infermetrics/infermetrics/stats"
)

// Kinds returns what an entry's response says beside its prompt and
// generation counts (KindsOf), of its Body.
func (e *Entry) Kinds() (stats.TokenUsage, string, error) {
	body, err := e.Body()
	if err != nil {
		return stats.TokenUsage{}, "", err
	}
	return KindsOf(e.API, e.Status, body)
}

// KindsOf returns what a response body of an API (an Entry's API, or
// ollama_* for Ollama's native ones) says beside its prompt and generation
// counts, read with encoding/json apart from openaihttp's scanner: the
// kinds of tokens its usage reports (as stats.ObservedRequest.Details
// holds them, each as reported, bounds not applied) and the model it names
// (gen_ai.response.model), by each API's definition (openaihttp/doc.go):
//
//   - chat, completions, embeddings: the last usage with prompt_tokens;
//     prompt_tokens_details' cached_tokens (cache_read; else Mistral's
//     usage.num_cached_tokens), cache_write_tokens
//     (cache_write), audio_tokens and image_tokens (input_audio,
//     input_image); completion_tokens_details' reasoning_tokens,
//     audio_tokens and image_tokens (reasoning, output_audio,
//     output_image); without a cached count, llama.cpp's timings.cache_n
//     as the cache reads; the first document's model;
//   - responses: the last usage (of a response, or of the body), with
//     input_tokens_details and output_tokens_details read alike; the
//     first response's model;
//   - messages: cache_read_input_tokens (cache_read),
//     cache_creation_input_tokens (cache_write) and
//     output_tokens_details.thinking_tokens (reasoning), each field's last
//     value over message_start's message.usage and message_delta's usage;
//     message_start's (or the body's) model;
//   - Ollama's: no kind; the first document's model.
//
// A response of status 400 or above names no kind and no model. An error
// says a count is neither a non-negative integer nor null (openaihttp
// then takes the whole usage as unknown).
func KindsOf(api string, status int, body []byte) (stats.TokenUsage, string, error) {
	var u stats.TokenUsage
	if status >= 400 {
		return u, "", nil
	}
	docs := documents(body)
	model := ""
	for _, d := range docs {
		m := d
		switch api {
		case "responses":
			if r, ok := d["response"].(map[string]any); ok {
				m = r
			}
		case "messages":
			if r, ok := d["message"].(map[string]any); ok {
				m = r
			}
		}
		if s, ok := m["model"].(string); ok && s != "" && len(s) <= stats.MaxResponseModelLen {
			model = s
			break
		}
	}
	var err error
	switch {
	case api == "messages":
		err = anthropicKinds(docs, &u)
	case strings.HasPrefix(api, "ollama"):
	default:
		err = openAIKinds(api, docs, &u)
	}
	return u, model, err
}

// openAIKinds reads the details of the last usage of OpenAI's APIs.
func openAIKinds(api string, docs []map[string]any, u *stats.TokenUsage) error {
	prompt, in, out := "prompt_tokens", "prompt_tokens_details", "completion_tokens_details"
	if api == "responses" {
		prompt, in, out = "input_tokens", "input_tokens_details", "output_tokens_details"
	}
	var last map[string]any
	for _, d := range docs {
		usage, ok := d["usage"].(map[string]any)
		if r, isResp := d["response"].(map[string]any); isResp && api == "responses" {
			usage, ok = r["usage"].(map[string]any)
		}
		if ok && usage[prompt] != nil {
			last = usage
		}
	}
	if last == nil {
		return nil
	}
	defer func() {
		if !u.Has(stats.TokenCacheRead) {
			for _, d := range docs { // llama.cpp's cached tokens, without a cached count
				_ = setCount(u, stats.TokenCacheRead, d["timings"], "cache_n")
			}
		}
	}()
	if err := setCount(u, stats.TokenCacheRead, last, "num_cached_tokens"); err != nil { // Mistral's, replaced by the details' count below
		return err
	}
	for _, f := range []struct {
		object, key string
		kind        stats.TokenKind
	}{
		{in, "cached_tokens", stats.TokenCacheRead}, {in, "cache_write_tokens", stats.TokenCacheWrite},
		{in, "audio_tokens", stats.TokenInputAudio}, {in, "image_tokens", stats.TokenInputImage},
		{out, "reasoning_tokens", stats.TokenReasoning},
		{out, "audio_tokens", stats.TokenOutputAudio}, {out, "image_tokens", stats.TokenOutputImage},
	} {
		if err := setCount(u, f.kind, last[f.object], f.key); err != nil {
			return err
		}
	}
	return nil
}

// anthropicKinds merges the details of Anthropic's usage over its events.
func anthropicKinds(docs []map[string]any, u *stats.TokenUsage) error {
	for _, d := range docs {
		usage, ok := d["usage"].(map[string]any)
		if m, isMsg := d["message"].(map[string]any); isMsg {
			usage, ok = m["usage"].(map[string]any)
		}
		if !ok {
			continue
		}
		for _, f := range []struct {
			key  string
			kind stats.TokenKind
		}{{"cache_read_input_tokens", stats.TokenCacheRead}, {"cache_creation_input_tokens", stats.TokenCacheWrite}} {
			if err := setCount(u, f.kind, usage, f.key); err != nil {
				return err
			}
		}
		if err := setCount(u, stats.TokenReasoning, usage["output_tokens_details"], "thinking_tokens"); err != nil {
			return err
		}
	}
	return nil
}

// setCount sets kind k from object[key] when it is a count; null or absent
// sets nothing.
func setCount(u *stats.TokenUsage, k stats.TokenKind, object any, key string) error {
	o, ok := object.(map[string]any)
	if !ok || o[key] == nil {
		return nil
	}
	n, ok := o[key].(json.Number)
	if !ok {
		return fmt.Errorf("%s: %v is no count", key, o[key])
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("%s: %v is no count", key, n)
	}
	u.Set(k, v)
	return nil
}

var lineBreak = regexp.MustCompile(`\r\n|\r|\n`)

// documents returns the JSON objects of a body: the body itself, or the
// data of each event of an event stream (its data lines joined by a line
// feed); what is not a JSON object is left out.
func documents(body []byte) []map[string]any {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	if d, ok := object(bytes.TrimSpace(body)); ok {
		return []map[string]any{d}
	}
	var docs []map[string]any
	var data [][]byte
	flush := func() {
		if d, ok := object(bytes.Join(data, []byte("\n"))); ok {
			docs = append(docs, d)
		}
		data = nil
	}
	lines := lineBreak.Split(string(body), -1)
	for _, line := range lines {
		switch {
		case line == "":
			flush()
		case len(line) >= 5 && line[:5] == "data:":
			v := line[5:]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			data = append(data, []byte(v))
		}
	}
	flush()
	if len(docs) == 0 { // NDJSON
		for _, line := range lines {
			if d, ok := object([]byte(line)); ok {
				docs = append(docs, d)
			}
		}
	}
	return docs
}

// object decodes a JSON object, its numbers as json.Number.
func object(b []byte) (map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var d map[string]any
	if err := dec.Decode(&d); err != nil || d == nil {
		return nil, false
	}
	return d, true
}

// ErrorType is why an entry's request failed, as its recording says and
// openaihttp records it (stats.ObservedRequest.ErrorType), stated by hand
// from each failed recording's status and body (none fails otherwise): the
// status's class (400 invalid_request, 401 authentication, 404 not_found,
// 429 rate_limited: OpenRouter's 429 carries its error document) but for
// the Responses API's 400s whose code is model_not_found, Groq's error
// events of type invalid_request_error in a 200 stream, and OpenRouter's
// error chunk that names no class ("Token limit reached", code 400).
// ErrorNone for an entry that did not fail.
func (e *Entry) ErrorType() stats.ErrorType {
	if e.Expect.Finish != "error" {
		return stats.ErrorNone
	}
	switch e.ID {
	case "0222_openai_responses", "0259_openai_responses":
		return stats.ErrorNotFound
	case "0403_groq_chat", "0406_groq_chat":
		return stats.ErrorInvalidRequest
	case "0604_openrouter_chat":
		return stats.ErrorOther
	}
	switch e.Status {
	case 400:
		return stats.ErrorInvalidRequest
	case 401:
		return stats.ErrorAuthentication
	case 404:
		return stats.ErrorNotFound
	case 429:
		return stats.ErrorRateLimited
	}
	return stats.ErrorOther
}

// FixtureAPI is the API KindsOf reads a body of openaihttp's fixtures
// (testdata/manifest.json) as, from its endpoint: the OpenAI-style APIs
// as they are, vLLM's pooling endpoints as embeddings, Ollama's native
// ones as ollama_*.
func FixtureAPI(endpoint string) string {
	switch endpoint {
	case "rerank", "score":
		return "embeddings"
	case "apichat", "apigenerate", "apiembed", "apiembeddings":
		return "ollama_" + endpoint
	}
	return endpoint
}
