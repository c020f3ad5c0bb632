package stats

// apiFinishReasons maps the finish reasons servers return to vLLM's: OpenAI's
// finish_reason, Anthropic's stop_reason, Ollama's done_reason, the reasons of
// llm-d-inference-sim, and vLLM's own values, which are its labels.
// ParseFinishReason's doc says which server sends each.
var apiFinishReasons = map[string]FinishReason{
	"stop":           FinishStop,
	"end_turn":       FinishStop, // Anthropic
	"stop_sequence":  FinishStop, // Anthropic
	"tool_calls":     FinishStop, // OpenAI: the model called tools
	"function_call":  FinishStop, // OpenAI, before tool_calls
	"tool_use":       FinishStop, // Anthropic
	"pause_turn":     FinishStop, // Anthropic: a server tool paused a long turn
	"refusal":        FinishStop, // Anthropic: the model declined
	"compaction":     FinishStop, // Anthropic (beta): the turn ended in a summary of the conversation
	"content_filter": FinishStop, // OpenAI: the server cut the output

	"length":                        FinishLength,
	"max_tokens":                    FinishLength, // Anthropic
	"model_context_window_exceeded": FinishLength, // Anthropic
	"remote_decode":                 FinishLength, // llm-d-inference-sim: a P/D prefill request handed over

	"abort":           FinishAbort,
	"cancelled":       FinishAbort,
	"canceled":        FinishAbort,
	"cache_threshold": FinishAbort, // llm-d-inference-sim: refused below the cache hit threshold

	"error": FinishError,

	"repetition": FinishRepetition,
}

// ParseFinishReason returns the FinishReason vLLM counts for the finish reason
// a server returns, and whether s is one it knows. Each, with the servers that
// send it and the source read:
//
//	reason                         sent by (source)                       FinishReason
//	stop, length, abort, error,    vLLM: its labels (vllm/v1/engine/      itself
//	repetition                     __init__.py FINISH_REASON_STRINGS)
//	stop, length, tool_calls,      OpenAI (openai-go chatcompletion.go);  stop, length; the rest
//	content_filter, function_call  vLLM's API server says tool_calls      FinishStop
//	end_turn, stop_sequence,       Anthropic's stop_reason                FinishStop
//	tool_use, pause_turn,          (anthropic-sdk-go StopReason,
//	refusal, compaction            BetaStopReason)
//	max_tokens,                    Anthropic                              FinishLength
//	model_context_window_exceeded
//	stop, length                   Ollama's done_reason                   stop, length
//	tool_calls, remote_decode,     llm-d-inference-sim (pkg/common/       stop; FinishLength;
//	cache_threshold                config.go @eec055a3)                   FinishAbort
//	cancelled, canceled            other servers' spellings of abort      FinishAbort
//
// tool_calls, function_call and tool_use are stop because vLLM's engine ends
// a generation that calls tools at a stop token; content_filter, refusal,
// pause_turn and compaction because the generation ended without a limit, an
// abort or a failure.
//
// remote_decode is the sim's answer to a P/D prefill request (vLLM's
// kv_transfer_params with do_remote_decode, sent with max_tokens 1). vLLM has
// no reason of its own for handing a request over to a decode instance: its
// prefill instance returns and counts length, the one token reaching
// max_tokens (RequestStatus.FINISHED_LENGTH_CAPPED, vllm/v1/request.py
// @dba83d52; the NIXL connector hands over the KV of a request finished so,
// nixl/scheduler.py request_finished @c8fac58b).
//
// cache_threshold is the sim's answer to a request whose prompt's cache hit
// rate is below its cache_hit_threshold: refused before it ran, no token
// generated, for the router to prefill elsewhere (llm-d-router's
// pkg/sidecar/proxy/connector_shared_storage.go). vLLM has no such reason
// (RFC vllm-project/vllm#24256 is open, PR #24520 closed unmerged); of its
// five, abort is the one for a request that ended without its generation
// for neither a limit nor a failure (vLLM's NIXL connector, too, calls the
// decode side's rejection of a KV-transfer request an abort:
// nixl/scheduler.py request_finished).
//
// Any other value is FinishStop, with false.
func ParseFinishReason(s string) (FinishReason, bool) {
	r, ok := apiFinishReasons[s]
	return r, ok
}
