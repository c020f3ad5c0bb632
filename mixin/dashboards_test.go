package mixin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/infermetrics/infermetrics/exporters"
	promexp "github.com/infermetrics/infermetrics/exporters/prometheus"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/openaihttp"
	"github.com/infermetrics/infermetrics/stats"
	"github.com/infermetrics/infermetrics/views"
)

// builtBoard is the part of a generated dashboard the tests read.
type builtBoard struct {
	Description string `json:"description"`
	Panels      []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []boardVariable `json:"list"`
	} `json:"templating"`
}

// boardVariable is a generated dashboard variable.
type boardVariable struct {
	Name             string  `json:"name"`
	Type             string  `json:"type"`
	Definition       string  `json:"definition"`
	Regex            string  `json:"regex"`
	IncludeAll       bool    `json:"includeAll"`
	Multi            bool    `json:"multi"`
	AllValue         *string `json:"allValue"`
	AllowCustomValue *bool   `json:"allowCustomValue"`
	Current          struct {
		Value string `json:"value"`
	} `json:"current"`
}

// builtBoards returns the generated dashboards of c by file.
func builtBoards(t *testing.T, c Config) map[string]builtBoard {
	t.Helper()
	fs := files(t, c)
	out := map[string]builtBoard{}
	for _, b := range boards(c) {
		var d builtBoard
		if err := json.Unmarshal(fileOf(t, fs, b.file), &d); err != nil {
			t.Fatalf("%s: %v", b.file, err)
		}
		out[b.file] = d
	}
	return out
}

// exprs returns every PromQL expression of d: its panels' queries, and the
// series selectors of its query variables, each with where it is.
func (d builtBoard) exprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if m := labelNamesDef.FindStringSubmatch(v.Definition); m != nil && v.Name == dimensionVar {
			out[m[1]] = "variable " + v.Name
			continue
		}
		m := labelValuesDef.FindStringSubmatch(v.Definition)
		if m == nil || m[2] != v.Name && !(v.Name == valueVar && m[2] == "$"+dimensionVar) {
			t.Errorf("variable %s: definition %q is not label_values(<selector>, %s)", v.Name, v.Definition, v.Name)
			continue
		}
		out[m[1]] = "variable " + v.Name
	}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			out[q.Expr] = "panel " + p.Title
		}
	}
	return out
}

var (
	labelValuesDef = regexp.MustCompile(`^label_values\((.+), (\$?\w+)\)$`)
	labelNamesDef  = regexp.MustCompile(`^label_names\((.+)\)$`)
)

// grafanaWindows are Grafana's time variables, which PromQL cannot parse
// where a duration goes, and the spend dashboard's variables where a label
// name or a number goes: the parser reads a duration, a label or a number
// in their place.
var grafanaWindows = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$"+dimensionVar, "tenant", "$"+topVar, "10")

// selectors parses expr with Prometheus's parser and returns its series
// selectors.
func selectors(t *testing.T, expr string) []*parser.VectorSelector {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaWindows.Replace(expr))
	if err != nil {
		t.Errorf("%s: %v", expr, err)
		return nil
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// hasMatcher reports whether vs has the matcher name op value.
func hasMatcher(vs *parser.VectorSelector, name string, op labels.MatchType, value string) bool {
	return slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
		return m.Name == name && m.Type == op && m.Value == value
	})
}

// contractConfig is the Config of the labels the session's contract
// decided: a deployment named by cluster, namespace and job.
func contractConfig() Config {
	c := Default()
	c.JobLabels = []string{"cluster", "namespace", "job"}
	return c
}

