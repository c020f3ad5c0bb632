package mixin

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// exclusionRegex is the form of $dimension's regex: a negative lookahead
// of the label names it leaves out.
var exclusionRegex = regexp.MustCompile(`^/\^\(\?!\(\?:(.+)\)\$\)\.\+\$/$`)

// $dimension is one label name (no All, no several: each would make no by
// clause) of the usage requests' series in the dashboard's scope, minus
// every label of the usage families and every target label of the Config;
// an attribution dimension's name is offered.
func TestSpendDimensionVariable(t *testing.T) {
	c := contractConfig()
	c.ExtraGroupLabels = []string{"role"}
	var b builtBoard
	if err := json.Unmarshal(spendFile(t, c), &b); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(b.Templating.List, func(v boardVariable) bool { return v.Name == dimensionVar })
	if i < 0 {
		t.Fatalf("no variable %s", dimensionVar)
	}
	v := b.Templating.List[i]
	if v.IncludeAll || v.Multi || !strings.HasPrefix(v.Definition, "label_names("+usageRequests.ScrapeName()+"{") {
		t.Errorf("%s: includeAll %v, multi %v, %s; want one of the label names of %s", v.Name, v.IncludeAll, v.Multi, v.Definition, usageRequests.ScrapeName())
	}
	m := exclusionRegex.FindStringSubmatch(v.Regex)
	if m == nil {
		t.Fatalf("%s: regex %q is not /^(?!(?:a|b|...)$).+$/", v.Name, v.Regex)
	}
	left := strings.Split(m[1], "|")
	// Every label the usage families carry, as views lists them, and the
	// target labels.
	want := []string{"__name__", "otel_scope_.*", "le"}
	for _, f := range []views.Family{usageTokens, usageRequests, usageCost, usageDuration, attrOverflow} {
		for _, k := range f.Labels {
			want = append(want, label(k))
		}
	}
	want = slices.Concat(want, c.JobLabels, c.ExtraGroupLabels, c.InstanceLabels, c.OtherTargetLabels)
	for _, l := range want {
		if !slices.Contains(left, l) {
			t.Errorf("%s offers %s, no attribution dimension", v.Name, l)
		}
	}
	for _, d := range []string{"tenant", "user", "api_key", "team"} {
		if slices.Contains(left, d) {
			t.Errorf("%s leaves out %s, a dimension", v.Name, d)
		}
	}
}

// spendFile is the spend dashboard of c.
func spendFile(t *testing.T, c Config) []byte {
	t.Helper()
	return fileOf(t, files(t, c), SpendDashboardFile)
}

// The token totals of the spend dashboard add the kinds that partition a
// request's tokens, so that none is counted twice: over a request that
// reports every kind, they are its prompt and its output tokens.
func TestSpendTokenTotalsPartition(t *testing.T) {
	r := stats.ObservedRequest{UsageKnown: true, PromptTokens: 1000, CachedPromptTokens: 600, GenerationTokens: 300}
	for k, v := range map[stats.TokenKind]int64{stats.TokenCacheRead: 600, stats.TokenCacheWrite: 100, stats.TokenReasoning: 120,
		stats.TokenInputAudio: 50, stats.TokenInputImage: 40, stats.TokenOutputAudio: 30, stats.TokenOutputImage: 20} {
		r.Details.Set(k, v)
	}
	u := r.Tokens()
	var whole, all int64
	for _, k := range stats.TokenKinds() {
		n, _ := u.Get(k)
		all += n
		if slices.Contains(wholeKinds, k) {
			whole += n
		}
	}
	if whole != r.PromptTokens+r.GenerationTokens || all == whole {
		t.Errorf("the kinds %v add to %d of a request of %d prompt and %d output tokens (every kind: %d)", wholeKinds, whole,
			r.PromptTokens, r.GenerationTokens, all)
	}
	var tokens int
	for _, q := range spendQueries(t) {
		for _, vs := range selectors(t, q.expr) {
			if vs.Name == usageTokens.ScrapeName() && strings.Contains(q.title, "top") {
				tokens++
				if !hasMatcher(vs, instrument.KeyKind, labels.MatchRegexp, "input|cache_read|cache_write|output") {
					t.Errorf("%s: %s adds every kind", q.title, vs)
				}
			}
		}
	}
	if tokens == 0 {
		t.Error("no token total on the spend dashboard")
	}
}

// spendQuery is one query of the spend dashboard and its panel.
type spendQuery struct {
	title, description, expr string
	signed, stat             bool
}

func spendQueries(t *testing.T) []spendQuery {
	t.Helper()
	var out []spendQuery
	for _, r := range spendBoard(contractConfig()).rows {
		for _, p := range r.panels {
			for _, q := range p.targets {
				out = append(out, spendQuery{p.title, p.description, q.expr, p.signed, p.stat})
			}
		}
	}
	return out
}

// What caching saved can be negative: its time series' axes do not start
// at 0 and its panels' descriptions say it; the panels of amounts that cannot be keep
// an axis from 0. Every query of a family with the attribution dimensions
// is at the values of $value; the overflow counter, which has none, is not.
func TestSpendPanels(t *testing.T) {
	var savings int
	for _, q := range spendQueries(t) {
		if q.description == "" {
			t.Errorf("%s: no description", q.title)
		}
		saved := strings.Contains(q.expr, usageUncached.ScrapeName()) && strings.Contains(q.expr, " - ")
		if saved {
			savings++
		}
		if saved != q.signed && !q.stat || saved && !strings.Contains(q.description, "egative") {
			t.Errorf("%s: signed %v, description %q; want signed (a time series) and said negative exactly for what caching saved",
				q.title, q.signed, q.description)
		}
		for _, vs := range selectors(t, q.expr) {
			atValues := hasMatcher(vs, "tenant", labels.MatchRegexp, "$"+valueVar)
			if atValues != (vs.Name != attrOverflow.ScrapeName()) {
				t.Errorf("%s: %s: at the values of $%s: %v", q.title, vs, valueVar, atValues)
			}
		}
	}
	if savings < 2 {
		t.Errorf("%d queries of what caching saved, want it by model and by dimension", savings)
	}
	var raw struct {
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Defaults struct {
					Min *float64 `json:"min"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
			Type string `json:"type"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(spendFile(t, contractConfig()), &raw); err != nil {
		t.Fatal(err)
	}
	for _, p := range raw.Panels {
		if p.Type != "timeseries" {
			continue
		}
		if signed := strings.Contains(p.Title, "savings"); signed != (p.FieldConfig.Defaults.Min == nil) {
			t.Errorf("%s: min %v", p.Title, p.FieldConfig.Defaults.Min)
		}
	}
}
