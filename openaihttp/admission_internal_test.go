package openaihttp

import (
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// vLLM's two admission refusals, as its create_error_response serializes
// a QueueOverflowError and a MaxQueuedTokensError (see admissionMessages),
// for the tests of both test packages.
const (
	VLLMQueueFull = `{"error":{"message":"The engine is currently busy and cannot accept new requests. ` +
		`Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`
	VLLMBacklogFull = `{"error":{"message":"The engine has reached its prefill token backlog limit. ` +
		`Please try again later or on a different instance.","type":"Service Unavailable","param":null,"code":503}}`
)

// Only a 503 whose JSON error message is one of vLLM's two admission
// messages is a refusal, with the limit its message names; vLLM's other
// 503s, a load balancer's and the same message under another status are
// not.
func TestAdmissionRejection(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		reason stats.AdmissionReason
		ok     bool
	}{
		{"queue full", 503, VLLMQueueFull, stats.AdmissionQueuedRequests, true},
		{"backlog full", 503, VLLMBacklogFull, stats.AdmissionQueuedTokens, true},
		{"pretty-printed, trailing newline", 503, strings.ReplaceAll(VLLMBacklogFull, ":", ": ") + "\n", stats.AdmissionQueuedTokens, true},
		{"flat OpenAI-style body", 503, `{"object":"error","message":"The engine is currently busy and cannot accept new requests. ` +
			`Please try again later or on a different instance.","type":"Service Unavailable","code":503}`, stats.AdmissionQueuedRequests, true},
		{"another vLLM 503", 503, `{"error":{"message":"The server is shutting down.","type":"Service Unavailable","param":null,"code":503}}`, 0, false},
		{"a load balancer's 503", 503, "no healthy upstream", 0, false},
		{"an empty 503", 503, "", 0, false},
		{"the message under 500", 500, VLLMQueueFull, 0, false},
		{"the message under 429", 429, VLLMQueueFull, 0, false},
		{"the message with more text", 503, strings.Replace(VLLMQueueFull, "instance.", "instance. Retry in 5 s.", 1), 0, false},
		{"an error that is a string", 503, `{"error":"The engine is currently busy"}`, 0, false},
		{"longer than vLLM's could be", 503, VLLMQueueFull + strings.Repeat(" ", maxAdmissionBody), 0, false},
	} {
		reason, ok := admissionRejection(c.status, []byte(c.body))
		if ok != c.ok || reason != c.reason {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, reason, ok, c.reason, c.ok)
		}
	}
}