// Every series selector of every dashboard (panels and variables) carries
// the Config's Selector, and a matcher of each deployment and instance
// variable; the dashboards differ with the Selector.
func TestDashboardsScoped(t *testing.T) {
	c := contractConfig()
	c.Selector = `namespace="llm"`
	plain := builtBoards(t, contractConfig())
	scoped := builtBoards(t, c)
	targetVars := append(slices.Clone(c.JobLabels), c.InstanceLabels[0])
	for file, d := range scoped {
		if reflectEqualJSON(t, d, plain[file]) {
			t.Errorf("%s: the same with and without a Selector", file)
		}
		n := 0
		for expr, where := range d.exprs(t) {
			for _, vs := range selectors(t, expr) {
				n++
				if !hasMatcher(vs, "namespace", labels.MatchEqual, "llm") {
					t.Errorf("%s: %s: %s without the Selector", file, where, vs)
				}
				variable := strings.TrimPrefix(where, "variable ")
				for _, l := range targetVars {
					if l == variable {
						break // a variable is filtered by the ones before it
					}
					if !hasMatcher(vs, l, labels.MatchRegexp, "$"+l) {
						t.Errorf("%s: %s: %s without %s=~\"$%s\"", file, where, vs, l, l)
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no series selector", file)
		}
	}
}

// reflectEqualJSON reports whether a and b marshal to the same JSON.
func reflectEqualJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// The variables are the anchors' (kubernetes-mixin, node-mixin): the data
// source, then one per JobLabels label and the instance, chained, then the
// model and engine (gateway: backend); every query variable takes several
// values and has an All of any value and none (.*), so that a deployment
// without cluster or namespace is under All beside those with them. (The
// All was the values listed, while the engine dashboards listed engines
// only; they list every server now, issue 42.)
func TestDashboardVariables(t *testing.T) {
	c := contractConfig()
	want := map[string][]string{
		"docs/grafana/infermetrics.json":          {"datasource", "cluster", "namespace", "job", "instance", "model_name", "engine", "ttft_seconds", "itl_seconds"},
		"docs/grafana/infermetrics-tokens.json":   {"datasource", "cluster", "namespace", "job", "instance", "model_name", "engine"},
		"docs/grafana/infermetrics-features.json": {"datasource", "cluster", "namespace", "job", "instance", "model_name", "engine"},
		"docs/grafana/infermetrics-gateway.json":  {"datasource", "cluster", "namespace", "job", "instance", "model_name", "backend", "ttft_seconds", "itl_seconds"},
		SpendDashboardFile:                        {"datasource", "cluster", "namespace", "job", "instance", "model_name", "dimension", "value", "top"},
	}
	bs := builtBoards(t, c)
	if len(bs) != len(want) {
		t.Errorf("%d dashboards, the test knows %d", len(bs), len(want))
	}
	for file, d := range bs {
		var names []string
		for _, v := range d.Templating.List {
			names = append(names, v.Name)
			if v.Type == "query" && v.Name != dimensionVar && (!v.IncludeAll || !v.Multi || v.AllValue == nil || *v.AllValue != ".*") {
				t.Errorf("%s: variable %s: includeAll %v, multi %v, allValue %v; want several values and an All of .*",
					file, v.Name, v.IncludeAll, v.Multi, v.AllValue)
			}
		}
		if !slices.Equal(names, want[file]) {
			t.Errorf("%s: variables %v, want %v", file, names, want[file])
		}
		if d.Templating.List[0].Type != "datasource" {
			t.Errorf("%s: the first variable is a %s, want the data source", file, d.Templating.List[0].Type)
		}
	}
}

// The engine dashboards list their deployments, instances, models and
// engines from the scope family, and say so in their description. It
// asserted the opposite before issue 42: the deployments and instances of
// vllm:cache_config_info only, which an engine without
// instrument.WithCacheConfig, infermetrics-proxy and a P/D router never
// export, so that none of them was on these dashboards.
func TestEngineDashboardsListEveryServer(t *testing.T) {
	c := contractConfig()
	listed := slices.Concat(c.JobLabels, []string{c.InstanceLabels[0], modelName, engineName})
	for file, d := range builtBoards(t, c) {
		if file == "docs/grafana/infermetrics-gateway.json" || file == SpendDashboardFile {
			continue
		}
		n := 0
		for _, v := range d.Templating.List {
			if !slices.Contains(listed, v.Name) {
				continue
			}
			n++
			if m := labelValuesDef.FindStringSubmatch(v.Definition); m == nil || strings.FieldsFunc(m[1], func(r rune) bool { return r == '{' })[0] != scopeFamily.ScrapeName() {
				t.Errorf("%s: variable %s: %s, want the values of %s", file, v.Name, v.Definition, scopeFamily.ScrapeName())
			}
		}
		if n != len(listed) {
			t.Errorf("%s: %d of the variables %v", file, n, listed)
		}
		if !strings.Contains(d.Description, "listed from "+scopeFamily.ScrapeName()) {
			t.Errorf("%s: the description does not say the deployments listed are those of %s", file, scopeFamily.ScrapeName())
		}
	}
}

// gatewayPath is an openaihttp front end (infermetrics-proxy, a P/D
// router): a handler around a reverse proxy whose transport records each
// upstream leg, on one Engine, its HTTP families on, answered by
// streamedUpstream; its scrape before any request and after three.
func gatewayPath(t *testing.T) (before, after map[string]float64) {
	t.Helper()
	ctx := context.Background()
	provider, err := exporters.Setup(ctx, exporters.WithoutProcessMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Shutdown(ctx) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(provider.MeterProvider()), instrument.WithModelName("m"),
		instrument.WithGenAISemconv())
	if err != nil {
		t.Fatal(err)
	}
	eng, err := rec.Engine(0)
	if err != nil {
		t.Fatal(err)
	}
	upstream := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "upstream.invalid"})
			pr.Out = pr.Out.WithContext(openaihttp.ContextWithBackend(pr.Out.Context(),
				openaihttp.Backend{Name: "decode-0", Role: instrument.RoleDecode}))
		},
		Transport: openaihttp.NewTransport(streamedUpstream{}, openaihttp.WithEngine(eng)),
	}
	gateway := openaihttp.NewHandler(upstream, openaihttp.WithEngine(eng), openaihttp.WithHTTPMetrics(eng, nil))
	before = sampleSums(t, provider.Handler())
	for range 3 {
		w := httptest.NewRecorder()
		gateway.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`)))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "[DONE]") {
			t.Fatalf("the gateway answered %d %q", w.Code, w.Body)
		}
	}
	return before, sampleSums(t, provider.Handler())
}

// sampleSums scrapes h and returns the sum of each sample name's values.
func sampleSums(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", w.Code, w.Body)
	}
	out := map[string]float64{}
	for l := range strings.SplitSeq(w.Body.String(), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name := strings.FieldsFunc(l, func(r rune) bool { return r == '{' || r == ' ' })[0]
		fields := strings.Fields(l)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("scrape line %q: %v", l, err)
		}
		out[name] += v
	}
	return out
}

// The scope family is in the scrape of every server that feeds the engine
// dashboards from start-up, before any request: an engine set up as
// docs/engines.md's first program (prometheus.NewProvider, no
// instrument.WithCacheConfig) and an openaihttp front end (handler,
// transport, HTTP families), which exports no vllm:cache_config_info.
// The gateway dashboard's family comes with the front end's first request
// upstream. TestDashboardsPerPath (e2e) scrapes the real programs.
func TestScopeFamilyOnEveryPath(t *testing.T) {
	ctx := context.Background()
	provider, err := promexp.NewProvider(ctx, promexp.WithoutProcessMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Shutdown(ctx) })
	rec, err := instrument.NewRecorder(instrument.WithMeterProvider(provider.MeterProvider()), instrument.WithModelName("my-model"),
		instrument.WithEngines(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })
	engine := sampleSums(t, provider.Handler())
	before, after := gatewayPath(t)
	for name, scrape := range map[string]map[string]float64{"engine without a cache configuration": engine, "front end before a request": before} {
		if _, ok := scrape[scopeFamily.ScrapeName()]; !ok {
			t.Errorf("%s: no %s: the engine dashboards would not list it", name, scopeFamily.ScrapeName())
		}
		if _, ok := scrape[cacheConfig.ScrapeName()]; ok {
			t.Errorf("%s: %s, which the test means to do without", name, cacheConfig.ScrapeName())
		}
	}
	if _, ok := after[gatewayFamily.ScrapeName()+"_count"]; !ok {
		t.Errorf("the front end exports no %s_count after a request: the gateway dashboard would not list it", gatewayFamily.ScrapeName())
	}
}

// streamedUpstream answers every request with a streamed chat completion
// and its usage (two of its prompt tokens cached), as a vLLM server does.
type streamedUpstream struct{}

func (streamedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	body := `data: {"id":"1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"a"}}]}` + "\n\n" +
		`data: {"id":"1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"b"}}]}` + "\n\n" +
		`data: {"id":"1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"1","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}}` + "\n\n" +
		"data: [DONE]\n\n"
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"text/event-stream"}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: r, ContentLength: -1}, nil
}

