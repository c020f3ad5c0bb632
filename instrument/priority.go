package instrument

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/infermetrics/infermetrics/stats"
)

// priorityLabelled are the families that carry the priority label under
// priority scheduling: the finished-request families that vLLM's test
// tests/v1/metrics/test_priority_labels.py lists (PR #58078's branch
// @04dc4606, not yet merged when read). Every finished-request histogram
// observed through finishedMeasures.plain must be listed here.
var priorityLabelled = []string{
	NameRequestSuccess, NameRequestPromptTokens, NameRequestGenerationTokens, NameRequestParamsMaxTokens,
	NameRequestPrefillKVComputedTokens, NameTimeToFirstToken, NameRequestTimePerOutputToken,
	NameE2ERequestLatency, NameRequestQueueTime, NameRequestInferenceTime, NameRequestPrefillTime,
	NameRequestDecodeTime, NameRequestNumPreemptions,
}

// WithPriorityScheduling declares that the engines schedule by request
// priority (vLLM's --scheduling-policy priority). The finished-request
// families then carry a priority label, bucketed by stats.BucketPriority
// from FinishedRequest.Priority; vllm:request_priority observes the raw
// priority; vllm:scheduler_policy_info marks "priority" active. TTFT is then
// observed from FinishedRequest.TimeToFirstToken when a request finishes,
// as in PR #58078's branch, instead of from Iteration.TTFT, so that it can
// carry the label: a request that never finishes gives no TTFT.
func WithPriorityScheduling() Option {
	return optionFunc(func(c *config) { c.priority = true })
}

// finishedMeasures are the attribute sets of one finished request's
// families: the engine's own, or with one priority bucket.
type finishedMeasures struct {
	plain   measure    // the histograms that carry the priority label
	success [5]measure // request_success by finish reason
}

// priorityState is an engine's priority scheduling configuration, its
// measures and its request_success cells by finish reason and bucket.
type priorityState struct {
	priority bool
	finished []finishedMeasures // one set, or one per stats.PriorityBucket
	policy   [2]measure         // fcfs, priority
	success  [5][stats.NumPriorityBuckets]atomic.Int64
}

// buildPriority builds the finished-request and policy measures, after
// newEngine built the engine's own.
func (e *engineState) buildPriority(cfg *config) {
	p := &e.prio
	p.priority = cfg.priority
	p.policy[0] = e.with(attribute.String(KeyPolicy, PolicyFCFS))
	p.policy[1] = e.with(attribute.String(KeyPolicy, PolicyPriority))
	if !p.priority {
		p.finished = []finishedMeasures{{plain: e.plain, success: e.byReason}}
		return
	}
	p.finished = make([]finishedMeasures, stats.NumPriorityBuckets)
	for _, b := range stats.PriorityBuckets() {
		label := attribute.String(KeyPriority, b.String())
		fm := &p.finished[b]
		fm.plain = e.with(label)
		for _, r := range stats.FinishReasons() {
			fm.success[r] = e.with(attribute.String(KeyFinishedReason, r.String()), label)
		}
	}
}

// finishedOf returns the measures of a finished request: those of its
// priority bucket under priority scheduling.
func (e *engineState) finishedOf(f *stats.FinishedRequest) *finishedMeasures {
	return e.finishedAt(f.Priority)
}

// finishedAt returns the finished-request measures of a priority.
func (e *engineState) finishedAt(priority int) *finishedMeasures {
	if !e.prio.priority {
		return &e.prio.finished[0]
	}
	return &e.prio.finished[stats.BucketPriority(priority)]
}

// countSuccess adds a finished request to vllm:request_success.
func (e *engineState) countSuccess(f *stats.FinishedRequest) {
	e.countReason(f.Reason, f.Priority)
}

// countReason adds a finished request of a reason and priority to
// vllm:request_success.
func (e *engineState) countReason(r stats.FinishReason, priority int) {
	if e.prio.priority {
		e.prio.success[r][stats.BucketPriority(priority)].Add(1)
		return
	}
	e.c.success[r].Add(1)
}

// recordPriority records what priority scheduling adds for a finished
// request: its TTFT with the priority label (when it had an output) and its
// raw priority.
func (e *Engine) recordPriority(ctx context.Context, f *stats.FinishedRequest, fm *finishedMeasures) {
	if !e.prio.priority {
		return
	}
	if f.GenerationTokens > 0 {
		e.inst.ttft.Record(ctx, f.TimeToFirstToken, fm.plain.rec...)
	}
	e.inst.requestPriority.Record(ctx, float64(f.Priority), e.plain.rec...)
}

// observePriority reports the scheduler policy gauge and, under priority
// scheduling, request_success by finish reason and priority bucket (every
// one from start-up, as the FCFS series are).
func (e *engineState) observePriority(o metric.Observer) {
	p := &e.prio
	for i, m := range p.policy {
		var v int64
		if (i == 1) == p.priority {
			v = 1
		}
		o.ObserveInt64(e.inst.schedulerPolicy, v, m.obs...)
	}
	if !p.priority {
		return
	}
	for r := range p.success {
		for b := range p.success[r] {
			o.ObserveInt64(e.inst.requestSuccess, p.success[r][b].Load(), p.finished[b].success[r].obs...)
		}
	}
}
