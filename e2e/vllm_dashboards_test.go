package e2e

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// vllmDashboardsFile holds the PromQL of vLLM's own Grafana dashboards
// (source and commits in its header).
const vllmDashboardsFile = "testdata/vllm_dashboards.txt"

// notApplicable are the families vLLM's dashboards read that do not apply to
// a Go engine instrumented with infermetrics, or to this deployment, each
// with its reason. An expression naming one may be empty (it must still run
// without a PromQL error); one that returns data anyway is reported, so that
// the list stays true. Every family the dashboards read applies now: the
// list is empty, and an expression that goes dark fails the test.
var notApplicable []struct{ family, reason string }

// vllmExpr is one expression of vLLM's dashboards.
type vllmExpr struct {
	file, expr string
	line       int
}

// readVLLMDashboards reads the expressions of vllmDashboardsFile; a
// label_values(...) variable definition becomes the query behind it.
func readVLLMDashboards(t *testing.T) []vllmExpr {
	t.Helper()
	var out []vllmExpr
	for _, x := range readExprFile(t, vllmDashboardsFile) {
		expr := x.expr
		if q, ok := labelValuesQuery(expr); ok {
			expr = q
		} else if strings.HasPrefix(expr, "label_values(") {
			t.Fatalf("%s:%d: unsupported variable query %q", vllmDashboardsFile, x.line, expr)
		}
		out = append(out, vllmExpr{file: x.file, expr: expr, line: x.line})
	}
	return out
}