// notOnPanel are the families of docs/metrics.md on no panel, each with
// its reason. Every family the views export is on a panel.
var notOnPanel = func() map[string]string {
	out := map[string]string{}
	for _, f := range views.LegacyFamilies() {
		out[f.Name] = "an older vLLM's name (views.WithVersion) of " + f.Replacement + ", which the dashboards read"
		if f.Replacement == "" {
			out[f.Name] = "a family of older vLLM versions (views.WithVersion) removed without a successor"
		}
	}
	for _, f := range views.ServerFamilies() {
		out[f.Name] = "a GenAI server family (instrument.WithGenAISemconv): the e2e latency, TTFT and time per output token the dashboards read from vLLM's families, under OpenTelemetry's names"
	}
	return out
}()

// Every family the views export (vLLM's, the HTTP and the GenAI client
// families) is on a panel of a dashboard; every family docs/metrics.md
// lists is one of those or in notOnPanel with its reason.
func TestEveryFamilyOnAPanel(t *testing.T) {
	read := map[string]bool{}
	for _, d := range builtBoards(t, contractConfig()) {
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				for _, vs := range selectors(t, q.Expr) {
					read[vs.Name] = true
				}
			}
		}
	}
	on := func(f views.Family) bool {
		if f.Type == "histogram" {
			return read[f.ScrapeName()+"_bucket"] || read[f.ScrapeName()+"_sum"] || read[f.ScrapeName()+"_count"]
		}
		return read[f.ScrapeName()]
	}
	names := map[string]bool{}
	missing := 0
	for _, f := range exported {
		names[f.Name] = true
		if !on(f) {
			missing++
			t.Errorf("%s is on no panel", f.ScrapeName())
		}
	}
	t.Logf("%d of %d exported families on a panel", len(exported)-missing, len(exported))
	doc, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\| (counter|gauge|histogram) \\|").FindAllStringSubmatch(string(doc), -1) {
		listed++
		if !names[m[1]] && notOnPanel[m[1]] == "" {
			t.Errorf("docs/metrics.md lists %s, which is neither exported by the views nor in notOnPanel", m[1])
		}
	}
	if listed < len(exported) {
		t.Errorf("docs/metrics.md: %d families read, fewer than the %d exported", listed, len(exported))
	}
}

