// Package testlog sends what the library's tests provoke on a global
// logger to the test's log (t.Log), so that a passing test prints nothing
// on stderr, where a reader of a green run takes it for an error
// (scripts/test.sh fails such a run: internal/testoutput). It is test
// support: no program uses it.
package testlog

import (
	"log"
	"strings"
	"sync"
	"testing"
)

// TailMark starts the t.Log message under which a test shows the last
// lines a process it ran printed (the end-to-end harness, on a failure);
// internal/testoutput repeats a failed test's own last lines after such
// messages, so that the end of a run's output, all a CI report may show,
// keeps the failure's reason.
const TailMark = "---- tail of "

// StdLogger sends what the standard logger gets to t.Log until the test
// ends, then restores its output and flags. A write that took the test's
// writer as the test ended is dropped; one that comes later goes to the
// restored output (stderr), so a test waits for the goroutines it started
// that may log (a server's handlers, an exporter) before it ends. OpenTelemetry's default error handler writes there
// (otel.Handle: the refusals a Recorder reports without WithErrorHandler,
// those of a nil Engine, an exporter's errors). It leaves otel's global
// handler alone: the first otel.SetErrorHandler of a process makes the
// default handler delegate to the handler set, for good.
func StdLogger(t testing.TB) {
	t.Helper()
	out, flags := log.Writer(), log.Flags()
	w := &ending{Writer: Writer{T: t}}
	log.SetOutput(w)
	log.SetFlags(0)
	t.Cleanup(func() {
		log.SetOutput(out)
		log.SetFlags(flags)
		w.mu.Lock()
		w.ended = true
		w.mu.Unlock()
	})
}

// ending is a Writer that drops what comes after its test ended.
type ending struct {
	Writer
	mu    sync.Mutex
	ended bool
}

func (w *ending) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return len(p), nil
	}
	return w.Writer.Write(p)
}

// Writer is an io.Writer to t.Log, for a test's log.Logger (the ErrorLog
// of its http.Server): one t.Log a write.
type Writer struct{ T testing.TB }

func (w Writer) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