// readExprFile reads a test data file of PromQL, one "<name> | <expression>"
// a line, with # comments: the name goes in vllmExpr.file.
func readExprFile(t *testing.T, path string) []vllmExpr {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []vllmExpr
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, expr, ok := strings.Cut(line, " | ")
		if !ok {
			t.Fatalf("%s:%d: no \" | \" between name and expression", path, n)
		}
		out = append(out, vllmExpr{file: name, expr: expr, line: n})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// notApplicableReason returns why expr does not apply, if it names a family
// of notApplicable.
func notApplicableReason(expr string) (string, bool) {
	for _, na := range notApplicable {
		if strings.Contains(expr, na.family) {
			return na.reason, true
		}
	}
	return "", false
}

// apiCalls are the HTTP requests sendAPICalls sends each instance's API,
// with the status class and handler label (the route template, "none"
// for a request no route took) each is recorded with in the HTTP families
// of vLLM's API server, which the example serves as vLLM does (its overview
// dashboard reads them). They move no vllm: family: the generated load
// runs on the engines without HTTP.
var apiCalls = []struct{ method, path, body, handler, status string }{
	{"GET", "/v1/models", "", "/v1/models", "2xx"},
	{"POST", "/v1/chat/completions", "{", "/v1/chat/completions", "4xx"}, // not JSON: 400
	{"GET", "/v1/no-such-path", "", "none", "4xx"},
}

// apiRounds is how many times sendAPICalls sends apiCalls: a counter's
// rate needs an increase between two scrapes, and the first scrape of a
// series already holds the first round.
const apiRounds = 2

// sendAPICalls sends apiCalls to each instance of e.urls apiRounds times,
// each round after Prometheus scraped the previous one.
func (e *env) sendAPICalls(t *testing.T) {
	t.Helper()
	for round := 1; round <= apiRounds; round++ {
		for role, u := range e.urls {
			base := strings.TrimSuffix(u, "/metrics")
			for _, c := range apiCalls {
				req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := httpClient.Do(req)
				if err != nil {
					t.Fatalf("%s: %s %s: %v", role, c.method, c.path, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		want := float64(round * len(apiCalls) * len(e.urls))
		poll(t, 30*time.Second, fmt.Sprintf("prometheus scraping API round %d", round), func() (bool, string) {
			s, err := e.prom.query(fmt.Sprintf(`sum(http_requests_total{path=%q})`, e.httpPath()), time.Now())
			if err != nil {
				return false, err.Error()
			}
			if len(s) != 1 {
				return false, "no http_requests_total yet"
			}
			return s[0].value >= want, fmt.Sprintf("%g of %g requests", s[0].value, want)
		})
	}
}

// httpPath is the path label of the HTTP families sendAPICalls counts.
func (e *env) httpPath() string {
	if e.apiPath == "" {
		return "direct"
	}
	return e.apiPath
}

// checkHTTPFamilies checks that Prometheus holds, for each instance
// scraped directly, exactly the requests sendAPICalls sent in
// http_requests_total
// by handler, method and status, and none of its own scrapes of /metrics
// (vLLM's instrumentator excludes /metrics).
func (e *env) checkHTTPFamilies(t *testing.T, at time.Time) {
	t.Helper()
	want := map[string]float64{}
	for _, c := range apiCalls {
		want[fmt.Sprintf("%s %s %s", c.handler, c.method, c.status)] += apiRounds
	}
	got := map[string]map[string]float64{} // instance -> "handler method status" -> requests
	for _, s := range e.prom.mustQuery(t, fmt.Sprintf(`sum by (instance, handler, method, status) (http_requests_total{path=%q})`, e.httpPath()), at) {
		if got[s.labels["instance"]] == nil {
			got[s.labels["instance"]] = map[string]float64{}
		}
		got[s.labels["instance"]][fmt.Sprintf("%s %s %s", s.labels["handler"], s.labels["method"], s.labels["status"])] = s.value
	}
	if len(got) != len(e.urls) {
		t.Errorf("http_requests_total of %d instances, want %d: %v", len(got), len(e.urls), got)
	}
	for instance, g := range got {
		if fmt.Sprint(g) != fmt.Sprint(want) {
			t.Errorf("%s: http_requests_total %v, want %v", instance, g, want)
		}
	}
}

// checkVLLMDashboards runs every expression of vLLM's shipped dashboards,
// template variables substituted (dashboardVars), against Prometheus after
// the load, and fails on a PromQL error and on a result without a number
// (empty, or NaN only) of every expression that applies to this deployment.
func (e *env) checkVLLMDashboards(t *testing.T, at time.Time, windowSeconds int) {
	e.checkHTTPFamilies(t, at)
	substitute := dashboardVars(windowSeconds)
	var total, empty, skipped, skippedEmpty int
	perFile := map[string][2]int{} // file -> {expressions, empty}
	for _, x := range readVLLMDashboards(t) {
		total++
		where := fmt.Sprintf("%s:%d (%s)", vllmDashboardsFile, x.line, x.file)
		result, err := e.dashboardQuery(substitute.Replace(x.expr), at)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		// A panel whose every value is NaN (a quantile or a ratio of
		// histograms that saw nothing) shows no data either.
		n := 0
		for _, s := range result {
			if !math.IsNaN(s.value) {
				n++
			}
		}
		c := perFile[x.file]
		c[0]++
		reason, na := notApplicableReason(x.expr)
		for _, p := range e.pathNotApplicable {
			if !na && strings.Contains(x.expr, p.family) {
				reason, na = p.reason, true
			}
		}
		switch {
		case na && n == 0:
			skipped++
			skippedEmpty++
		case na:
			skipped++
			t.Errorf("%s: listed as not applicable (%s) but returns %d series: %s", where, reason, n, x.expr)
		case len(result) == 0:
			empty++
			c[1]++
			t.Errorf("%s: empty result: %s", where, x.expr)
		case n == 0:
			empty++
			c[1]++
			t.Errorf("%s: no data (%d series, all NaN): %s", where, len(result), x.expr)
		}
		perFile[x.file] = c
	}
	for file, c := range perFile {
		t.Logf("%s: %d expressions, %d applicable ones empty", file, c[0], c[1])
	}
	e.checkDashboardFamilies(t, at, substitute)
	t.Logf("vLLM's dashboards: %d expressions, %d not applicable (%d of them empty), %d applicable ones empty (%d of %d expressions empty in all)",
		total, skipped, skippedEmpty, empty, empty+skippedEmpty, total)
}

// dashboardFamily matches the vllm: metric names in a dashboard expression.
var dashboardFamily = regexp.MustCompile(`vllm:[a-z0-9_:]+`)

// checkDashboardFamilies: every vllm: metric an applicable expression of
// vLLM's dashboards names has data over the run, so that an expression
// joining two families with "or" fails the test when one of them goes dark:
// a counter or histogram sample above 0 (an increment, an observation), a
// gauge a series (a gauge at 0 is a value).
func (e *env) checkDashboardFamilies(t *testing.T, at time.Time, substitute *strings.Replacer) {
	names := map[string]bool{}
	for _, x := range readVLLMDashboards(t) {
		if _, na := notApplicableReason(x.expr); na {
			continue
		}
		for _, name := range dashboardFamily.FindAllString(x.expr, -1) {
			names[name] = true
		}
	}
	window := substitute.Replace("$__range")
	dark := 0
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if slices.ContainsFunc(e.pathNotApplicable, func(p struct{ family, reason string }) bool { return strings.Contains(name, p.family) }) {
			continue
		}
		expr := fmt.Sprintf(`count(last_over_time(%s{path=~".+"}[%s]))`, name, window)
		if slices.ContainsFunc([]string{"_total", "_bucket", "_count", "_sum"}, func(s string) bool { return strings.HasSuffix(name, s) }) {
			expr = fmt.Sprintf(`max(max_over_time(%s{path=~".+"}[%s]) > 0)`, name, window)
		}
		if v, err := e.prom.query(expr, at); err != nil || len(v) == 0 {
			dark++
			t.Errorf("%s: no data over the run (%v): %s", name, err, expr)
		}
	}
	t.Logf("%d vllm: metrics named by vLLM's dashboards, %d without data", len(names), dark)
}
