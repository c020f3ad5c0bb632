package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// scopedBoard is the part of a generated dashboard that a scoped check
// reads: its variables as Grafana evaluates them, and every panel's
// queries (a row's own panels included).
type scopedBoard struct {
	Panels     []scopedPanel `json:"panels"`
	Templating struct {
		List []boardVariable `json:"list"`
	} `json:"templating"`
}

type scopedPanel struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Targets     []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []scopedPanel `json:"panels"`
}

// boardVariable is a template variable: a query variable's label_values
// definition and the regex its values are kept by, whether it offers All
// (and its custom value), and a fixed variable's current value.
type boardVariable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
	Regex      string `json:"regex"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
	Current    struct {
		Value any `json:"value"`
	} `json:"current"`
}

// scopedQuery is one query of a dashboard: where it is, and its
// expression before substitution.
type scopedQuery struct{ what, expr string }

// queries lists the panels' queries, rows' panels included.
func (b scopedBoard) queries() []scopedQuery {
	var out []scopedQuery
	var walk func([]scopedPanel)
	walk = func(ps []scopedPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			for _, t := range p.Targets {
				out = append(out, scopedQuery{"panel " + p.Title, t.Expr})
			}
		}
	}
	walk(b.Panels)
	return out
}

// grafanaVar matches $name, ${name} and ${name:format} in an expression.
var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// substitute replaces the variables of expr with vals; an unknown one is
// left as it is (dashboardQuery then refuses the expression).
func substitute(expr string, vals map[string]string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVar.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if v, ok := vals[name]; ok {
			return v
		}
		return m
	})
}

// promRegex is a value as Grafana writes it into a Prometheus regex
// matcher: regex-escaped, each backslash doubled for the PromQL string.
func promRegex(v string) string { return strings.ReplaceAll(regexp.QuoteMeta(v), `\`, `\\`) }

// regexAlternation is how Grafana writes a multi-value or All selection of
// a Prometheus variable: each value escaped (promRegex), joined in (a|b);
// one value alone, escaped.
func regexAlternation(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = promRegex(v)
	}
	if len(quoted) == 1 {
		return quoted[0]
	}
	return "(" + strings.Join(quoted, "|") + ")"
}

// scopedValues evaluates the dashboard's variables in order as Grafana
// does with fixed set to the given values (the deployment's namespace)
// and every other query variable at All (its allValue, or the alternation
// of the values its query returns with the variables before it
// substituted); the time variables become a window of windowSeconds.
func (e *env) scopedValues(t *testing.T, name string, b scopedBoard, fixed map[string]string, at time.Time, windowSeconds int) map[string]string {
	t.Helper()
	window := fmt.Sprintf("%ds", windowSeconds)
	vals := map[string]string{"__rate_interval": window, "__range": window, "__interval": window}
	for _, v := range b.Templating.List {
		if f, ok := fixed[v.Name]; ok {
			vals[v.Name] = promRegex(f)
			continue
		}
		switch v.Type {
		case "datasource":
			continue
		case "query":
			vals[v.Name] = "" // unless its query answers
			q, ok := labelValuesQuery(substitute(v.Definition, vals))
			if !ok {
				t.Errorf("%s: variable %s: unsupported query %q", name, v.Name, v.Definition)
				continue
			}
			label := labelValues.FindStringSubmatch(v.Definition)[2]
			result, err := e.dashboardQuery(q, at)
			if err != nil {
				t.Errorf("%s: variable %s: %v", name, v.Name, err)
				continue
			}
			var values []string
			for _, s := range result {
				values = append(values, s.labels[label])
			}
			sort.Strings(values)
			switch {
			case v.IncludeAll && v.AllValue != "":
				vals[v.Name] = v.AllValue
			case len(values) == 0:
				vals[v.Name] = "" // as Grafana leaves a variable with no values
			default:
				vals[v.Name] = regexAlternation(values)
			}
		default: // custom, constant, textbox, interval: the current value
			vals[v.Name] = fmt.Sprint(v.Current.Value)
		}
	}
	return vals
}

// resultText is a query's result, sorted, for comparing two of them.
func resultText(v []series) string {
	lines := make([]string, len(v))
	for i, s := range v {
		lines[i] = fmt.Sprintf("%v %v", s.labels, s.value)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// selectorMatchers matches the label matchers of a series selector.
var selectorMatchers = regexp.MustCompile(`\{[^{}]*\}`)

// checkScopedDashboard runs every query of a dashboard once for each
// scope (the values of variables that name a deployment): each must
// return data, and every series selector of it carry the scope's
// matchers. Results alike for two deployments are logged: an objective's
// line, the configuration of equal configurations, a rate that is 0 for
// both are the same for any two healthy deployments.
func (e *env) checkScopedDashboard(t *testing.T, name string, raw []byte, scopes []map[string]string, at time.Time, windowSeconds int) {
	t.Helper()
	var b scopedBoard
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, scope := range scopes {
		for variable := range scope {
			if !slices.ContainsFunc(b.Templating.List, func(v boardVariable) bool { return v.Name == variable }) {
				t.Errorf("%s: no variable %s: it cannot be set to one deployment", name, variable)
			}
		}
	}
	results := make([]map[string]string, len(scopes))
	for i, scope := range scopes {
		vals := e.scopedValues(t, name, b, scope, at, windowSeconds)
		results[i] = map[string]string{}
		for _, q := range b.queries() {
			expr := substitute(q.expr, vals)
			for _, sel := range selectorMatchers.FindAllString(expr, -1) {
				for k, v := range scope {
					if !strings.Contains(sel, fmt.Sprintf("%s=~%q", k, promRegex(v))) {
						t.Errorf("%s %v: %s: selector %s of %s is not scoped to %s", name, scope, q.what, sel, expr, k)
					}
				}
			}
			v, err := e.dashboardQuery(expr, at)
			switch {
			case err != nil:
				t.Errorf("%s %v: %s: %v", name, scope, q.what, err)
			case !slices.ContainsFunc(v, func(s series) bool { return !math.IsNaN(s.value) }):
				t.Errorf("%s %v: %s: %s: no data (%d series)", name, scope, q.what, expr, len(v))
			default:
				results[i][q.what+"\x00"+q.expr] = resultText(v)
			}
		}
	}
	var alike []string
	for k, r := range results[0] {
		for i := 1; i < len(results); i++ {
			if other, ok := results[i][k]; ok && other == r {
				what, _, _ := strings.Cut(k, "\x00")
				alike = append(alike, fmt.Sprintf("%s = %s", what, strings.ReplaceAll(r, "\n", "; ")))
			}
		}
	}
	slices.Sort(alike)
	t.Logf("%s: %d queries, each with data for %d deployments and scoped to each; %d differ, %d alike: %s",
		name, len(b.queries()), len(scopes), len(results[0])-len(alike), len(alike), strings.Join(slices.Compact(alike), " | "))
}
