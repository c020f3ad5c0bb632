// Package testlog sends what the library's tests provoke on a global
// logger to the test's log (t.Log), so that a passing test prints nothing
// on stderr, where a reader of a green run takes it for an error
// (scripts/test.sh fails such a run: internal/testoutput). It is test
// support: no program uses it.
package testlog

import (
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
)

// OTelErrors sends what otel.Handle gets (the refusals a Recorder reports
// without WithErrorHandler, those of a nil Engine, an exporter's errors)
// to t.Log until the test ends, then restores the handler before; what
// arrives after the test ended is dropped.
func OTelErrors(t testing.TB) {
	t.Helper()
	prev := otel.GetErrorHandler()
	var mu sync.Mutex
	ended := false
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			t.Log("otel.Handle: ", err)
		}
	}))
	t.Cleanup(func() {
		otel.SetErrorHandler(prev)
		mu.Lock()
		ended = true
		mu.Unlock()
	})
}

// Writer is an io.Writer to t.Log, for a test's log.Logger (the ErrorLog
// of its http.Server): one t.Log a write.
type Writer struct{ T testing.TB }

func (w Writer) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
