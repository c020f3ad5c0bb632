package exporters

import (
	"bytes"
	"context"
	"errors"
	"log"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	collpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// captureLog sends the standard logger's output (where OpenTelemetry's
// default error handler writes) to a buffer for the test's duration.
func captureLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	var logged bytes.Buffer
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(&logged)
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	return &logged
}

// refusingReceiver is an OTLP/gRPC receiver that refuses every export with
// a non-retryable error naming it, and counts the exports it refused.
type refusingReceiver struct {
	collpb.UnimplementedMetricsServiceServer
	name  string
	addr  string
	calls atomic.Int64
}

func startRefusingReceiver(t *testing.T, name string) *refusingReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &refusingReceiver{name: name, addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collpb.RegisterMetricsServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *refusingReceiver) Export(context.Context, *collpb.ExportMetricsServiceRequest) (*collpb.ExportMetricsServiceResponse, error) {
	r.calls.Add(1)
	return nil, status.Error(codes.InvalidArgument, "refused by receiver "+r.name)
}

// Two Setups with two handlers and two failing collectors: each handler gets
// its own Setup's export errors, each once, and never the other's (before,
// WithErrorHandler chained global handlers, so each got every error). A
// third Setup without a handler reaches neither.
func TestErrorHandlerPerSetup(t *testing.T) {
	cleanEnv(t)
	t.Setenv(EnvOTLPProtocol, "grpc")
	logged := captureLog(t)

	recvs := map[string]*refusingReceiver{}
	sinks := map[string]*errorSink{}
	providers := map[string]*Provider{}
	for _, name := range []string{"A", "B", "C"} {
		recvs[name] = startRefusingReceiver(t, name)
		opts := []Option{WithOTLP(WithEndpoint(recvs[name].addr), WithInsecure(), WithInterval(20*time.Millisecond))}
		if name != "C" {
			sinks[name] = &errorSink{}
			opts = append(opts, WithErrorHandler(sinks[name].Handle))
		}
		p, err := Setup(t.Context(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		providers[name] = p
		recordGeneration(t, newRecorder(t, p), 1)
	}
	waitFor(t, "three failed exports at each handler and at C's receiver", func() bool {
		return len(sinks["A"].Get()) >= 3 && len(sinks["B"].Get()) >= 3 && recvs["C"].calls.Load() >= 3
	})
	for _, name := range []string{"A", "B", "C"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := providers[name].Shutdown(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "refused by receiver "+name) {
			t.Errorf("%s: Shutdown = %v, want the final export's error", name, err)
		}
	}
	for _, name := range []string{"A", "B"} {
		var refused, canceled int64
		for _, err := range sinks[name].Get() {
			// A periodic export in flight when Shutdown begins is canceled
			// (on a loaded machine one can be): an error of this Setup's
			// that no receiver wrote.
			if strings.Contains(err.Error(), context.Canceled.Error()) {
				canceled++
				continue
			}
			refused++
			if !strings.Contains(err.Error(), "refused by receiver "+name) {
				t.Errorf("handler %s got %q, not an error of its own Setup", name, err)
			}
			var re *routedError
			if errors.As(err, &re) {
				t.Errorf("handler %s got the internal routing wrapper: %#v", name, err)
			}
		}
		// Every refused export but the last (Shutdown's, which Shutdown
		// returns) reaches the handler exactly once: the periodic ones and
		// the flush before shutdown. A canceled export may have reached
		// the receiver before it was canceled: then it is counted there
		// and not refused here.
		if canceled > 1 {
			t.Errorf("handler %s got %d canceled exports, want at most the one in flight at Shutdown", name, canceled)
		}
		if want := recvs[name].calls.Load() - 1; refused > want || refused < want-canceled {
			t.Errorf("handler %s got %d refusals (and %d canceled exports) for %d refused exports, want %d", name, refused, canceled, want+1, want)
		}
	}
	if !strings.Contains(logged.String(), "refused by receiver C") {
		t.Errorf("C's errors were not logged by OpenTelemetry's default handler:\n%s", logged.String())
	}
}

// A handler installed with otel.SetErrorHandler before Setup keeps getting
// what no Setup claims, and not a Setup's own errors.
func TestErrorHandlerKeepsPreviousGlobalHandler(t *testing.T) {
	cleanEnv(t)
	prev := otel.GetErrorHandler()
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	var global errorSink
	otel.SetErrorHandler(otel.ErrorHandlerFunc(global.Handle))

	t.Setenv(EnvMetricsExporter, "console") // an unsupported name: a warning of this Setup
	var own errorSink
	p, err := Setup(t.Context(), WithErrorHandler(own.Handle))
	if err != nil {
		t.Fatal(err)
	}
	otel.Handle(errors.New("from elsewhere"))
	shutdown(t, p)
	if errs := own.Get(); len(errs) != 2 || !errors.Is(errs[0], ErrConfig) {
		t.Errorf("Setup's handler got %v, want the warning and the other error", errs)
	}
	if errs := global.Get(); len(errs) != 1 || errs[0].Error() != "from elsewhere" {
		t.Errorf("previous global handler got %v, want only the other error", errs)
	}
	if otel.GetErrorHandler() == otel.ErrorHandler(routing) {
		t.Error("the router is still the global handler after Shutdown")
	}
}
