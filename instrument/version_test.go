package instrument_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
)

// TestVersionIsNewestRelease keeps instrument.Version, the instrumentation
// version every export carries, equal to the newest release CHANGELOG.md
// describes ("## [X.Y.Z] - YYYY-MM-DD"), so a release cannot ship with the
// previous number.
func TestVersionIsNewestRelease(t *testing.T) {
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	release := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$`).FindSubmatch(changelog)
	if release == nil {
		t.Fatal("CHANGELOG.md has no release section")
	}
	if got, want := instrument.Version, string(release[1]); got != want {
		t.Errorf("instrument.Version = %q, the newest release in CHANGELOG.md is %q", got, want)
	}
}
