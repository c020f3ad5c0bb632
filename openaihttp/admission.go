package openaihttp

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/infermetrics/infermetrics/stats"
)

// vLLM's admission control (--max-num-queued-reqs, --max-num-queued-tokens;
// PR #49445) refuses a request it would not queue with HTTP 503 and one of
// two fixed messages: QueueOverflowError's and MaxQueuedTokensError's
// (vllm/exceptions.py, asserted by tests/v1/engine/test_admission_control.py
// @00ec631b51caa7575aab9817e96cd984c3bd6f60), in the error body its
// create_error_response builds from a GracefulHTTPError
// (vllm/entrypoints/serve/exception_handling/error_response.py
// @ba638200e9731168ac964ebcee2f704f9f01098d):
//
//	{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}
//
// The message tells the refusal from vLLM's other 503s (an engine that is
// shutting down or dead, a failed generation) and from a 503 of a server in
// between, and says which limit was reached.
var admissionMessages = [stats.NumAdmissionReasons]string{
	stats.AdmissionQueuedRequests: "The engine is currently busy and cannot accept new requests. " +
		"Please try again later or on a different instance.",
	stats.AdmissionQueuedTokens: "The engine has reached its prefill token backlog limit. " +
		"Please try again later or on a different instance.",
}

// maxAdmissionBody bounds the body admissionRejection reads: vLLM's is
// under 200 bytes; a longer one is not vLLM's refusal.
const maxAdmissionBody = 1 << 10

// admissionRejection reports whether a response is a vLLM front end's
// admission refusal, and the limit it reached: status 503 and a JSON error
// body, at most maxAdmissionBody bytes, whose message (error.message, or a
// top-level message as older OpenAI-style bodies have it) is one of vLLM's
// two admission messages. It is the one place the refusal is recognized:
// the handler counts it (vllm:admission_rejections_total), and an error
// classification names it stats.ErrorAdmissionRejected from it.
func admissionRejection(status int, body []byte) (stats.AdmissionReason, bool) {
	if status != http.StatusServiceUnavailable || len(body) > maxAdmissionBody {
		return 0, false
	}
	var doc struct {
		Message *string `json:"message"`
		Error   *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(body), &doc); err != nil {
		return 0, false
	}
	var message string
	switch {
	case doc.Error != nil:
		message = doc.Error.Message
	case doc.Message != nil:
		message = *doc.Message
	}
	for r, m := range admissionMessages {
		if message == m {
			return stats.AdmissionReason(r), true
		}
	}
	return 0, false
}
