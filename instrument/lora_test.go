package instrument_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

const loraFamily = "vllm:lora_requests_info"

// loraSeries returns the LoRA info series of a snapshot.
func loraSeries(s snapshot) map[string]point {
	got := map[string]point{}
	for k, p := range s {
		if strings.HasPrefix(k, loraFamily+"{") {
			got[k] = p
		}
	}
	return got
}

func recordLoRA(t *testing.T, e *instrument.Engine, l stats.LoRA) {
	t.Helper()
	e.RecordScheduler(context.Background(), &stats.Scheduler{LoRA: &l})
}

func loraKey(maxLoRA, waiting, running string) string {
	return series(loraFamily, instrument.KeyMaxLoRA, maxLoRA, instrument.KeyWaitingLoRA, waiting, instrument.KeyRunningLoRA, running)
}

// vllm:lora_requests_info reports each engine's current adapter state only:
// a state no longer current leaves the next collection (the provider is
// cumulative), and adapter names are sorted, so the same adapters in another
// order are the same state.
func TestLoRACurrentStateOnly(t *testing.T) {
	h := newHarness(t, instrument.WithEngines(0, 1))
	e0, e1 := h.engine(0), h.engine(1)
	before := time.Now()
	recordLoRA(t, e0, stats.LoRA{MaxLoRA: 4, Running: []string{"sql", "chat"}, Waiting: []string{"math"}})
	got := loraSeries(h.collect())
	p, ok := got[loraKey("4", "math", "chat,sql")]
	if len(got) != 1 || !ok {
		t.Fatalf("after one state: %v, want the state with sorted names", got)
	}
	if now := float64(time.Now().UnixNano()) / 1e9; p.kind != "gauge" || p.value < float64(before.Unix()) || p.value > now {
		t.Errorf("value %v, want the Unix time of the update", p)
	}

	// Another state replaces it.
	recordLoRA(t, e0, stats.LoRA{MaxLoRA: 4, Running: []string{"math"}})
	got = loraSeries(h.collect())
	if _, ok := got[loraKey("4", "", "math")]; len(got) != 1 || !ok {
		t.Errorf("after a new state: %v, want only the new state", got)
	}

	// The same adapters in another order are the same state; each engine
	// reports its own.
	recordLoRA(t, e0, stats.LoRA{MaxLoRA: 4, Running: []string{"b", "a"}})
	recordLoRA(t, e1, stats.LoRA{MaxLoRA: 4, Running: []string{"a", "b"}})
	got = loraSeries(h.collect())
	if _, ok := got[loraKey("4", "", "a,b")]; len(got) != 1 || !ok {
		t.Errorf("two engines, same adapters in two orders: %v, want one series", got)
	}
	recordLoRA(t, e1, stats.LoRA{MaxLoRA: 4, Running: []string{"c"}})
	got = loraSeries(h.collect())
	_, ok0 := got[loraKey("4", "", "a,b")]
	_, ok1 := got[loraKey("4", "", "c")]
	if len(got) != 2 || !ok0 || !ok1 {
		t.Errorf("two engines in two states: %v, want both", got)
	}
}

// 3,000 state changes, past the SDK's cardinality limit of 2,000, leave
// exactly one series, with the newest labels (not the overflow series).
func TestLoRAManyStates(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	const changes = 3000
	for i := range changes {
		recordLoRA(t, e, stats.LoRA{MaxLoRA: 8, Running: []string{fmt.Sprintf("adapter-%04d", i)}})
	}
	got := loraSeries(h.collect())
	if _, ok := got[loraKey("8", "", fmt.Sprintf("adapter-%04d", changes-1))]; len(got) != 1 || !ok {
		t.Errorf("after %d states: %d series, want the newest only", changes, len(got))
	}
}
