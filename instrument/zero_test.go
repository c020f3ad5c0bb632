package instrument_test

import (
	"context"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/infermetrics/infermetrics/instrument"
)

// Every exported method of a nil or zero Engine or Recorder returns (an
// error, or a zero value) and never panics; the docs promise it.
func TestZeroValuesDoNotPanic(t *testing.T) {
	// A nil or zero Engine reports to otel.Handle: keep it off stderr.
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	ctx := reflect.ValueOf(context.Background())
	ctxType := reflect.TypeFor[context.Context]()
	for name, v := range map[string]any{
		"nil Engine":    (*instrument.Engine)(nil),
		"zero Engine":   &instrument.Engine{},
		"nil Recorder":  (*instrument.Recorder)(nil),
		"zero Recorder": &instrument.Recorder{},
	} {
		rv := reflect.ValueOf(v)
		if rv.NumMethod() == 0 {
			t.Fatalf("%s: no methods", name)
		}
		for i := range rv.NumMethod() {
			m, mt := rv.Method(i), rv.Type().Method(i)
			args := make([]reflect.Value, m.Type().NumIn())
			for j := range args {
				if in := m.Type().In(j); in == ctxType {
					args[j] = ctx
				} else {
					args[j] = reflect.Zero(in)
				}
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s.%s panics: %v", name, mt.Name, p)
					}
				}()
				m.Call(args)
			}()
		}
	}
}
