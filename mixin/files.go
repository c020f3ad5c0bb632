package mixin

import (
	"fmt"
	"path"
)

// Paths of the generated files, from the repository's root. The
// dashboards' are in their boards.
const (
	RecordingRulesFile = "mixin/rules/recording.yaml"
	AlertsFile         = "mixin/rules/alerts.yaml"
	PrometheusRuleFile = "mixin/rules/prometheusrule.yaml"
	UnitTestsFile      = "mixin/rules/tests.yaml"
	RunbookFile        = "docs/monitoring.md"
)

// File is a generated file: its path from the repository's root and its
// content.
type File struct {
	Path string
	Data []byte
}

// Files returns every file of the Config: the rule files, the
// PrometheusRule, the promtool unit tests, the dashboards, the generated
// parts of the jsonnet mixin and the runbook.
// The unit tests' series carry the Selector's labels, so it must be made
// of equality matchers.
func Files(c Config) ([]File, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("mixin: %w", err)
	}
	sel, err := selectorLabels(c.Selector)
	if err != nil {
		return nil, fmt.Errorf("mixin: %w", err)
	}
	r := newRules(c)
	alerts := r.alerts(sel)
	recording := r.recordingGroups()
	alerting := []ruleGroup{r.alertGroup(alerts)}
	tests, err := unitTests(alerts, []string{path.Base(RecordingRulesFile), path.Base(AlertsFile)}, r.annotations)
	if err != nil {
		return nil, fmt.Errorf("mixin: %w", err)
	}
	files := []File{
		{RecordingRulesFile, ruleFile(recording, c.Interval)},
		{AlertsFile, ruleFile(alerting, c.Interval)},
		{PrometheusRuleFile, prometheusRule(append(recording, alerting...), c.Interval)},
		{UnitTestsFile, tests},
	}
	bs := boards(c)
	for _, b := range bs {
		data, err := b.build()
		if err != nil {
			return nil, fmt.Errorf("mixin: %w", err)
		}
		files = append(files, File{b.file, data})
	}
	cfg, err := configJSON(c)
	if err != nil {
		return nil, fmt.Errorf("mixin: %w", err)
	}
	files = append(files, File{ConfigJSONFile, cfg}, File{DashboardsLibsonnetFile, dashboardsLibsonnet(bs)})
	doc, err := runbook(r, r.documented(alerts, r.deployment(sel)), recording, bs)
	if err != nil {
		return nil, fmt.Errorf("mixin: %w", err)
	}
	return append(files, File{RunbookFile, doc}), nil
}
