package prometheus

import (
	"os/exec"
	"strings"
	"testing"
)

// otlpPackages are the import path prefixes of what only the OTLP reader
// needs: the exporters, their protobuf messages and gRPC.
var otlpPackages = []string{
	"go.opentelemetry.io/otel/exporters/otlp/",
	"go.opentelemetry.io/proto/otlp/",
	"google.golang.org/grpc",
}

// A program that only serves a scrape pays only for it: this package (and
// so NewProvider, with the resource and provider set-up it shares with
// exporters.Setup), and example/minimal built on it, link no OTLP exporter
// and no gRPC.
func TestNoOTLPDependency(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is needed to list the dependencies: %v", err)
	}
	for _, pkg := range []string{".", "../../example/minimal"} {
		out, err := exec.Command(goCmd, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if !hasPrefix(deps, "go.opentelemetry.io/otel/exporters/prometheus") {
			t.Fatalf("go list -deps %s lists no Prometheus exporter: %q", pkg, deps)
		}
		if pkg == "." && !hasPrefix(deps, "github.com/infermetrics/infermetrics/exporters/internal/sdksetup") {
			t.Fatalf("go list -deps %s lists not the set-up NewProvider shares with exporters.Setup: %q", pkg, deps)
		}
		for _, d := range deps {
			if hasPrefix([]string{d}, otlpPackages...) {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}

// hasPrefix reports whether one of paths starts with one of prefixes.
func hasPrefix(paths []string, prefixes ...string) bool {
	for _, p := range paths {
		for _, prefix := range prefixes {
			if strings.HasPrefix(p, prefix) {
				return true
			}
		}
	}
	return false
}
