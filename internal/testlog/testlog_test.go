package testlog

import (
	"bytes"
	"errors"
	"log"
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
		r.logged = append(r.logged, a.(string))
	}
}

// What otel.Handle's default handler logs during a test reaches the test's
// log; after it, the standard logger's output and flags are back.
func TestStdLogger(t *testing.T) {
	var logged bytes.Buffer
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(&logged)
	log.SetFlags(log.Lmicroseconds)
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	r := &recorder{}
	t.Run("test", func(t *testing.T) {
		r.TB = t
		StdLogger(r)
		otel.Handle(errors.New("refused"))
	})
	if len(r.logged) != 1 || r.logged[0] != "refused" {
		t.Errorf("the test logged %q, want the error", r.logged)
	}
	if log.Writer() != &logged || log.Flags() != log.Lmicroseconds {
		t.Error("the standard logger's output or flags are not back")
	}
	if logged.Len() != 0 {
		t.Errorf("the standard logger's output got %q during the test", logged.String())
	}
}
