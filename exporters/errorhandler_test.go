package exporters

import (
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
)

// A WithErrorHandler function replaces OpenTelemetry's default logging even
// when another Setup with a handler came and went before (OpenTelemetry's
// default handler then delegates to that detached handler); once no Setup
// with a handler is live, errors are logged again.
func TestErrorHandlerAfterAnotherShutdown(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvMetricsExporter, "none")
	logged := captureLog(t)

	var first, second errorSink
	p1, err := Setup(t.Context(), WithErrorHandler(first.Handle))
	if err != nil {
		t.Fatal(err)
	}
	shutdown(t, p1)
	p2, err := Setup(t.Context(), WithErrorHandler(second.Handle))
	if err != nil {
		t.Fatal(err)
	}
	otel.Handle(errors.New("while the second handler is live"))
	if len(first.Get()) != 0 || len(second.Get()) != 1 || logged.Len() != 0 {
		t.Errorf("first handler %v, second %v, logged %q: want only the second handler called", first.Get(), second.Get(), logged.String())
	}
	shutdown(t, p2)
	otel.Handle(errors.New("with no handler live"))
	if len(second.Get()) != 1 || !strings.Contains(logged.String(), "with no handler live") {
		t.Errorf("after both Shutdowns: second handler %v, logged %q: want the error logged only", second.Get(), logged.String())
	}
}
