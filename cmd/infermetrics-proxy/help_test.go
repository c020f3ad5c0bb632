package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// -h names the paths whose requests are recorded, openaihttp's list
// (openaihttp.RecordedPaths), and no other endpoint.
func TestHelpListsRecordedPaths(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &out, nil); code != 0 {
		t.Fatalf("-h exit %d", code)
	}
	intro, _, _ := strings.Cut(out.String(), "Usage:")
	named := regexp.MustCompile(`(?:^|[\s(])(/[a-z0-9/_]+)`).FindAllStringSubmatch(intro, -1)
	var got []string
	for _, m := range named {
		if p := strings.TrimSuffix(m[1], "/"); p != "/metrics" && p != "/health" {
			got = append(got, p)
		}
	}
	if want := openaihttp.RecordedPaths(); !slices.Equal(got, want) {
		t.Errorf("-h names %q, openaihttp records %q:\n%s", got, want, intro)
	}
	for _, line := range strings.Split(intro, "\n") {
		if len(line) > 80 {
			t.Errorf("-h line of %d characters: %q", len(line), line)
		}
	}
}
