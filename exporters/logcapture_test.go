package exporters

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/stdr"
	"go.opentelemetry.io/otel"
)

// logSink holds what a test captured from the standard logger (where
// OpenTelemetry's default error handler writes) or from OpenTelemetry's
// internal logger, so that a passing test prints nothing and asserts on
// the messages it provoked instead.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// expect fails the test unless the captured text contains each of want.
func (s *logSink) expect(t *testing.T, want ...string) {
	t.Helper()
	got := s.String()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("logged %q, want it to contain %q", got, w)
		}
	}
}

// captureStdLog sends the standard logger's output to a sink until the
// test ends.
func captureStdLog(t *testing.T) *logSink {
	t.Helper()
	s := &logSink{}
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(s)
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	return s
}

// captureOTelLog sends OpenTelemetry's internal log (otel.SetLogger) to a
// sink until the test ends, then restores a logger like its default one.
func captureOTelLog(t *testing.T) *logSink {
	t.Helper()
	s := &logSink{}
	otel.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(s, prefix, args) }, funcr.Options{}))
	t.Cleanup(func() { otel.SetLogger(defaultOTelLogger()) })
	return s
}

// defaultOTelLogger is the logger OpenTelemetry starts with.
func defaultOTelLogger() logr.Logger {
	return stdr.New(log.New(os.Stderr, "", log.LstdFlags|log.Lshortfile))
}
