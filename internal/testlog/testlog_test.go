package testlog

import (
	"errors"
	"testing"

	"go.opentelemetry.io/otel"
)

// recorder is a testing.TB that keeps what is logged on it.
type recorder struct {
	testing.TB
	logged []string
}

func (r *recorder) Log(args ...any) {
	for _, a := range args {
		if err, ok := a.(error); ok {
			r.logged = append(r.logged, err.Error())
		}
	}
}

// What otel.Handle gets reaches the test's log, and the handler before is
// back when the test ends.
func TestOTelErrors(t *testing.T) {
	var got []error
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { got = append(got, err) }))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	r := &recorder{TB: t}
	t.Run("test", func(t *testing.T) {
		r.TB = t
		OTelErrors(r)
		otel.Handle(errors.New("refused"))
	})
	if len(r.logged) != 1 || r.logged[0] != "refused" {
		t.Errorf("logged %q, want the error", r.logged)
	}
	otel.Handle(errors.New("after"))
	if len(got) != 1 || got[0].Error() != "after" {
		t.Errorf("the handler before got %v, want the error after the test", got)
	}
}
