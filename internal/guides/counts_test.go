package guides

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// numberWords are the numbers the guides write in words.
var numberWords = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}

// parseCount reads a count written in digits or in words ("21", "Five").
func parseCount(s string) (int, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return n, true
	}
	for i, w := range numberWords {
		if strings.EqualFold(s, w) {
			return i, true
		}
	}
	return 0, false
}

// alertsInRunbook counts the alerts of the generated runbook: the sections
// of docs/monitoring.md between its "## Alerts" and the next "## " heading.
func alertsInRunbook(t *testing.T) int {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "docs/monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, alerts, ok := strings.Cut(string(src), "\n## Alerts\n")
	if !ok {
		t.Fatal(`docs/monitoring.md has no "## Alerts" section`)
	}
	alerts, _, _ = strings.Cut(alerts, "\n## ")
	return strings.Count(alerts, "\n### ")
}

// TestCountsInGuides checks the numbers of alerts and dashboards the guides
// state against the runbook the generator writes and the dashboards shipped
// in docs/grafana (README said 17 alerts and four dashboards long after
// there were more).
func TestCountsInGuides(t *testing.T) {
	dashboards, err := filepath.Glob(filepath.Join(root, "docs/grafana/*.json"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := alertsInRunbook(t)
	if alerts == 0 || len(dashboards) == 0 {
		t.Fatalf("found %d alerts and %d dashboards: the runbook or docs/grafana moved", alerts, len(dashboards))
	}
	for _, c := range []struct {
		file string
		re   *regexp.Regexp
		want int
	}{
		{"README.md", regexp.MustCompile(`(\w+) alerts with their runbook`), alerts},
		{"README.md", regexp.MustCompile(`(\w+) Grafana dashboards`), len(dashboards)},
		{"docs/operators.md", regexp.MustCompile(`the runbook: (\w+) alerts`), alerts},
	} {
		src, err := os.ReadFile(filepath.Join(root, c.file))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(src)), " ")
		m := c.re.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("%s: no %q", c.file, c.re)
			continue
		}
		if n, ok := parseCount(m[1]); !ok || n != c.want {
			t.Errorf("%s: %q says %s, want %d", c.file, m[0], m[1], c.want)
		}
	}
}
