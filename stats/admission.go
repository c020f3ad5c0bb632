package stats

import "errors"

// ErrUnknownAdmissionReason reports an AdmissionReason that is not one of
// AdmissionReasons().
var ErrUnknownAdmissionReason = errors.New("unknown admission rejection reason")

// AdmissionReason is the limit a front end's admission control reached when
// it refused a request, before queueing it: the reason label of
// vllm:admission_rejections_total. vLLM's limits are --max-num-queued-reqs
// (requests waiting or running, a request with n > 1 taking n) and
// --max-num-queued-tokens (prompt tokens of the requests still in prefill),
// checked in that order (vLLM PR #49445; the counter, PR #55812).
type AdmissionReason uint8

const (
	// AdmissionQueuedRequests: the request limit (--max-num-queued-reqs).
	AdmissionQueuedRequests AdmissionReason = iota
	// AdmissionQueuedTokens: the prefill token backlog limit
	// (--max-num-queued-tokens).
	AdmissionQueuedTokens

	numAdmissionReasons = iota
)

// NumAdmissionReasons is the number of AdmissionReason values.
const NumAdmissionReasons = numAdmissionReasons

// admissionReasonLabels are the reason label values: the names of vLLM's
// scheduler options that set the limits (SchedulerConfig), which PR #55812
// names as what the label tells apart.
var admissionReasonLabels = [numAdmissionReasons]string{"max_num_queued_reqs", "max_num_queued_tokens"}

// AdmissionReasons returns every AdmissionReason in label order.
func AdmissionReasons() []AdmissionReason {
	return []AdmissionReason{AdmissionQueuedRequests, AdmissionQueuedTokens}
}

// String returns the reason label value: "max_num_queued_reqs" or
// "max_num_queued_tokens".
func (r AdmissionReason) String() string {
	if int(r) < numAdmissionReasons {
		return admissionReasonLabels[r]
	}
	return "unknown"
}

// Validate reports ErrUnknownAdmissionReason for a value not in
// AdmissionReasons().
func (r AdmissionReason) Validate() error {
	if int(r) >= numAdmissionReasons {
		return fieldErr("AdmissionReason", uint8(r), ErrUnknownAdmissionReason)
	}
	return nil
}
