package stats

// apiFinishReasons maps the finish reasons servers return to vLLM's: OpenAI's
// finish_reason, Anthropic's stop_reason and Ollama's done_reason, and
// vLLM's own values, which are its labels.
var apiFinishReasons = map[string]FinishReason{
	"stop":           FinishStop,
	"end_turn":       FinishStop, // Anthropic
	"stop_sequence":  FinishStop, // Anthropic
	"tool_calls":     FinishStop, // OpenAI: the model called tools
	"function_call":  FinishStop, // OpenAI, before tool_calls
	"tool_use":       FinishStop, // Anthropic
	"pause_turn":     FinishStop, // Anthropic: a server tool paused a long turn
	"refusal":        FinishStop, // Anthropic: the model declined
	"content_filter": FinishStop, // OpenAI: the server cut the output

	"length":                        FinishLength,
	"max_tokens":                    FinishLength, // Anthropic
	"model_context_window_exceeded": FinishLength, // Anthropic

	"abort":     FinishAbort,
	"cancelled": FinishAbort,
	"canceled":  FinishAbort,

	"error": FinishError,

	"repetition": FinishRepetition,
}

// ParseFinishReason returns the FinishReason vLLM counts for the finish reason
// an OpenAI-style server returns, and whether s is one it knows:
//
//	stop, end_turn, stop_sequence                  FinishStop
//	tool_calls, function_call, tool_use            FinishStop: vLLM's engine ends the
//	                                               generation at a stop token; its API
//	                                               server reports tool_calls
//	content_filter, refusal, pause_turn            FinishStop: the generation ended
//	                                               without a limit, an abort or a failure
//	length, max_tokens,
//	model_context_window_exceeded                  FinishLength
//	abort, cancelled, canceled                     FinishAbort
//	error                                          FinishError
//	repetition                                     FinishRepetition
//
// Any other value is FinishStop, with false. A P/D prefill request (vLLM's
// kv_transfer_params with do_remote_decode, sent with max_tokens 1) returns
// length, and vLLM's prefill instance counts it so: there is no reason of its
// own for handing a request over to a decode instance.
func ParseFinishReason(s string) (FinishReason, bool) {
	r, ok := apiFinishReasons[s]
	return r, ok
}
