package openaihttp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/infermetrics/infermetrics/stats"
)

// Why a request failed (stats.ObservedRequest.ErrorType), from the
// response's status and error body, or from the error that cut it.
//
// An error body is read, up to maxErrorBody bytes, as one JSON document in
// any of the shapes upstreams send (cErrRoot): OpenAI's and vLLM's
// {"error":{"type","code","message",...}}, vLLM's older ErrorResponse with
// them at the root ({"object":"error","message",...}), Anthropic's
// {"type":"error","error":{"type":"rate_limit_error",...}}, Azure's
// {"error":{"code":"429",...}}, Gemini's [{"error":{"code":429,"status":
// "RESOURCE_EXHAUSTED",...}}], Ollama's {"error":"..."}; an error in a
// stream ({"error":{...}} data, Anthropic's error event, the Responses
// API's error event and failed response) is read with the stream's
// documents. Each type, code and message read says a class (codeClass,
// messageClass); the most specific one is kept.

// maxErrorBody bounds the bytes of an error body read.
const maxErrorBody = 64 << 10

// Classes of errors a body names (doc.errClass), by how specific they are
// (errRank): a generic one (a type any invalid request or failure has), a
// specific one (a cause), or one the status alone cannot tell (a context
// length refusal, vLLM's admission refusal).
const (
	errNone uint8 = iota
	errInvalid
	errServer
	errRate
	errOverloaded
	errAuth
	errPermission
	errNotFound
	errTimeout
	errContextLength
	errAdmission
)

func errRank(c uint8) int {
	switch {
	case c >= errContextLength:
		return 3
	case c >= errRate:
		return 2
	case c > errNone:
		return 1
	}
	return 0
}

// noteError keeps in dst the more specific of its class and c; of two
// alike, the first.
func noteError(dst *uint8, c uint8) {
	if errRank(c) > errRank(*dst) {
		*dst = c
	}
}

// classType is the stats.ErrorType of a class.
var classType = [...]stats.ErrorType{
	errNone: stats.ErrorNone, errInvalid: stats.ErrorInvalidRequest, errServer: stats.ErrorServerError,
	errRate: stats.ErrorRateLimited, errOverloaded: stats.ErrorOverloaded, errAuth: stats.ErrorAuthentication,
	errPermission: stats.ErrorPermission, errNotFound: stats.ErrorNotFound, errTimeout: stats.ErrorTimeout,
	errContextLength: stats.ErrorContextLengthExceeded, errAdmission: stats.ErrorAdmissionRejected,
}

// codeStems are what an error's type or code says, lower-cased with only
// its letters and digits kept (rate_limit_error: ratelimiterror), by the
// stems it contains, the more specific classes first. The values were read
// in the upstreams' code and responses: OpenAI's types and codes
// (invalid_request_error, context_length_exceeded, invalid_api_key,
// model_not_found, rate_limit_exceeded, insufficient_quota, server_error:
// testdata/corpus), Anthropic's error types (authentication_error,
// permission_error, not_found_error, request_too_large, rate_limit_error,
// api_error, overloaded_error), vLLM's (BadRequestError, NotFoundError,
// InternalServerError: ErrorInfo's type), llama.cpp's
// exceed_context_size_error, Gemini's statuses (INVALID_ARGUMENT,
// UNAUTHENTICATED, PERMISSION_DENIED, NOT_FOUND, RESOURCE_EXHAUSTED,
// UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL), Azure's codes
// (DeploymentNotFound, context_length_exceeded).
var codeStems = []struct {
	class uint8
	stems []string
}{
	{errContextLength, []string{"contextlength", "contextwindow", "exceedcontext"}},
	{errRate, []string{"ratelimit", "quota", "resourceexhausted", "toomanyrequests"}},
	{errOverloaded, []string{"overload"}},
	{errAuth, []string{"authentication", "unauthenticated", "unauthorized", "invalidapikey", "invalidauth"}},
	{errPermission, []string{"permission", "forbidden"}},
	{errNotFound, []string{"notfound"}},
	{errTimeout, []string{"timeout", "timedout", "deadlineexceeded"}},
	{errInvalid, []string{"invalidrequest", "badrequest", "invalidargument", "invalidvalue", "unprocessable", "toolarge"}},
	{errServer, []string{"apierror", "servererror", "internal", "unavailable"}},
}

// codeClass is the class an error's type or code names; errNone for one
// that names none (a number: the status again).
func codeClass(v []byte) uint8 {
	var buf [64]byte
	n := 0
	for _, c := range v {
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		default:
			continue
		}
		if n == len(buf) {
			break
		}
		buf[n] = c
		n++
	}
	for _, s := range codeStems {
		for _, stem := range s.stems {
			if bytes.Contains(buf[:n], []byte(stem)) {
				return s.class
			}
		}
	}
	return errNone
}

// messagePhrases are what an error's message says, lower-cased, when its
// type and code do not: a context length refusal (OpenAI's, DeepSeek's and
// vLLM's "This model's maximum context length is ...", vLLM's "The decoder
// prompt (length N) is longer than the maximum model length of M",
// SGLang's and Mistral's "context length", Anthropic's "prompt is too long"
// and "exceed context limit", llama.cpp's "exceeds the available context
// size", Gemini's "exceeds the maximum number of tokens allowed"), vLLM's
// admission refusals (see admissionPhrases), an overloaded server
// (OpenAI's "The engine is currently overloaded", Anthropic's
// "Overloaded", Ollama's queue full "server busy, please try again.
// maximum pending requests exceeded": ErrMaxQueue, ollama/ollama @
// 09f15872 server/sched.go, answered 503), a rate limit.
var messagePhrases = []struct {
	class   uint8
	phrases []string
}{
	{errContextLength, []string{"context length", "context_length", "context window", "maximum model length",
		"prompt is too long", "context limit", "context size", "maximum number of tokens allowed"}},
	{errAdmission, admissionPhrases},
	{errOverloaded, []string{"overloaded", "server busy", "over capacity"}},
	{errRate, []string{"rate limit"}},
}

