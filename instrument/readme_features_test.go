package instrument

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeFeatureOptions keeps README.md's feature table true: a step field
// listed beside an option is one whose data the Recorder reports when that
// option is missing (featureOptions), and one listed as always present
// needs no option.
func TestReadmeFeatureOptions(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "| vLLM feature | Recorder option | stats field per step |\n|---|---|---|\n")
	if !ok {
		t.Fatal("README.md has no feature table")
	}
	field := regexp.MustCompile("`((?:Scheduler|Iteration)\\.[A-Za-z.]+)`")
	checked := 0
	for row := range strings.Lines(table) {
		if !strings.HasPrefix(row, "|") {
			break
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("README feature table row %q has %d cells, want 3", row, len(cells))
		}
		options := cells[1]
		for _, m := range field.FindAllStringSubmatch(cells[2], -1) {
			checked++
			option := optionOf(m[1])
			switch {
			case option == "" && !strings.Contains(options, "always present"):
				t.Errorf("README pairs %s with %s, but the Recorder needs no option for it", m[1], strings.TrimSpace(options))
			case option != "" && !strings.Contains(options, option):
				t.Errorf("README pairs %s with %s, but its option is %s", m[1], strings.TrimSpace(options), option)
			}
		}
	}
	if checked == 0 {
		t.Fatal("README's feature table names no Scheduler or Iteration field")
	}
}

// optionOf returns the option featureOptions names for a step field, "" for
// a field it does not name.
func optionOf(field string) string {
	for _, fo := range featureOptions {
		if fo[0] == field {
			return fo[1]
		}
	}
	return ""
}
