package testutil_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/testutil"
)

// failures is a testing.TB that records Errorf instead of failing.
type failures struct {
	testing.TB
	msgs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// StrictErrors fails the test on the first refused input, with its error;
// valid input fails nothing.
func TestStrictErrors(t *testing.T) {
	r := testutil.New(t)
	f := &failures{TB: t}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName("m"),
		testutil.StrictErrors(f))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := rec.Engine(0)
	e.RecordScheduler(t.Context(), &stats.Scheduler{Running: 1})
	if len(f.msgs) != 0 {
		t.Fatalf("valid input failed the test: %v", f.msgs)
	}
	e.RecordScheduler(t.Context(), &stats.Scheduler{Running: -1})
	if len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "Running = -1") {
		t.Errorf("failures %q, want one naming Running = -1", f.msgs)
	}
}

// Errors collects every refusal, oldest first, and Take empties it.
func TestErrorsCollects(t *testing.T) {
	r := testutil.New(t)
	errs := &testutil.Errors{}
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()), instrument.WithModelName("m"), errs.Option())
	if err != nil {
		t.Fatal(err)
	}
	e, _ := rec.Engine(0)
	e.RecordScheduler(t.Context(), &stats.Scheduler{Running: -1})
	e.RecordScheduler(t.Context(), &stats.Scheduler{WaitingCapacity: -2})
	got := errs.Take()
	if len(got) != 2 || !strings.Contains(got[0].Error(), "Running") || !strings.Contains(got[1].Error(), "WaitingCapacity") {
		t.Errorf("collected %v, want the Running then the WaitingCapacity refusal", got)
	}
	if again := errs.Take(); len(again) != 0 {
		t.Errorf("Take after Take = %v, want none", again)
	}
}
