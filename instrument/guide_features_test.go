package instrument

import (
	"regexp"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/internal/mdtable"
)

// TestEnginesGuideFeatureOptions keeps the feature table of docs/engines.md
// true: a step field listed beside an option is one whose data the Recorder
// reports when that option is missing (featureOptions), and one listed as
// always present needs no option.
func TestEnginesGuideFeatureOptions(t *testing.T) {
	rows, err := mdtable.Rows("../docs/engines.md", "| vLLM feature | Recorder option | stats field per step |")
	if err != nil {
		t.Fatal(err)
	}
	field := regexp.MustCompile("`((?:Scheduler|Iteration)\\.[A-Za-z.]+)`")
	checked := 0
	for _, cells := range rows {
		options := cells[1]
		for _, m := range field.FindAllStringSubmatch(cells[2], -1) {
			checked++
			option := optionOf(m[1])
			switch {
			case option == "" && !strings.Contains(options, "always present"):
				t.Errorf("docs/engines.md pairs %s with %s, but the Recorder needs no option for it", m[1], options)
			case option != "" && !strings.Contains(options, option):
				t.Errorf("docs/engines.md pairs %s with %s, but its option is %s", m[1], options, option)
			}
		}
	}
	if checked == 0 {
		t.Fatal("docs/engines.md's feature table names no Scheduler or Iteration field")
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
