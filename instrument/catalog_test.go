package instrument_test

import (
	"bufio"
	"bytes"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
)

// otelName is the OpenTelemetry instrument name syntax.
var otelName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_./-]{0,254}$`)

func TestDescriptors(t *testing.T) {
	ds := instrument.Descriptors()
	if len(ds) == 0 {
		t.Fatal("no descriptors")
	}
	seen := map[string]bool{}
	for _, d := range ds {
		if !otelName.MatchString(d.Name) || strings.Contains(d.Name, ":") {
			t.Errorf("%q is not a valid OpenTelemetry instrument name", d.Name)
		}
		if seen[d.Name] {
			t.Errorf("%q is described twice", d.Name)
		}
		seen[d.Name] = true
		if strings.TrimSpace(d.Description) == "" {
			t.Errorf("%s has no description (its HELP line would be empty)", d.Name)
		}
		if d.Recorded == "" {
			t.Errorf("%s does not say when it is recorded", d.Name)
		}
		switch d.Kind {
		case instrument.Histogram:
			if len(d.Buckets) == 0 && !d.LengthBuckets {
				t.Errorf("histogram %s has neither Buckets nor LengthBuckets", d.Name)
			}
			if len(d.Buckets) > 0 && d.LengthBuckets {
				t.Errorf("histogram %s has both Buckets and LengthBuckets", d.Name)
			}
			if !slices.IsSorted(d.Buckets) || len(slices.Compact(slices.Clone(d.Buckets))) != len(d.Buckets) {
				t.Errorf("histogram %s buckets are not increasing: %v", d.Name, d.Buckets)
			}
		case instrument.Counter, instrument.Gauge:
			if len(d.Buckets) > 0 || d.LengthBuckets {
				t.Errorf("%s %s has buckets", d.Kind, d.Name)
			}
		default:
			t.Errorf("%s has unknown kind %v", d.Name, d.Kind)
		}
	}
}

// Descriptors returns copies: changing one changes neither the catalog nor
// what the next call returns.
func TestDescriptorsAreCopies(t *testing.T) {
	const changed = -123456.5 // no list has it (vllm:request_priority has negative bounds)
	first := instrument.Descriptors()
	for i := range first {
		first[i].Name = "changed"
		for j := range first[i].Buckets {
			first[i].Buckets[j] = changed
		}
		for j := range first[i].Attributes {
			first[i].Attributes[j] = "changed"
		}
	}
	for _, d := range instrument.Descriptors() {
		if d.Name == "changed" || slices.Contains(d.Buckets, changed) || slices.Contains(d.Attributes, "changed") {
			t.Fatalf("changing a returned Descriptor changed the catalog: %+v", d)
		}
	}
}

func TestLengthBuckets(t *testing.T) {
	for _, c := range []struct {
		maxModelLen int
		want        []float64
	}{
		{4096, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}},
		{1, []float64{1}},
		{2, []float64{1, 2}},
		{4, []float64{1, 2}},
		{10, []float64{1, 2, 5, 10}},
		{99, []float64{1, 2, 5, 10, 20, 50}},
		{100, []float64{1, 2, 5, 10, 20, 50, 100}},
		{0, nil},
		{-1, nil},
	} {
		if got := instrument.LengthBuckets(c.maxModelLen); !slices.Equal(got, c.want) {
			t.Errorf("LengthBuckets(%d) = %v, want %v", c.maxModelLen, got, c.want)
		}
	}
}

func TestLengthBucketsHuge(t *testing.T) {
	got := instrument.LengthBuckets(math.MaxInt64)
	// 1-2-5 for every decade 10^0 .. 10^18: 3 x 19 = 57 values; the next, 10^19,
	// does not fit in an int64 (max about 9.22e18).
	if len(got) != 57 {
		t.Fatalf("LengthBuckets(MaxInt64) has %d values, want 57: %v", len(got), got)
	}
	if got[0] != 1 || got[56] != 5e18 || !slices.IsSorted(got) {
		t.Errorf("LengthBuckets(MaxInt64) = %v, want 1 .. 5e18 increasing", got)
	}
	// Just below a decade: 10^18 - 1 stops at 5e17.
	if got := instrument.LengthBuckets(999_999_999_999_999_999); got[len(got)-1] != 5e17 || len(got) != 54 {
		t.Errorf("LengthBuckets(10^18-1) ends %v after %d values, want 5e17 after 54", got[len(got)-1], len(got))
	}
}

// goListDeps returns the packages a package depends on, itself included.
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var deps []string
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		deps = append(deps, sc.Text())
	}
	if !slices.Contains(deps, pkg) {
		t.Fatalf("go list -deps %s does not list the package itself:\n%s", pkg, out)
	}
	return deps
}

// The Recorder uses the OpenTelemetry API only (any SDK may sit behind it) and
// package stats uses no OpenTelemetry at all.
func TestDependencies(t *testing.T) {
	for _, c := range []struct{ pkg, forbidden string }{
		{"github.com/infermetrics/infermetrics/instrument", "go.opentelemetry.io/otel/sdk"},
		{"github.com/infermetrics/infermetrics/stats", "go.opentelemetry.io"},
	} {
		for _, dep := range goListDeps(t, c.pkg) {
			if strings.HasPrefix(dep, c.forbidden) {
				t.Errorf("%s depends on %s", c.pkg, dep)
			}
		}
	}
}
