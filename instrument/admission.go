package instrument

import (
	"context"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// NameAdmissionRejections is vLLM's vllm:admission_rejections_total: the
// admission attempts its front end refused (HTTP 503) because a queue limit
// was reached, by the limit (KeyWaitingReason, "reason": stats.AdmissionReason).
// vLLM counts one per refused attempt, whatever the request's n, in its
// front end (AsyncLLM.check_admission, through its StatLoggerManager) before
// the request reaches an engine: its series have model_name but no engine
// label (PR #55812).
const NameAdmissionRejections = "vllm.admission_rejections"

const perAdmission = "each admission attempt refused (Engine.RecordAdmissionRejection; openaihttp's handler, " +
	"for an upstream vLLM's admission 503 it passes on)"

// admissionState is a Recorder's count of refused admissions, by reason,
// which its engines share: one series per reason for the Recorder, as vLLM
// has one for its front end, whichever engine records it.
type admissionState struct {
	count [stats.NumAdmissionReasons]atomic.Int64
	by    [stats.NumAdmissionReasons]measure // model_name, reason, constant attributes: no engine
}

func newAdmissionState(cfg *config) *admissionState {
	a := &admissionState{}
	for i, r := range stats.AdmissionReasons() {
		kv := append([]attribute.KeyValue{attribute.String(KeyModelName, cfg.modelName),
			attribute.String(KeyWaitingReason, r.String())}, cfg.attributes...)
		a.by[i] = newMeasure(kv...)
	}
	return a
}

// observe reports every reason's count, zero included: vLLM's front end
// has the family from start-up (it is among the families its metrics test
// expects of a server started without the limits).
func (a *admissionState) observe(o metric.Observer, inst metric.Int64ObservableCounter) {
	for i := range a.count {
		o.ObserveInt64(inst, a.count[i].Load(), a.by[i].obs...)
	}
}

// RecordAdmissionRejection counts one admission attempt the front end
// refused because the limit of reason was reached, in
// vllm:admission_rejections_total: one per attempt, whatever the request's
// n, as vLLM counts them. The series carry model_name and reason, not
// engine: the count is the Recorder's, whichever of its engines records
// it. An unknown reason is refused, not mapped to another: nothing is
// recorded, and the refusal is counted and reported (see RecordIteration).
func (e *Engine) RecordAdmissionRejection(ctx context.Context, reason stats.AdmissionReason) {
	if err := e.recordAdmissionRejection(reason); err != nil {
		e.refuse(refusedAdmission, "RecordAdmissionRejection", err)
	}
}

// recordAdmissionRejection is RecordAdmissionRejection, returning its refusal.
func (e *Engine) recordAdmissionRejection(reason stats.AdmissionReason) error {
	if err := e.usable(false); err != nil {
		return err
	}
	if err := reason.Validate(); err != nil {
		return err
	}
	e.admission.count[reason].Add(1)
	return nil
}

// admissionReasonList lists the reason values, for the catalog.
func admissionReasonList() string {
	labels := make([]string, 0, stats.NumAdmissionReasons)
	for _, r := range stats.AdmissionReasons() {
		labels = append(labels, r.String()+" (--"+strings.ReplaceAll(r.String(), "_", "-")+")")
	}
	return strings.Join(labels, " or ")
}