// The SLO panels' bounds are dashboard variables whose default is the
// Config's objective, a bucket boundary; their queries read the bucket of
// the variable and the Config's objective share.
func TestSLOPanels(t *testing.T) {
	c := contractConfig()
	c.TTFT = SLO{Seconds: 1, Objective: 0.95}
	c.ITL = SLO{Seconds: 0.05, Objective: 0.999}
	for _, file := range []string{"docs/grafana/infermetrics.json", "docs/grafana/infermetrics-gateway.json"} {
		d := builtBoards(t, c)[file]
		for _, s := range []struct {
			variable, current, bucket, objective string
		}{{"ttft_seconds", "1", ttft.ScrapeName() + "_bucket", "(1 - 0.95)"}, {"itl_seconds", "0.05", itl.ScrapeName() + "_bucket", "(1 - 0.999)"}} {
			i := slices.IndexFunc(d.Templating.List, func(v boardVariable) bool {
				return v.Name == s.variable
			})
			if i < 0 {
				t.Errorf("%s: no variable %s", file, s.variable)
				continue
			}
			if v := d.Templating.List[i]; v.Type != "custom" || v.Current.Value != s.current {
				t.Errorf("%s: variable %s: %s, current %q, want a custom variable at %s", file, s.variable, v.Type, v.Current.Value, s.current)
			}
			if v := d.Templating.List[i]; v.AllowCustomValue == nil || *v.AllowCustomValue {
				t.Errorf("%s: variable %s takes a custom value: a bound that is no bucket boundary selects no bucket", file, s.variable)
			}
			var within, budget int
			for _, p := range d.Panels {
				for _, q := range p.Targets {
					for _, vs := range selectors(t, q.Expr) {
						if vs.Name == s.bucket && hasMatcher(vs, "le", labels.MatchRegexp, "$"+s.variable+`(\.0)?`) {
							within++
							if strings.Contains(q.Expr, s.objective) {
								budget++
							}
						}
					}
				}
			}
			if within < 3 || budget != 1 {
				t.Errorf("%s: %d queries of %s within $%s (want the share over time and over the range, and the budget), %d of the budget against %s",
					file, within, s.bucket, s.variable, budget, s.objective)
			}
		}
	}
}

