package stats_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// Every count of the SimpleCPUOffloadConnector's step is checked, named by
// its path in a Scheduler, and each outcome has its own field and label.
func TestSimpleKVOffloadValidate(t *testing.T) {
	labels := map[string]bool{}
	for _, o := range stats.SaveOutcomes() {
		s := &stats.SimpleKVOffload{}
		if s.ByOutcome(o) != 0 {
			t.Fatalf("%s: not zero in a zero step", o)
		}
		labels[o.String()] = true
	}
	if len(labels) != 7 || !labels["stored"] || !labels["skipped_in_flight"] || stats.SaveOutcome(7).String() != "unknown" {
		t.Errorf("outcome labels %v", labels)
	}
	for field, s := range map[string]stats.SimpleKVOffload{
		"Stored": {Stored: -1}, "DroppedCPUFull": {DroppedCPUFull: -1}, "DroppedRequestGone": {DroppedRequestGone: -1},
		"DroppedNullBlock": {DroppedNullBlock: -1}, "DroppedNotHashed": {DroppedNotHashed: -1},
		"SkippedAlreadyCached": {SkippedAlreadyCached: -1}, "SkippedInFlight": {SkippedInFlight: -1},
		"LoadBlocksIssued": {LoadBlocksIssued: -1}, "LoadBlocksCompleted": {LoadBlocksCompleted: -1},
		"UsedBlocks": {UsedBlocks: -1}, "PendingStoreBlocks": {PendingStoreBlocks: -1},
	} {
		err := (&stats.Scheduler{SimpleKVOffload: &s}).Validate()
		if !errors.Is(err, stats.ErrNegative) || !strings.Contains(err.Error(), "SimpleKVOffload."+field) {
			t.Errorf("%s = -1: %v, want ErrNegative naming SimpleKVOffload.%s", field, err, field)
		}
	}
	if err := (&stats.Scheduler{KVOffload: &stats.KVOffload{CPU: &stats.KVOffloadCPU{StoresSkipped: -2}}}).Validate(); !errors.Is(err, stats.ErrNegative) ||
		!strings.Contains(err.Error(), "KVOffload.CPU.StoresSkipped") {
		t.Errorf("StoresSkipped = -2: %v, want ErrNegative", err)
	}
	if err := (stats.SimpleKVOffloadConfig{Backend: "cpu", CapacityBlocks: 10}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	for _, c := range []stats.SimpleKVOffloadConfig{{Backend: "CPU"}, {Backend: ""}, {Backend: "disk", CapacityBlocks: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", c)
		}
	}
}

// The server operations have vLLM's label values and refuse unknown ones.
func TestServerOperationLabels(t *testing.T) {
	var sleep, weight []string
	for _, o := range stats.SleepOperations() {
		sleep = append(sleep, o.String())
		if err := o.Validate(); err != nil {
			t.Error(err)
		}
	}
	for _, o := range stats.WeightOperations() {
		weight = append(weight, o.String())
		if err := o.Validate(); err != nil {
			t.Error(err)
		}
	}
	if got := strings.Join(sleep, " "); got != "sleep release_kv_cache_memory wake" {
		t.Errorf("sleep operations %q", got)
	}
	if got := strings.Join(weight, " "); got != "init start start_draft update finish" {
		t.Errorf("weight operations %q", got)
	}
	if err := stats.SleepOperation(3).Validate(); !errors.Is(err, stats.ErrUnknownServerOperation) {
		t.Errorf("SleepOperation(3): %v", err)
	}
	if err := stats.WeightOperation(200).Validate(); !errors.Is(err, stats.ErrUnknownServerOperation) {
		t.Errorf("WeightOperation(200): %v", err)
	}
}
