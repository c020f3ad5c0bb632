package testutil

import (
	"sync"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
)

// StrictErrors returns a Recorder option that fails the test (tb.Errorf) on
// every input the Recorder refuses, with the refusal's error, instead of
// handing it to otel.Handle: give it to NewRecorder in the tests of an
// engine's metrics code.
//
//	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(r.Provider()),
//		instrument.WithModelName("m"), testutil.StrictErrors(t))
func StrictErrors(tb testing.TB) instrument.Option {
	return instrument.WithErrorHandler(func(err error) {
		tb.Errorf("infermetrics refused input: %v", err)
	})
}

// Errors collects the errors of the input a Recorder refuses, for a test
// that provokes refusals and checks them: give Option() to NewRecorder.
type Errors struct {
	mu   sync.Mutex
	errs []error
}

// Option returns the Recorder option that collects into e.
func (e *Errors) Option() instrument.Option { return instrument.WithErrorHandler(e.Add) }

// Add collects err: e.Add is an error handler for other components too
// (openaihttp.WithErrorHandler).
func (e *Errors) Add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, err)
}

// Take returns the errors collected since the last Take, oldest first.
func (e *Errors) Take() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	errs := e.errs
	e.errs = nil
	return errs
}