// Every panel has queries, ids are unique, and the queries use only the
// dashboard's variables and Grafana's time variables.
func TestDashboards(t *testing.T) {
	variable := regexp.MustCompile(`\$\{?(\w+)`)
	for file, d := range builtBoards(t, Default()) {
		vars := map[string]bool{"__rate_interval": true, "__range": true}
		for _, v := range d.Templating.List {
			vars[v.Name] = true
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("%s: panel %q: id %d not unique", file, p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", file, p.Title)
			}
			for _, q := range p.Targets {
				for _, m := range variable.FindAllStringSubmatch(q.Expr, -1) {
					if !vars[m[1]] {
						t.Errorf("%s: panel %q: unknown variable $%s in %s", file, p.Title, m[1], q.Expr)
					}
				}
			}
		}
	}
}

// labelValuesOf are the values the synthetic series of TestDashboardQueriesReturnData
// give a label: every source (the token panels read one or another), a
// stopped and an errored request (the error ratio), one value otherwise.
func labelValuesOf(l string) []string {
	switch l {
	case source:
		var out []string
		for _, s := range stats.Sources() {
			out = append(out, s.String())
		}
		return out
	case finishedReason:
		return []string{stats.FinishStop.String(), errorReason}
	case instrument.KeyKind: // the token kinds (the spend panels read some), and one of invalid events
		var out []string
		for _, k := range stats.TokenKinds() {
			out = append(out, k.String())
		}
		return out
	}
	return []string{"x"}
}

// syntheticDimension is the attribution dimension of the synthetic series
// of the usage families that carry dimensions.
const syntheticDimension = "tenant"

// syntheticSeries writes promtool input series for every exported family,
// as a plain Prometheus scrapes them: job and instance, no cluster or
// namespace; counters and histogram buckets rising, gauges at 1.
func syntheticSeries() string {
	var b strings.Builder
	for _, f := range exported {
		combos := [][]string{{`job="vllm"`, `instance="a:8000"`}} // syntheticValue's
		if slices.ContainsFunc(views.UsageFamilies(), func(u views.Family) bool { return u.Name == f.Name }) && f.Name != attrOverflow.Name {
			combos = [][]string{append(slices.Clone(combos[0]), syntheticDimension+`="x"`),
				append(slices.Clone(combos[0]), syntheticDimension+`="`+instrument.AttributionNone+`"`)}
		}
		for _, k := range f.Labels {
			l := label(k)
			if !labelName.MatchString(l) {
				continue // vllm:cache_config_info's "<every cache config key>"
			}
			var next [][]string
			for _, c := range combos {
				for _, v := range labelValuesOf(l) {
					next = append(next, append(slices.Clone(c), l+"="+strconv.Quote(v)))
				}
			}
			combos = next
		}
		for _, c := range combos {
			write := func(name, values string, extra ...string) {
				fmt.Fprintf(&b, "      - series: %s\n        values: %s\n",
					strconv.Quote(name+"{"+strings.Join(append(slices.Clone(c), extra...), ", ")+"}"), strconv.Quote(values))
			}
			switch f.Type {
			case "histogram":
				bounds := append(slices.Clone(f.Buckets), math.Inf(1))
				for i, le := range bounds {
					write(f.ScrapeName()+"_bucket", fmt.Sprintf("0+%dx60", i+1), "le="+strconv.Quote(strconv.FormatFloat(le, 'g', -1, 64)))
				}
				write(f.ScrapeName()+"_count", fmt.Sprintf("0+%dx60", len(bounds)))
				write(f.ScrapeName()+"_sum", "0+3x60")
			case "gauge":
				write(f.ScrapeName(), "1x60")
			default:
				write(f.ScrapeName(), "0+2x60")
			}
		}
	}
	return b.String()
}

