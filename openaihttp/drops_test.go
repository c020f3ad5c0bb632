package openaihttp

import "testing"

// Trace.once: a drop the handler sees and one a leg of its trace saw alike
// are one response's, reported once whichever side sees it first (a
// router may end its legs after its handler); the drops of one side (a
// P/D router's prefill and decode legs, the documents of a stream) are
// each reported, and so is every drop on a nil Trace (a transport used
// without a handler).
func TestTraceOnce(t *testing.T) {
	leg := drop{prompt: 10, generation: 213, cached: 161}
	handler := leg
	handler.handler = true
	for _, tc := range []struct {
		name string
		seen []drop
		want []bool
	}{
		{"leg, then the handler", []drop{leg, handler}, []bool{true, false}},
		{"the handler, then the leg", []drop{handler, leg}, []bool{true, false}},
		{"two legs alike, then the handler", []drop{leg, leg, handler, handler, handler}, []bool{true, true, false, false, true}},
		{"another response's", []drop{leg, {handler: true, prompt: 10, generation: 3, cached: 161}}, []bool{true, true}},
		{"scanner drops", []drop{{bits: dropUsage}, {handler: true, bits: dropN}, {handler: true, bits: dropUsage}}, []bool{true, true, false}},
	} {
		var tr Trace
		for i, d := range tc.seen {
			if got := tr.once(d); got != tc.want[i] {
				t.Errorf("%s: sighting %d reported %v, want %v", tc.name, i, got, tc.want[i])
			}
		}
	}
	var none *Trace
	if !none.once(handler) || !none.once(leg) || !none.once(handler) {
		t.Error("a nil Trace left a drop unreported")
	}
	var full Trace
	for range MaxLegs + 1 {
		full.once(leg)
	}
	if len(full.drops) != MaxLegs {
		t.Errorf("%d drops kept, want at most %d", len(full.drops), MaxLegs)
	}
}
