package prometheus

import (
	"fmt"
	"os"
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
	t.Parallel() // waits on go list, beside the other
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

// The dependency cost docs/install.md states is what go list -deps
// gives for the programs of testdata/deps: packages beyond the standard
// library and the modules they come from, at go.mod's versions.
func TestDependencyCost(t *testing.T) {
	t.Parallel() // waits on go list, beside the other
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is needed to list the dependencies: %v", err)
	}
	guide, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"promhttp", "prom", "setup"} {
		out, err := exec.Command(goCmd, "list", "-deps", "-f",
			"{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}{{end}}", "./testdata/deps/"+prog).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", prog, err)
		}
		pkgs, modules := 0, map[string]bool{}
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) == 2 {
				pkgs++
				modules[f[1]] = true
			}
		}
		for _, want := range []string{fmt.Sprintf("%d packages", pkgs), fmt.Sprintf("%d modules", len(modules))} {
			if !strings.Contains(string(guide), want) {
				t.Errorf("testdata/deps/%s links %d packages beyond the standard library from %d modules: docs/install.md says no %q",
					prog, pkgs, len(modules), want)
			}
		}
	}
}
