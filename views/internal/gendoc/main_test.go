package main

import (
	"bytes"
	"os"
	"testing"
)

// docs/metrics.md must be what the code generates: run `go generate ./...`
// after changing an instrument or a view.
func TestMetricsDocInSync(t *testing.T) {
	onDisk, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, render()) {
		t.Error("docs/metrics.md drifted from the code; run `go generate ./...`")
	}
}
