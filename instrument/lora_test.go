package instrument_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
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

// loraAt is a chosen time of a LoRA state, i seconds after t0.
func loraAt(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

// unixOf is vllm:lora_requests_info's value for a time.
func unixOf(at time.Time) float64 { return float64(at.UnixNano()) / 1e9 }

// setLoRAAt sets a state at a chosen time, failing the test on a refusal.
func setLoRAAt(t *testing.T, e *instrument.Engine, l stats.LoRA, at time.Time) {
	t.Helper()
	if err := instrument.SetLoRAAtErr(e, &l, at); err != nil {
		t.Fatalf("setLoRAAt(%+v, %v): %v", l, at, err)
	}
}

// SetLoRA sets the state without a Scheduler, names in any order, at the
// time of the call, leaving the caller's lists as they were.
func TestSetLoRA(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	running, waiting := []string{"sql", "chat"}, []string{"math"}
	before := time.Now()
	e.SetLoRA(stats.LoRA{MaxLoRA: 4, Running: running, Waiting: waiting})
	after := time.Now()
	got := loraSeries(h.collect())
	p, ok := got[loraKey("4", "math", "chat,sql")]
	if len(got) != 1 || !ok {
		t.Fatalf("after SetLoRA: %v, want the state with sorted names", got)
	}
	if p.kind != "gauge" || p.value < unixOf(before) || p.value > unixOf(after) {
		t.Errorf("value %v, want the Unix time of the call (%v to %v)", p, unixOf(before), unixOf(after))
	}
	if running[0] != "sql" || running[1] != "chat" {
		t.Errorf("SetLoRA reordered the caller's list: %v", running)
	}
	e.SetLoRA(stats.LoRA{MaxLoRA: 4, Waiting: []string{"chat"}})
	got = loraSeries(h.collect())
	if _, ok := got[loraKey("4", "chat", "")]; len(got) != 1 || !ok {
		t.Errorf("after a second SetLoRA: %v, want only the new state", got)
	}
}

// SetLoRA refuses an invalid state whole, by stats.LoRA.Validate: the state
// stays, and the refusal is counted (kind scheduler) and reported with the
// method.
func TestSetLoRARefused(t *testing.T) {
	errs := &testutil.Errors{}
	r, rec := newReaderRecorder(t, errs.Option())
	e, _ := rec.Engine(0)
	e.SetLoRA(stats.LoRA{MaxLoRA: 2, Running: []string{"sql"}})
	for _, c := range []struct {
		l       stats.LoRA
		mention string
	}{
		{stats.LoRA{MaxLoRA: -1}, "MaxLoRA"},
		{stats.LoRA{Running: []string{"a", "a"}}, "Running[1]"},
		{stats.LoRA{Waiting: []string{"a,b"}}, "Waiting[0]"},
		{stats.LoRA{MaxLoRA: 1, Running: []string{"a", "b"}}, "MaxLoRA 1"},
	} {
		e.SetLoRA(c.l)
		got := errs.Take()
		if len(got) != 1 || !strings.Contains(got[0].Error(), "SetLoRA") || !strings.Contains(got[0].Error(), c.mention) {
			t.Errorf("SetLoRA(%+v) reported %v, want one report naming SetLoRA and %q", c.l, got, c.mention)
		}
	}
	if got := r.Value(invalidFamily, withLabels("kind", "scheduler")...); got != 4 {
		t.Errorf("invalid scheduler events %v, want 4", got)
	}
	if got := r.Value(loraFamily, instrument.KeyMaxLoRA, "2", instrument.KeyWaitingLoRA, "", instrument.KeyRunningLoRA, "sql"); got == 0 {
		t.Error("a refused state replaced the one set before")
	}
	var none *instrument.Engine
	none.SetLoRA(stats.LoRA{}) // reported to otel.Handle, no panic
}

// Setting the state the engine has allocates nothing, through SetLoRA and
// through RecordSchedulerCounts.
func TestSetLoRAUnchangedDoesNotAllocate(t *testing.T) {
	current := stats.LoRA{MaxLoRA: 4, Running: []string{"sql", "chat"}, Waiting: []string{"math"}}
	e := newHarness(t).engine(0)
	e.SetLoRA(current)
	if n := testing.AllocsPerRun(1000, func() { e.SetLoRA(current) }); n != 0 {
		t.Errorf("SetLoRA of the current state: %v allocations, want 0", n)
	}
	s := stats.Scheduler{LoRA: &current}
	if n := testing.AllocsPerRun(1000, func() { e.RecordSchedulerCounts(t.Context(), &s) }); n != 0 {
		t.Errorf("RecordSchedulerCounts of the current state: %v allocations, want 0", n)
	}
}

// setLoRAAt values the state at the chosen time exactly and returns its
// refusal instead of reporting it.
func TestSetLoRAAt(t *testing.T) {
	h := newHarness(t)
	e := h.engine(0)
	setLoRAAt(t, e, stats.LoRA{MaxLoRA: 2, Running: []string{"b", "a"}}, loraAt(7))
	if got := loraSeries(h.collect()); len(got) != 1 || got[loraKey("2", "", "a,b")].value != unixOf(loraAt(7)) {
		t.Errorf("after setLoRAAt: %v, want the state valued at %v", got, unixOf(loraAt(7)))
	}
	for _, c := range []struct {
		l    *stats.LoRA
		at   time.Time
		want error
	}{
		{nil, loraAt(8), instrument.ErrNilStats},
		{&stats.LoRA{Running: []string{""}}, loraAt(8), stats.ErrInvalidLabel},
		{&stats.LoRA{}, time.Time{}, stats.ErrOutOfRange},
		{&stats.LoRA{}, time.Unix(-1, 0), stats.ErrOutOfRange},
		{&stats.LoRA{}, time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC), stats.ErrOutOfRange},
	} {
		if err := instrument.SetLoRAAtErr(e, c.l, c.at); !errors.Is(err, c.want) {
			t.Errorf("setLoRAAt(%+v, %v) = %v, want %v", c.l, c.at, err, c.want)
		}
	}
	if err := h.refused(); err != nil {
		t.Errorf("setLoRAAt reported its refusals: %v", err)
	}
	if got := loraSeries(h.collect()); len(got) != 1 || got[loraKey("2", "", "a,b")].value != unixOf(loraAt(7)) {
		t.Errorf("after refusals: %v, want the state set before", got)
	}
	if err := instrument.SetLoRAAtErr(nil, &stats.LoRA{}, loraAt(1)); !errors.Is(err, instrument.ErrUnknownEngine) {
		t.Errorf("setLoRAAt on a nil Engine = %v, want ErrUnknownEngine", err)
	}
}
