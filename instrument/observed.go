package instrument

import (
	"context"

	"github.com/infermetrics/infermetrics/stats"
)

// A front end (an OpenAI-compatible server, gateway or router; see package
// openaihttp) sees requests, chunks and usage but no engine step. It records
// on an Engine with RequestStarted, RecordChunkGap, RecordRequest and
// RequestEnded, and only what it observes: no iteration tokens, no queue
// or inference time, prefill and decode time only as a server reports them
// (stats.ObservedRequest.ServerTimes), no KV cache usage, no preemptions,
// no cache lookups. Those families stay at zero (histograms: absent) on a
// Recorder that only a front end feeds.

// RequestStarted counts a request in flight, reported in
// vllm:num_requests_running until RequestEnded. The gauge reports the
// engine's last RecordScheduler value plus the requests in flight: an
// Engine fed by a front end should not also be fed steps, or the gauge
// counts each request twice. On a nil Engine or a closed Recorder it does
// nothing but report that.
func (e *Engine) RequestStarted() {
	if err := e.usable(false); err != nil {
		e.refuse(refusedRequest, "RequestStarted", err)
		return
	}
	e.c.inFlight.Add(1)
}

// RequestEnded ends a request counted by RequestStarted. An end without a
// start is ignored: the count never goes below zero.
func (e *Engine) RequestEnded() {
	if err := e.usable(false); err != nil {
		e.refuse(refusedRequest, "RequestEnded", err)
		return
	}
	for {
		v := e.c.inFlight.Load()
		if v <= 0 || e.c.inFlight.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// RecordChunkGap records the time between two consecutive content chunks of
// a streamed response as vllm:inter_token_latency_seconds, as the chunks
// arrive (vLLM too records it at each step, before the finish). A chunk
// carrying several tokens is one value. A bad duration is refused: nothing
// is recorded, and the refusal is counted and reported (see
// RecordIteration).
func (e *Engine) RecordChunkGap(ctx context.Context, seconds float64) {
	if err := e.recordChunkGap(ctx, seconds); err != nil {
		e.refuse(refusedChunkGap, "RecordChunkGap", err)
	}
}

// recordChunkGap is RecordChunkGap, returning its refusal.
func (e *Engine) recordChunkGap(ctx context.Context, seconds float64) error {
	if err := e.usable(false); err != nil {
		return err
	}
	if err := stats.CheckSeconds("seconds", seconds); err != nil {
		return err
	}
	e.inst.itl.Record(ctx, seconds, e.plain.rec...)
	return nil
}

// RecordRequest records one finished request as a front end observed it:
// vllm:request_success by finish reason, e2e latency, and, when streamed,
// TTFT; with usage, the prompt tokens by source (cached ones as
// local_cache_hit, or external_kv_transfer with CachedByKVTransfer), the
// cached prompt tokens, the generation tokens, the request's prompt and
// generation token histograms and the time per output token; the
// server-reported prefill and decode times (ServerTimes); and the
// max_tokens and n parameters when given. With WithGenAISemconv it also
// records the GenAI server metrics by the same rules as RecordIteration and
// RecordFinished (the time per output token of successful requests with
// usage and more than one output token), with gen_ai.operation.name from
// r.Operation, error.type from r.ErrorType and gen_ai.response.model from
// r.ResponseModel (see MaxResponseModels). Without usage no token family
// is recorded. An invalid
// request is refused: nothing of it is recorded, and the refusal is counted
// and reported (see RecordIteration). Counts above stats.MaxRequestTokens
// (a client's max_tokens or n, an upstream's usage) are dropped for this
// request alone (stats.ObservedRequest.Bounded): the rest is recorded, and
// the drop is counted (kind value_dropped) and reported, so no one request
// can bring a total near its limit and make later ones unrecordable. Cached
// tokens above the prompt (an upstream whose prompt_tokens leaves them out)
// are dropped alike: the prompt and generation tokens are recorded, the
// prompt all local_compute. A request refused at admission (ErrorType
// stats.ErrorAdmissionRejected) is in none of vLLM's request families, as
// vLLM counts it only in vllm:admission_rejections_total (see
// RecordAdmissionRejection); it is a failed request of the GenAI server
// metrics (WithGenAISemconv) and of the usage families (WithAttribution,
// WithPriceTable), by its error.type.
func (e *Engine) RecordRequest(ctx context.Context, r *stats.ObservedRequest) {
	dropped, err := e.recordObserved(ctx, r)
	if err != nil {
		e.refuse(refusedRequest, "RecordRequest", err)
	} else if dropped != nil {
		e.refuse(refusedValue, "RecordRequest", dropped)
	}
}

// recordObserved is RecordRequest, returning what it dropped and its
// refusal.
func (e *Engine) recordObserved(ctx context.Context, req *stats.ObservedRequest) (dropped, refused error) {
	if err := e.usable(req == nil); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := e.checkUsage(req); err != nil {
		return nil, err
	}
	bounded, dropped := req.Bounded()
	r := &bounded
	// Its tokens join the totals since start, which bound every series
	// (the usage families' too) below MaxTotal, refused or not.
	var inc increments
	inc.observed(r)
	if err := e.reserve(&inc); err != nil {
		return nil, err
	}
	model := 0 // a refused request takes none of the MaxResponseModels
	if e.server.on {
		model = e.respModels.index(r.ResponseModel)
	}
	if r.ErrorType == stats.ErrorAdmissionRejected {
		// Refused before it was queued: not one of vLLM's requests, which
		// counts it in vllm:admission_rejections_total alone
		// (RecordAdmissionRejection); a failed operation of the GenAI
		// conventions, and a request its caller made (the usage families).
		e.recordServerFinished(ctx, r.Operation, r.Reason, r.ErrorType, model, r.E2ELatency, 0, false)
		e.recordUsage(ctx, r)
		return dropped, nil
	}
	fm := e.finishedAt(r.Priority)
	in, rec := e.inst, fm.plain.rec
	e.countReason(r.Reason, r.Priority)
	in.e2e.Record(ctx, r.E2ELatency, rec...)
	if r.FirstToken {
		in.ttft.Record(ctx, r.TimeToFirstToken, rec...)
		e.recordServerTTFT(ctx, r.Operation, model, r.TimeToFirstToken)
	}
	tpot, tpotKnown := r.TimePerOutputToken()
	if tpotKnown {
		in.tpot.Record(ctx, tpot, rec...)
	}
	e.recordServerFinished(ctx, r.Operation, r.Reason, r.ErrorType, model, r.E2ELatency, tpot, tpotKnown && r.GenerationTokens > 1)
	if r.ServerTimes { // server-reported (Ollama, llama.cpp): see stats.ObservedRequest
		in.prefillTime.Record(ctx, r.PrefillTime, rec...)
		in.decodeTime.Record(ctx, r.DecodeTime, rec...)
	}
	if r.MaxTokens > 0 {
		in.paramsMaxTokens.Record(ctx, r.MaxTokens, rec...)
	}
	in.paramsN.Record(ctx, max(r.N, 1), e.plain.rec...)
	e.recordUsage(ctx, r)
	if !r.UsageKnown {
		return dropped, nil
	}
	e.c.addPrompt(r.Prompt())
	addPositive(&e.c.generation, r.GenerationTokens)
	in.requestPrompt.Record(ctx, r.PromptTokens, rec...)
	in.requestGeneration.Record(ctx, r.GenerationTokens, rec...)
	if max(r.N, 1) == 1 { // with n > 1 usage sums the choices: their maximum is unknown
		in.maxGeneration.Record(ctx, r.GenerationTokens, e.plain.rec...)
	}
	return dropped, nil
}

// observed adds what RecordRequest adds to the totals.
func (in *increments) observed(r *stats.ObservedRequest) {
	in.add(totRequests, 1)
	in.add(totParamsMaxTokens, r.MaxTokens)
	in.add(totParamsN, max(r.N, 1))
	if r.UsageKnown {
		in.add(totPromptTokens, r.PromptTokens)
		in.add(totGenerationTokens, r.GenerationTokens)
		in.add(totRequestPrompt, r.PromptTokens)
		in.add(totRequestGeneration, r.GenerationTokens)
		if max(r.N, 1) == 1 {
			in.add(totMaxGeneration, r.GenerationTokens)
		}
	}
}