// syntheticValue is what Grafana writes for variable v at All over the
// synthetic series: the one value they give its label, or for a label
// they lack (cluster, namespace) no value, which matches only its absence.
func syntheticValue(c Config, v string) string {
	switch {
	case v == "job":
		return "vllm"
	case v == c.InstanceLabels[0]:
		return "a:8000"
	case slices.Contains(c.JobLabels, v):
		return ""
	case v == dimensionVar:
		return syntheticDimension
	case v == valueVar: // the values of syntheticDimension
		return "x|" + instrument.AttributionNone
	}
	return labelValuesOf(v)[0]
}

// Every query of every dashboard, its variables' included, returns a
// number (a series not NaN) on series as a plain Prometheus scrapes them,
// without cluster or namespace, with every variable at All (the values
// listed, so a matcher on a label a family lacks finds nothing) and the
// SLO bounds at their defaults: promtool evaluates count(q >= -Inf) > bool 0
// (1 when q has a number, 0 when it is empty or NaN only) for each.
func TestDashboardQueriesReturnData(t *testing.T) {
	t.Parallel()
	c := contractConfig()
	subst := []string{"$__rate_interval", "5m", "$__range", "30m"}
	for _, v := range sloVariables(c) {
		subst = append(subst, "$"+v.name, number(v.current))
	}
	queries := map[string]string{}
	for file, d := range builtBoards(t, c) {
		for _, v := range d.Templating.List {
			switch v.Type {
			case "query":
				subst = append(subst, "$"+v.Name, syntheticValue(c, v.Name))
			case "custom":
				subst = append(subst, "$"+v.Name, v.Current.Value)
			}
		}
		for expr, where := range d.exprs(t) {
			queries[expr] = file + ": " + where
		}
	}
	replace := strings.NewReplacer(subst...)
	var b strings.Builder
	b.WriteString("rule_files: [empty.yaml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n")
	b.WriteString(syntheticSeries())
	b.WriteString("    promql_expr_test:\n")
	exprs := slices.Sorted(maps.Keys(queries))
	for _, e := range exprs {
		fmt.Fprintf(&b, "      - expr: %s\n        eval_time: 40m\n        exp_samples: [{labels: '{}', value: 1}]\n",
			strconv.Quote("(count("+replace.Replace(e)+" >= -Inf) > bool 0) or vector(0)"))
	}
	dir := t.TempDir()
	for name, data := range map[string]string{"empty.yaml": "groups: []\n", "dashboards.yaml": b.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, bin := range anyPromtool(t) {
		out, ok := promtool(t, bin, dir, "test", "rules", "dashboards.yaml")
		if !ok {
			for _, e := range exprs {
				if strings.Contains(out, replace.Replace(e)) {
					t.Errorf("%s: %s: no number from %s", name, queries[e], e)
				}
			}
			t.Errorf("%s test rules of the dashboards' queries:\n%.3000s", name, out)
		}
		t.Logf("%s: %d dashboard queries", name, len(exprs))
	}
}

// walkJSON calls fn for every value of a decoded JSON document with its
// path (keys and indexes joined by dots).
func walkJSON(v any, path string, fn func(path string, v any)) {
	fn(path, v)
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			walkJSON(e, path+"."+k, fn)
		}
	case []any:
		for i, e := range x {
			walkJSON(e, path+"."+strconv.Itoa(i), fn)
		}
	}
}

// importReplace does what Grafana's import does to a dashboard with the
// inputs' values (dash_template_evaluator.go of grafana/grafana @ 0425369):
// ${NAME} of an input replaced in every string, any other ${...} left.
func importReplace(v any, inputs map[string]string) any {
	switch x := v.(type) {
	case string:
		for name, value := range inputs {
			x = strings.ReplaceAll(x, "${"+name+"}", value)
		}
		return x
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if k != "__inputs" {
				out[k] = importReplace(e, inputs)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = importReplace(e, inputs)
		}
		return out
	}
	return v
}