// admissionPhrases are the messages of vLLM's admission refusals (the first
// sentences of admissionMessages, where admissionRejection reads them), the 503
// its front end answers when --max-num-queued-reqs or
// --max-num-queued-tokens is reached (PR #49445, counted in
// vllm:admission_rejections_total by PR #55812): QueueOverflowError's "The
// engine is currently busy and cannot accept new requests. ..." and
// MaxQueuedTokensError's "The engine has reached its prefill token backlog
// limit. ...", raised by AsyncLLM.check_admission (vllm/exceptions.py and
// vllm/v1/engine/async_llm.py, as the search tool's store holds them; the
// newest vllm-project/vllm snapshot it has, 055e47c2, moved
// vllm/exceptions.py to vllm/foundation/system/exceptions.py, which it
// does not hold), and an earlier form of the same errors ("Request queue
// full.", "Request queue reached max pending tokens limit.":
// vllm/v1/engine/exceptions.py @ 03e79b36). Their type is the status's
// phrase ("Service Unavailable"), which names no cause.
var admissionPhrases = append(admissionFirstSentences(), "request queue full", "queue reached max pending tokens")

// admissionFirstSentences returns the first sentence of each of vLLM's
// admission messages (admissionMessages, their one definition), lower-case
// for containsFold: the part that names the limit.
func admissionFirstSentences() []string {
	var out []string
	for _, m := range admissionMessages {
		first, _, _ := strings.Cut(m, ". ")
		out = append(out, strings.ToLower(first))
	}
	return out
}

// messageClass is the class an error's message names; errNone for none.
func messageClass(v []byte) uint8 {
	// Its first maxValue bytes: one class however the body was split into
	// reads (a string across reads is kept only so far).
	v = v[:min(len(v), maxValue)]
	for _, m := range messagePhrases {
		for _, p := range m.phrases {
			if containsFold(v, p) {
				return m.class
			}
		}
	}
	return errNone
}

// containsFold reports whether s holds sub (lower-case ASCII), ASCII
// letters of s compared case-insensitively.
func containsFold(s []byte, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for ; j < len(sub); j++ {
			c := s[i+j]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				break
			}
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

// statusType is what a status alone says of a failure; ErrorNone for a
// status that says nothing (below 400, or an unusual 4xx) and for a 429,
// which responseError tells apart first.
func statusType(status int) stats.ErrorType {
	switch {
	case status == http.StatusUnauthorized:
		return stats.ErrorAuthentication
	case status == http.StatusForbidden:
		return stats.ErrorPermission
	case status == http.StatusNotFound:
		return stats.ErrorNotFound
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return stats.ErrorTimeout
	case status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity:
		return stats.ErrorInvalidRequest
	case status == 499: // nginx's: the client closed the request
		return stats.ErrorClientCanceled
	case status == 529: // Anthropic's overloaded
		return stats.ErrorOverloaded
	case status >= 500:
		return stats.ErrorServerError
	}
	return stats.ErrorNone
}

// gatewayRateLimitHeader is set by Envoy's rate limit filter on the 429 it
// answers itself (envoyproxy/envoy, x-envoy-ratelimited): a server in
// between refused, not the provider.
const gatewayRateLimitHeader = "X-Envoy-Ratelimited"

// responseError is why a response failed, from its status, the class its
// error body (or stream error) named, whether it had a provider's error
// document (body: an "error" member, or "type":"error" or "object":"error"
// at its root), and whether a server in between marked it
// (gatewayRateLimitHeader). A class the status cannot tell (context
// length, admission) wins; a 429 is the provider's rate limit when it
// carries the provider's error document, else a server in between's
// (gateway_rate_limited: an Envoy, nginx or API gateway 429 is empty, text,
// HTML or {"message": ...}, and so is one marked); then a specific class
// (a 400 whose code is model_not_found is not_found), the status, a
// generic class, _OTHER.
func responseError(status int, class uint8, body, gateway bool) stats.ErrorType {
	switch {
	case errRank(class) == 3:
		return classType[class]
	case status == http.StatusTooManyRequests && (gateway || !body):
		return stats.ErrorGatewayRateLimited
	case status == http.StatusTooManyRequests:
		return stats.ErrorRateLimited
	case errRank(class) == 2:
		return classType[class]
	}
	if t := statusType(status); t != stats.ErrorNone {
		return t
	}
	if class != errNone {
		return classType[class]
	}
	return stats.ErrorOther
}

// causeType is why a request failed from the error that ended it: its
// context's (canceled: the client went away; past its deadline: a
// timeout), a timeout of the connection (net.Error: a response header
// timeout, a dial or read timeout), else, when no response came
// (noResponse), the upstream not reached (connection refused or reset, a
// DNS or TLS failure, EOF before the response); a response cut after it
// began for another cause is _OTHER.
func causeType(err error, noResponse bool) stats.ErrorType {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return stats.ErrorClientCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return stats.ErrorTimeout
	case noResponse:
		return stats.ErrorUpstreamUnreachable
	}
	return stats.ErrorOther
}

// gatewayMarked reports a response a server in between marked as its own
// rate limit.
func gatewayMarked(h http.Header) bool {
	return strings.TrimSpace(headerValue(h, gatewayRateLimitHeader)) != ""
}
