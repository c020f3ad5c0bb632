package stats_test

import (
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

func TestParseFinishReason(t *testing.T) {
	tests := []struct {
		s    string
		want stats.FinishReason
		ok   bool
	}{
		{"tool_calls", stats.FinishStop, true},
		{"function_call", stats.FinishStop, true},
		{"content_filter", stats.FinishStop, true},
		{"end_turn", stats.FinishStop, true},
		{"tool_use", stats.FinishStop, true},
		{"stop_sequence", stats.FinishStop, true},
		{"refusal", stats.FinishStop, true},
		{"pause_turn", stats.FinishStop, true},
		{"max_tokens", stats.FinishLength, true},
		{"model_context_window_exceeded", stats.FinishLength, true},
		{"cancelled", stats.FinishAbort, true},
		{"canceled", stats.FinishAbort, true},
		{"compaction", stats.FinishStop, true},
		// llm-d-inference-sim's (pkg/common/config.go): a P/D prefill
		// request handed over is length, as vLLM's prefill instance counts
		// it; a request refused below its cache hit threshold is abort.
		{"remote_decode", stats.FinishLength, true},
		{"cache_threshold", stats.FinishAbort, true},
		{"load", stats.FinishStop, false},
		{"", stats.FinishStop, false},
		{"STOP", stats.FinishStop, false},
	}
	for _, tt := range tests {
		if got, ok := stats.ParseFinishReason(tt.s); got != tt.want || ok != tt.ok {
			t.Errorf("ParseFinishReason(%q) = %v, %v; want %v, %v", tt.s, got, ok, tt.want, tt.ok)
		}
	}
	// vLLM's own values are its labels.
	for _, r := range stats.FinishReasons() {
		if got, ok := stats.ParseFinishReason(r.String()); got != r || !ok {
			t.Errorf("ParseFinishReason(%q) = %v, %v; want %v, true", r.String(), got, ok, r)
		}
	}
}
