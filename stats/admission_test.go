package stats_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// The admission rejection reasons are named after vLLM's two limits, in the
// order vLLM checks them, and unknown ones are refused.
func TestAdmissionReasonLabels(t *testing.T) {
	var labels []string
	for _, r := range stats.AdmissionReasons() {
		labels = append(labels, r.String())
		if err := r.Validate(); err != nil {
			t.Error(err)
		}
	}
	if got := strings.Join(labels, " "); got != "max_num_queued_reqs max_num_queued_tokens" {
		t.Errorf("admission reasons %q", got)
	}
	if err := stats.AdmissionReason(2).Validate(); !errors.Is(err, stats.ErrUnknownAdmissionReason) {
		t.Errorf("AdmissionReason(2): %v", err)
	}
	if got := stats.AdmissionReason(2).String(); got != "unknown" {
		t.Errorf("AdmissionReason(2) = %q", got)
	}
}