// The dashboards load both ways Grafana loads a file. Imported, Grafana
// asks for the one input of __inputs, the Prometheus data source, and
// writes its uid for ${DS_PROMETHEUS}: the data source variable then holds
// it, and every panel, query and variable reads the variable. Provisioned,
// nothing is replaced: ${DS_PROMETHEUS} is only the variable's current
// value, which is then no data source, and the variable falls back to one
// (docs/monitoring.md). __requires names the oldest Grafana.
func TestDashboardImportShape(t *testing.T) {
	fs := files(t, contractConfig())
	for _, b := range boards(contractConfig()) {
		var doc map[string]any
		if err := json.Unmarshal(fileOf(t, fs, b.file), &doc); err != nil {
			t.Fatal(err)
		}
		var head importHeader
		if err := json.Unmarshal(fileOf(t, fs, b.file), &head); err != nil {
			t.Fatal(err)
		}
		if len(head.Inputs) != 1 || head.Inputs[0].Name != datasourceInput || head.Inputs[0].Type != "datasource" || head.Inputs[0].PluginID != "prometheus" {
			t.Errorf("%s: __inputs %+v, want one Prometheus data source %s", b.file, head.Inputs, datasourceInput)
		}
		if !slices.Contains(head.Requires, importRequire{"grafana", "grafana", "Grafana", minGrafana}) {
			t.Errorf("%s: __requires %+v, without Grafana %s", b.file, head.Requires, minGrafana)
		}
		check := func(how string, d any, wantCurrent string) {
			refs := 0
			walkJSON(d, "", func(path string, v any) {
				if s, ok := v.(string); ok && strings.Contains(s, "${DS_") && !strings.HasPrefix(path, ".templating.list.0.current.") {
					t.Errorf("%s %s: %s = %q: only the data source variable may hold an input", how, b.file, path, s)
				}
				if ds, ok := v.(map[string]any); ok && strings.HasSuffix(path, ".datasource") {
					refs++
					if ds["type"] != "prometheus" || ds["uid"] != "${datasource}" {
						t.Errorf("%s %s: %s = %v, want the data source variable", how, b.file, path, ds)
					}
				}
			})
			list := d.(map[string]any)["templating"].(map[string]any)["list"].([]any)
			first := list[0].(map[string]any)
			current, _ := first["current"].(map[string]any)
			if first["type"] != "datasource" || first["query"] != "prometheus" || current["value"] != wantCurrent {
				t.Errorf("%s %s: the first variable %v, want the Prometheus data source variable at %q", how, b.file, first, wantCurrent)
			}
			if refs == 0 {
				t.Errorf("%s %s: no data source reference", how, b.file)
			}
		}
		check("provisioned", doc, "${"+datasourceInput+"}")
		check("imported", importReplace(doc, map[string]string{datasourceInput: "chosen-uid"}), "chosen-uid")
	}
}

// frontEndState are the families a front end's panels read although its
// requests leave no count behind: its requests in flight (0 again when
// they end), the events any Recorder refuses and the admission refusals
// of an upstream vLLM (none here).
var frontEndState = map[string]string{
	running.ScrapeName():       "a front end's requests in flight, 0 again once they end",
	invalidEvents.ScrapeName(): "the events any Recorder refuses, a front end's too",
	admission.ScrapeName():     "the 503s of an upstream vLLM that sheds load, which a front end counts",
}

// A panel of the engine dashboards is marked engine only exactly when an
// openaihttp front end's requests fill none of the families it reads: a
// family a front end records (its sum grew with three streamed requests
// with usage) or one of frontEndState. The Recorder's state at start-up
// (sleep state awake, the scheduler policy) is no request's.
func TestEngineOnlyMarks(t *testing.T) {
	before, after := gatewayPath(t)
	marked := 0
	for _, b := range boards(contractConfig()) {
		if b.file == "docs/grafana/infermetrics-gateway.json" || b.file == SpendDashboardFile {
			continue // a front end's dashboards
		}
		for _, r := range b.rows {
			for _, p := range r.panels {
				var filled []string
				for _, q := range p.targets {
					for _, vs := range selectors(t, q.expr) {
						if after[vs.Name] > before[vs.Name] || frontEndState[vs.Name] != "" {
							filled = append(filled, vs.Name)
						}
					}
				}
				if p.engine {
					marked++
				}
				switch {
				case p.engine && len(filled) > 0:
					t.Errorf("%s: %q is marked engine only, but a front end fills %v", b.file, p.title, slices.Compact(filled))
				case !p.engine && len(filled) == 0:
					t.Errorf("%s: %q reads nothing a front end fills: mark it engine only", b.file, p.title)
				}
			}
		}
	}
	t.Logf("%d panels of the engine dashboards marked engine only", marked)
}
