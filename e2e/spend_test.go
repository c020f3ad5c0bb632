package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infermetrics/infermetrics/mixin"
)

// usageOnly reports a generated dashboard that reads only the usage
// families, which only a front end with attribution or a price table
// records (the spend dashboard): the example's deployments record none, so
// TestMixin, TestFaults and TestFleet leave it to TestSpendDashboard.
func usageOnly(path string) bool { return path == mixin.SpendDashboardFile }

// The attribution dimensions of TestSpendDashboard's proxies, each from a
// request header, and the cap on each one's values.
var spendDimensions = []struct{ name, header string }{
	{"tenant", "X-Tenant"}, {"team", "X-Team"}, {"project", "OpenAI-Project"},
}

const spendMaxValues = 4

// spendPrices is the test's price table, in the format of LiteLLM's
// model_prices_and_context_window.json: prices of its own (per token, in
// US dollars), not a provider's. The expected costs are computed from
// these numbers by hand (spendShape.cost), not by package pricing.
var spendPrices = map[string]map[string]any{
	"gpt-4o": {"input_cost_per_token": 2.5e-6, "output_cost_per_token": 1e-5, "cache_read_input_token_cost": 1.25e-6,
		"output_cost_per_reasoning_token": 1.2e-5, "litellm_provider": "openai", "mode": "chat"},
	"claude-sonnet-4": {"input_cost_per_token": 3e-6, "output_cost_per_token": 1.5e-5, "cache_read_input_token_cost": 3e-7,
		"cache_creation_input_token_cost": 3.75e-6, "litellm_provider": "anthropic", "mode": "chat"},
}

// price is a per-token price of spendPrices, 0 when the model has none.
func price(model, field string) float64 {
	v, _ := spendPrices[model][field].(float64)
	return v
}

// spendShape is one kind of request the upstream answers, with the usage
// it reports, as X-Shape names it.
type spendShape struct {
	api    string // "chat" or "messages"
	model  string // the request's; the response names a dated snapshot of it
	stream bool
	status int
	// OpenAI's usage (chat): prompt (cached included), cached (-1: not
	// reported), completion, reasoning; Anthropic's (messages): input
	// (the uncached part), cache read and write, output.
	prompt, cached, completion, reasoning int
	input, read, write, output            int
	errorCode                             string // an error's code (status 4xx)
}

// spendShapes are the requests TestSpendDashboard sends: chat completions
// with cached and reasoning tokens, a stream without cached tokens,
// Anthropic messages reading and writing the prompt cache, one writing a
// large cache (what caching saved is negative), a model without a price,
// and two refusals.
var spendShapes = map[string]spendShape{
	"chat":     {api: "chat", model: "gpt-4o", status: 200, prompt: 1000, cached: 400, completion: 200, reasoning: 50},
	"stream":   {api: "chat", model: "gpt-4o", stream: true, status: 200, prompt: 500, cached: -1, completion: 100},
	"claude":   {api: "messages", model: "claude-sonnet-4", status: 200, input: 300, read: 2000, write: 1000, output: 150},
	"write":    {api: "messages", model: "claude-sonnet-4", status: 200, input: 200, write: 4000, output: 100},
	"unpriced": {api: "chat", model: "house-llm", status: 200, prompt: 100, cached: -1, completion: 10},
	"limited":  {api: "chat", model: "gpt-4o", status: 429, errorCode: "rate_limit_exceeded"},
	"toolong":  {api: "chat", model: "gpt-4o", status: 400, errorCode: "context_length_exceeded"},
}

// tokens are the tokens of each kind the contract records for the shape
// (issue 41: OpenAI's prompt includes the cached tokens, Anthropic's input
// excludes cache reads and writes; reasoning is a part of the output; a
// kind not reported, or reported as 0, is not counted).
func (s spendShape) tokens() map[string]float64 {
	out := map[string]float64{}
	add := func(kind string, n int) {
		if n > 0 {
			out[kind] += float64(n)
		}
	}
	switch {
	case s.status != 200:
	case s.api == "chat":
		add("input", s.prompt-max(s.cached, 0))
		add("cache_read", s.cached)
		add("output", s.completion)
		add("reasoning", s.reasoning)
	default:
		add("input", s.input)
		add("cache_read", s.read)
		add("cache_write", s.write)
		add("output", s.output)
	}
	return out
}

// cost is what the shape costs at spendPrices, and without a prompt cache
// (its cache reads and writes at the input price); priced is false for a
// model without a price.
func (s spendShape) cost() (charged, uncached float64, priced bool) {
	if _, ok := spendPrices[s.model]; !ok || s.status != 200 {
		return 0, 0, false
	}
	tk := s.tokens()
	in, out := price(s.model, "input_cost_per_token"), price(s.model, "output_cost_per_token")
	at := func(field string, whole float64) float64 {
		if v, ok := spendPrices[s.model][field].(float64); ok {
			return v
		}
		return whole
	}
	output := tk["reasoning"]*at("output_cost_per_reasoning_token", out) + (tk["output"]-tk["reasoning"])*out
	charged = tk["input"]*in + tk["cache_read"]*at("cache_read_input_token_cost", in) +
		tk["cache_write"]*at("cache_creation_input_token_cost", in) + output
	uncached = (tk["input"]+tk["cache_read"]+tk["cache_write"])*in + output
	return charged, uncached, true
}

// finish is the finished_reason and error_type the shape is recorded with
// (error_type as openaihttp reads the error body: issue 41, item 4).
func (s spendShape) finish() (reason, errorType string) {
	switch s.errorCode {
	case "rate_limit_exceeded":
		return "error", "rate_limited"
	case "context_length_exceeded":
		return "error", "context_length_exceeded"
	}
	return "stop", ""
}

// spendUpstream answers each request with the shape its X-Shape names, as
// OpenAI's and Anthropic's APIs write them.
func spendUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s, ok := spendShapes[r.Header.Get("X-Shape")]
		if !ok {
			http.Error(w, "no shape", http.StatusBadRequest)
			return
		}
		snapshot := map[string]string{"gpt-4o": "gpt-4o-2024-08-06", "claude-sonnet-4": "claude-sonnet-4-20250514"}[s.model]
		if snapshot == "" {
			snapshot = s.model
		}
		if s.status != 200 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s.status)
			fmt.Fprintf(w, `{"error":{"message":"refused: %s","type":"invalid_request_error","param":null,"code":%q}}`, s.errorCode, s.errorCode)
			return
		}
		usage := map[string]any{"prompt_tokens": s.prompt, "completion_tokens": s.completion, "total_tokens": s.prompt + s.completion}
		if s.cached >= 0 {
			usage["prompt_tokens_details"] = map[string]any{"cached_tokens": s.cached}
		}
		if s.reasoning > 0 {
			usage["completion_tokens_details"] = map[string]any{"reasoning_tokens": s.reasoning}
		}
		switch {
		case s.api == "messages":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": snapshot,
				"content": []any{map[string]any{"type": "text", "text": "ok"}}, "stop_reason": "end_turn", "stop_sequence": nil,
				"usage": map[string]any{"input_tokens": s.input, "cache_creation_input_tokens": s.write,
					"cache_read_input_tokens": s.read, "output_tokens": s.output}})
		case s.stream:
			w.Header().Set("Content-Type", "text/event-stream")
			chunk := func(v map[string]any) {
				v["id"], v["object"], v["created"], v["model"] = "chatcmpl-1", "chat.completion.chunk", 1, snapshot
				b, _ := json.Marshal(v)
				fmt.Fprintf(w, "data: %s\n\n", b)
				w.(http.Flusher).Flush()
			}
			for _, part := range []string{"Hel", "lo"} {
				chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": part}, "finish_reason": nil}}})
			}
			chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
			chunk(map[string]any{"choices": []any{}, "usage": usage})
			fmt.Fprint(w, "data: [DONE]\n\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": snapshot,
				"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"},
					"finish_reason": "stop"}}, "usage": usage})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// spendRequest is one request of the test: its deployment, its shape, and
// its dimensions' header values ("" leaves the header out).
type spendRequest struct {
	job, shape            string
	tenant, team, project string
}

// spendTraffic are the requests of one phase, in order: the fifth team is
// past the cap of 4 (its requests recorded as team _overflow), one
// request has no project (_none). Both deployments' combinations of values
// stay within the cap on combinations (twice the cap).
func spendTraffic() []spendRequest {
	var out []spendRequest
	add := func(job, shape string, n int, tenant, team, project string) {
		for range n {
			out = append(out, spendRequest{job, shape, tenant, team, project})
		}
	}
	add("spend-a", "chat", 3, "acme", "red", "p1")
	add("spend-a", "claude", 1, "acme", "red", "p1")
	add("spend-a", "limited", 1, "acme", "red", "p1")
	add("spend-a", "stream", 2, "globex", "blue", "p2")
	add("spend-a", "unpriced", 2, "globex", "blue", "p2")
	add("spend-a", "toolong", 1, "globex", "blue", "p2")
	add("spend-a", "chat", 1, "globex", "blue", "p2")
	add("spend-a", "write", 2, "initech", "green", "p3")
	add("spend-a", "stream", 1, "initech", "green", "p3")
	add("spend-a", "chat", 1, "initech", "yellow", "p3")
	add("spend-a", "chat", 1, "acme", "purple", "p1")
	add("spend-a", "stream", 1, "acme", "red", "")
	add("spend-b", "claude", 1, "acme", "red", "p1")
	add("spend-b", "chat", 1, "hooli", "black", "p4")
	add("spend-b", "unpriced", 1, "hooli", "black", "p4")
	return out
}

// recorded returns the values a request is recorded with, by dimension:
// a missing header _none, a value new past the cap of its deployment's
// proxy _overflow (seen holds each proxy's values so far, in the order
// sent); and the dimensions whose value overflowed.
func (r spendRequest) recorded(seen map[string]map[string][]string) (map[string]string, []string) {
	vals := map[string]string{}
	var over []string
	for _, d := range spendDimensions {
		v := map[string]string{"tenant": r.tenant, "team": r.team, "project": r.project}[d.name]
		key := r.job + "/" + d.name
		if seen[key] == nil {
			seen[key] = map[string][]string{}
		}
		switch {
		case v == "":
			v = "_none"
		case slices.Contains(seen[key]["kept"], v):
		case len(seen[key]["kept"]) < spendMaxValues:
			seen[key]["kept"] = append(seen[key]["kept"], v)
		default:
			v = "_overflow"
			over = append(over, d.name)
		}
		vals[d.name] = v
	}
	return vals, over
}

// send sends r to the proxy at base, and fails unless the client gets the
// shape's status.
func (r spendRequest) send(t *testing.T, base string) {
	t.Helper()
	s := spendShapes[r.shape]
	var body, path string
	if s.api == "messages" {
		path = "/v1/messages"
		body = fmt.Sprintf(`{"model":%q,"max_tokens":256,"messages":[{"role":"user","content":"hi"}]}`, s.model)
	} else {
		path = "/v1/chat/completions"
		body = fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]`, s.model)
		if s.stream {
			body += `,"stream":true,"stream_options":{"include_usage":true}`
		}
		body += "}"
	}
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Shape", r.shape)
	for _, d := range spendDimensions {
		if v := map[string]string{"tenant": r.tenant, "team": r.team, "project": r.project}[d.name]; v != "" {
			req.Header.Set(d.header, v)
		}
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != s.status || s.stream && !strings.Contains(string(b), "[DONE]") {
		t.Fatalf("%s %s through %s: %s %q, want %d", r.shape, path, base, resp.Status, b, s.status)
	}
}

// contribution is what one request adds to a family: a value per set of
// the family's own labels (kind; finished_reason and error_type;
// dimension).
type contribution struct {
	labels map[string]string
	value  float64
}

// spendFamilies are the usage families by scrape name, each with what a
// request of a shape adds to it (over: the dimensions whose value
// overflowed).
var spendFamilies = map[string]func(s spendShape, over []string) []contribution{
	"infermetrics_usage_tokens_total": func(s spendShape, _ []string) []contribution {
		var out []contribution
		for k, n := range s.tokens() {
			out = append(out, contribution{map[string]string{"kind": k}, n})
		}
		return out
	},
	"infermetrics_usage_requests_total": func(s spendShape, _ []string) []contribution {
		reason, et := s.finish()
		l := map[string]string{"finished_reason": reason}
		if et != "" {
			l["error_type"] = et
		}
		return []contribution{{l, 1}}
	},
	"infermetrics_usage_cost_total": func(s spendShape, _ []string) []contribution {
		c, _, ok := s.cost()
		if !ok {
			return nil
		}
		return []contribution{{nil, c}}
	},
	"infermetrics_usage_cost_uncached_total": func(s spendShape, _ []string) []contribution {
		_, u, ok := s.cost()
		if !ok {
			return nil
		}
		return []contribution{{nil, u}}
	},
	"infermetrics_usage_unpriced_requests_total": func(s spendShape, _ []string) []contribution {
		if _, _, ok := s.cost(); ok || s.status != 200 {
			return nil
		}
		return []contribution{{nil, 1}}
	},
	"infermetrics_attribution_overflow_total": func(_ spendShape, over []string) []contribution {
		var out []contribution
		for _, d := range over {
			out = append(out, contribution{map[string]string{"dimension": d}, 1})
		}
		return out
	},
}

// spendSent are the requests of one phase as recorded: each with its
// dimension values and the dimensions that overflowed.
type spendSent struct {
	spendRequest
	vals map[string]string
	over []string
}

// expected sums family's contributions of the requests of job, grouped by
// the labels by (a dimension, model_name, or one of the family's own),
// keyed as resultKeys keys a query's series; keep selects the
// contributions counted.
func expected(sent []spendSent, job, family string, by []string, keep func(spendSent, contribution) bool) map[string]float64 {
	out := map[string]float64{}
	for _, r := range sent {
		if r.job != job {
			continue
		}
		s := spendShapes[r.shape]
		for _, c := range spendFamilies[family](s, r.over) {
			if keep != nil && !keep(r, c) {
				continue
			}
			labels := map[string]string{}
			for _, l := range by {
				v, ok := c.labels[l]
				switch {
				case ok:
				case l == "model_name":
					v = s.model
				default:
					v = r.vals[l]
				}
				if v != "" {
					labels[l] = v
				}
			}
			out[labelKey(labels)] += c.value
		}
	}
	return out
}

// labelKey is a label set in a canonical order.
func labelKey(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(&b, "%s=%q,", k, labels[k])
	}
	return "{" + b.String() + "}"
}

// resultKeys maps a query's series by their label sets.
func resultKeys(v []series) map[string]float64 {
	out := map[string]float64{}
	for _, s := range v {
		l := maps.Clone(s.labels)
		delete(l, "__name__")
		out[labelKey(l)] = s.value
	}
	return out
}

// scale multiplies every value of m by f.
func scale(m map[string]float64, f float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = v * f
	}
	return out
}

// minus is a - b, for the keys of both.
func minus(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range a {
		if w, ok := b[k]; ok {
			out[k] = v - w
		}
	}
	return out
}

// sameResult compares a query's series with the expected ones: the same
// label sets, each value within a relative 1e-9 (float sums added in
// another order).
func sameResult(got, want map[string]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || math.Abs(g-w) > 1e-9*math.Max(math.Abs(w), 1e-12) {
			return false
		}
	}
	return true
}

// spendWindow is the window the queries run over, which turns the sums
// of a phase into what a query returns: over, an increase over the
// window; perSecond, a rate; perHour, a rate times 3600.
type spendWindow struct {
	// seconds between the window's first and last samples (S): an
	// increase over a window of S + 1 ms ending at the last one is
	// delta * (S + 0.001) / S (Prometheus extrapolates it to the window's
	// start, 1 ms before the first sample), a rate delta / S.
	seconds float64
}

func (w spendWindow) over(m map[string]float64) map[string]float64 {
	return scale(m, (w.seconds+0.001)/w.seconds)
}
func (w spendWindow) perSecond(m map[string]float64) map[string]float64 { return scale(m, 1/w.seconds) }
func (w spendWindow) perHour(m map[string]float64) map[string]float64 {
	return scale(m, 3600/w.seconds)
}

// wholeKinds are the token kinds that partition a request's tokens.
var wholeKinds = []string{"input", "cache_read", "cache_write", "output"}

// spendExpectations returns, by panel title and target, what each query
// of the spend dashboard returns for job's requests of one phase, by
// dimension d (nil: only its series' label sets, for a quantile).
func spendExpectations(sent []spendSent, job, d string, w spendWindow) map[string][]map[string]float64 {
	e := func(family string, by []string, keep func(spendSent, contribution) bool) map[string]float64 {
		return expected(sent, job, family, by, keep)
	}
	const tokens, requests, cost, uncached = "infermetrics_usage_tokens_total", "infermetrics_usage_requests_total",
		"infermetrics_usage_cost_total", "infermetrics_usage_cost_uncached_total"
	whole := func(_ spendSent, c contribution) bool { return slices.Contains(wholeKinds, c.labels["kind"]) }
	byD, byModel := []string{d}, []string{"model_name"}
	streamed := e(requests, byD, func(r spendSent, _ contribution) bool { return spendShapes[r.shape].stream })
	return map[string][]map[string]float64{
		"Cost over the range, top $top":                        {w.over(e(cost, byD, nil))},
		"Tokens over the range, top $top":                      {w.over(e(tokens, byD, whole))},
		"Spend per hour, top $top":                             {w.perHour(e(cost, byD, nil))},
		"Tokens per second, top $top":                          {w.perSecond(e(tokens, byD, whole))},
		"Spend per hour by model":                              {w.perHour(e(cost, byModel, nil))},
		"Cache savings per hour by model":                      {w.perHour(minus(e(uncached, byModel, nil), e(cost, byModel, nil)))},
		"Cost over the range":                                  {w.over(e(cost, nil, nil)), w.over(e(uncached, nil, nil)), w.over(minus(e(uncached, nil, nil), e(cost, nil, nil)))},
		"Spend per hour by $dimension and model, top $top":     {w.perHour(e(cost, []string{d, "model_name"}, nil))},
		"Cache savings per hour by $dimension, top $top":       {w.perHour(minus(e(uncached, byD, nil), e(cost, byD, nil)))},
		"Tokens by kind (tokens/s)":                            {w.perSecond(e(tokens, []string{"kind"}, nil))},
		"Requests by finish reason and error type (req/s)":     {w.perSecond(e(requests, []string{"finished_reason", "error_type"}, nil))},
		"Failed requests by $dimension and error type (req/s)": {w.perSecond(e(requests, []string{d, "error_type"}, func(_ spendSent, c contribution) bool { return c.labels["error_type"] != "" }))},
		// Ranked by cost: the values with a priced request.
		"Requests by $dimension (req/s), top $top": {w.perSecond(e(requests, byD, func(r spendSent, _ contribution) bool {
			return len(e(cost, byD, func(o spendSent, _ contribution) bool { return o.vals[d] == r.vals[d] })) > 0
		}))},
		"Request duration by $dimension (p99)":           {labelSets(e(requests, byD, nil))},
		"Time to first token by $dimension (p99)":        {labelSets(streamed)},
		"Unpriced requests by model (req/s)":             {w.perSecond(e("infermetrics_usage_unpriced_requests_total", byModel, nil))},
		"Attribution overflow by dimension (req/s)":      {w.perSecond(e("infermetrics_attribution_overflow_total", []string{"dimension"}, nil))},
		"Requests without a value of $dimension (req/s)": {w.perSecond(e(requests, byD, func(r spendSent, _ contribution) bool { return strings.HasPrefix(r.vals[d], "_") }))},
	}
}

// labelSets marks a quantile's expected series: their label sets, with
// NaN standing for any value.
func labelSets(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k := range m {
		out[k] = math.NaN()
	}
	return out
}

// sameQuantiles compares a quantile's series with the expected label
// sets: each a number within the histogram's buckets.
func sameQuantiles(got, want map[string]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k := range want {
		if g, ok := got[k]; !ok || math.IsNaN(g) || g <= 0 || math.IsInf(g, 0) {
			return false
		}
	}
	return true
}

// scrapeTime is the timestamp, in milliseconds, of the last sample
// Prometheus holds of job's usage requests.
func (e *env) scrapeTime(t *testing.T, job string) int64 {
	t.Helper()
	v := e.prom.scalar(t, fmt.Sprintf(`max(timestamp(infermetrics_usage_requests_total{job=%q}))`, job), time.Now())
	return int64(math.Round(v * 1000))
}

// settledScrape waits until Prometheus holds n usage requests of job,
// then for a later scrape of it, whose timestamp it returns: that sample
// holds every family's values of the requests (the first one showing n
// could have been taken while the last request was being recorded).
func (e *env) settledScrape(t *testing.T, job string, n int) int64 {
	t.Helper()
	e.waitValue(t, fmt.Sprintf("%s's %d requests scraped", job, n), fmt.Sprintf(`sum(infermetrics_usage_requests_total{job=%q})`, job),
		func(v float64) bool { return v == float64(n) })
	first := e.scrapeTime(t, job)
	var last int64
	poll(t, 30*time.Second, job+" scraped once more", func() (bool, string) {
		last = e.scrapeTime(t, job)
		return last > first, fmt.Sprintf("last sample at %d", last)
	})
	return last
}

// labelNames are the label names of the series of selector, as Grafana's
// label_names(selector) asks for them (/api/v1/labels with match[]).
func (e *env) labelNames(t *testing.T, selector string, at time.Time) []string {
	t.Helper()
	q := url.Values{"match[]": {selector}, "start": {promTime(at.Add(-10 * time.Minute))}, "end": {promTime(at)}}
	b, err := httpGet(e.prom.base + "/api/v1/labels?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Status string   `json:"status"`
		Data   []string `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "success" {
		t.Fatalf("/api/v1/labels: %v %s", err, b)
	}
	return r.Data
}

// dimensionExclusions are the label names the dashboard's $dimension
// regex leaves out: it is /^(?!(?:a|b|...)$).+$/, a JavaScript negative
// lookahead (Go's regexp has none), whose alternatives are names or, one
// of them, otel_scope_.*.
var dimensionExclusions = regexp.MustCompile(`^/\^\(\?!\(\?:(.+)\)\$\)\.\+\$/$`)

// offered applies $dimension's regex to label names as Grafana does.
func offered(t *testing.T, regex string, names []string) []string {
	t.Helper()
	m := dimensionExclusions.FindStringSubmatch(regex)
	if m == nil {
		t.Fatalf("$dimension's regex %q: not /^(?!(?:...)$).+$/", regex)
	}
	var out []string
	for _, n := range names {
		excluded := false
		for _, alt := range strings.Split(m[1], "|") {
			re := regexp.MustCompile("^(?:" + alt + ")$")
			excluded = excluded || re.MatchString(n)
		}
		if !excluded {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// TestSpendDashboard runs two infermetrics-proxy deployments (jobs
// spend-a and spend-b) with three attribution dimensions from request
// headers (tenant, team, project; at most 4 values each) and a price
// table, in front of an upstream that answers with usage the test chose
// (cached and reasoning tokens, Anthropic cache reads and writes, a model
// without a price, a rate limit and a context length refusal), scraped by
// Prometheus 2.42 and 3.16 loading the mixin's rules with those dimensions
// and a spend budget per tenant. It sends the same requests twice; over a
// window from a scrape after the first time to one after the second:
// every query of the spend dashboard, scoped to each deployment and broken
// down by each dimension, returns the numbers of the second time as the
// test computes them by hand from the usage sent and the price table's
// numbers (tokens by kind, cost, uncached cost, requests by finish reason
// and error type, unpriced requests, overflows, values without a value);
// $dimension offers exactly the three dimensions; the usage recording
// rules have a series per deployment, model and tenant, what caching
// saved negative where the cache writes outweigh the reads; and the
// spend budget, unpriced and overflow alerts fire for exactly the
// deployments, tenants, models and dimensions at fault.
func TestSpendDashboard(t *testing.T) {
	tl := needTools(t)
	prom3 := needPrometheus3(t)
	began := time.Now()
	mark := func(what string) { t.Logf("[%5.1fs] %s", time.Since(began).Seconds(), what) }
	work := t.TempDir()

	// The rules with the proxies' dimensions, a budget of 2 cents an hour
	// per tenant (between the tenants' spends: spendBudgetFires), every
	// for: at 1s.
	cfg := mixin.Default().WithFor("1s")
	for _, d := range spendDimensions {
		cfg.Dimensions = append(cfg.Dimensions, d.name)
	}
	cfg.SpendBudget.PerDimension = map[string]float64{"tenant": spendBudget}
	files, err := mixin.Files(cfg)
	if err != nil {
		t.Fatal(err)
	}
	board := fileData(t, files, mixin.SpendDashboardFile)
	shipped, err := os.ReadFile(filepath.Join("..", mixin.SpendDashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(shipped) != string(board) {
		t.Fatalf("%s: the dashboard depends on the rules' dimensions and budgets: it must not", mixin.SpendDashboardFile)
	}
	ruleConfig := writeRuleFiles(t, work, files)
	prices := filepath.Join(work, "prices.json")
	b, err := json.Marshal(spendPrices)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prices, b, 0o644); err != nil {
		t.Fatal(err)
	}

	ports := distinctPorts(t, 6)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	proxies := map[string]struct{ listen, metrics string }{"spend-a": {addr(2), addr(3)}, "spend-b": {addr(4), addr(5)}}
	var scrape strings.Builder
	for _, job := range slices.Sorted(maps.Keys(proxies)) {
		fmt.Fprintf(&scrape, "  - job_name: %s\n    static_configs:\n      - targets: [%q]\n", job, proxies[job].metrics)
	}
	proms := map[string]*env{
		"prometheus 2": {tools: tl, work: filepath.Join(work, "prometheus2"), promConfig: ruleConfig, scrapeConfig: scrape.String()},
		"prometheus 3": {tools: tl, work: filepath.Join(work, "prometheus3"), promConfig: ruleConfig, scrapeConfig: scrape.String(), promBin: prom3},
	}
	for i, name := range slices.Sorted(maps.Keys(proms)) {
		e := proms[name]
		if err := os.Mkdir(e.work, 0o755); err != nil {
			t.Fatal(err)
		}
		e.startPrometheus(t, ports[i])
	}
	upstream := spendUpstream(t)
	bin := buildProxy(t, work)
	for _, job := range slices.Sorted(maps.Keys(proxies)) {
		p := proxies[job]
		args := []string{bin, "-listen", p.listen, "-metrics-listen", p.metrics, "-upstream", upstream.URL,
			"-instance-id", job + "-0", "-prices", prices, "-attribute-max-values", strconv.Itoa(spendMaxValues)}
		for _, d := range spendDimensions {
			args = append(args, "-attribute", d.name+"=header:"+d.header)
		}
		proc := startProc(t, work, job, childEnv(), args...)
		waitServing(t, proc, "http://"+p.metrics+"/metrics")
	}
	mark("prometheus 2 and 3, the upstream and both proxies serving")

	// Twice the same requests: the first time makes every series, the
	// second is what the window holds.
	seen := map[string]map[string][]string{}
	var sent []spendSent
	count := map[string]int{}
	firstScrape := map[string]map[string]int64{}
	for phase := range 2 {
		sent = nil
		for _, r := range spendTraffic() {
			r.send(t, "http://"+proxies[r.job].listen)
			vals, over := r.recorded(seen)
			sent = append(sent, spendSent{r, vals, over})
			count[r.job]++
		}
		if phase == 0 {
			for name, e := range proms {
				firstScrape[name] = map[string]int64{}
				for job := range proxies {
					firstScrape[name][job] = e.settledScrape(t, job, count[job])
				}
			}
			mark("first requests scraped")
		}
	}

	var raw scopedBoard
	if err := json.Unmarshal(board, &raw); err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(proms)) {
		e := proms[name]
		t.Run(name, func(t *testing.T) {
			for _, job := range slices.Sorted(maps.Keys(proxies)) {
				last := e.settledScrape(t, job, count[job])
				at := time.UnixMilli(last)
				w := spendWindow{seconds: float64(last-firstScrape[name][job]) / 1000}
				window := fmt.Sprintf("%dms", last-firstScrape[name][job]+1)
				e.checkSpendVariables(t, raw, job, at)
				for _, d := range spendDimensions {
					e.checkSpendQueries(t, raw, sent, job, d.name, at, window, w)
				}
			}
			e.checkSpendRules(t, sent)
		})
	}
	mark("done")
}

// spendBudget is the test's budget per tenant, per hour: between the
// tenants' spends of one phase, which the rate over the budget's window
// (an hour, of which the series hold a minute) gives as their spend per
// hour.
const spendBudget = 0.02

// checkSpendVariables checks the dashboard's variables for job: $job
// lists both deployments, $dimension offers exactly the proxies'
// dimensions, $value lists job's tenants, $model_name its models.
func (e *env) checkSpendVariables(t *testing.T, b scopedBoard, job string, at time.Time) {
	t.Helper()
	vals := map[string]string{"cluster": ".*", "namespace": ".*", "job": promRegex(job), "instance": ".*", "model_name": ".*"}
	for _, v := range b.Templating.List {
		def := substitute(v.Definition, vals)
		switch v.Name {
		case "dimension":
			sel, ok := strings.CutPrefix(def, "label_names(")
			if !ok {
				t.Fatalf("$dimension: %s, want label_names(...)", v.Definition)
			}
			names := e.labelNames(t, strings.TrimSuffix(sel, ")"), at)
			want := []string{"project", "team", "tenant"}
			if got := offered(t, v.Regex, names); !slices.Equal(got, want) {
				t.Errorf("%s: $dimension offers %v of %v, want %v", job, got, names, want)
			}
		case "job", "value", "model_name":
			def = strings.ReplaceAll(def, "$dimension", "tenant")
			q, ok := labelValuesQuery(def)
			if !ok {
				t.Fatalf("$%s: %s", v.Name, v.Definition)
			}
			label := map[string]string{"value": "tenant"}[v.Name]
			if label == "" {
				label = v.Name
			}
			var got []string
			for _, s := range e.prom.mustQuery(t, q, at) {
				got = append(got, s.labels[label])
			}
			sort.Strings(got)
			want := map[string]map[string][]string{
				"job":        {"spend-a": {"spend-a", "spend-b"}, "spend-b": {"spend-a", "spend-b"}},
				"value":      {"spend-a": {"acme", "globex", "initech"}, "spend-b": {"acme", "hooli"}},
				"model_name": {"spend-a": {"claude-sonnet-4", "gpt-4o", "house-llm"}, "spend-b": {"claude-sonnet-4", "gpt-4o", "house-llm"}},
			}[v.Name][job]
			if !slices.Equal(got, want) {
				t.Errorf("%s: $%s lists %v, want %v", job, v.Name, got, want)
			}
		}
	}
}

// checkSpendQueries runs every query of the spend dashboard scoped to job
// and broken down by dimension d, its values all, the top 10, over the
// window, and compares each with what the phase's requests give.
func (e *env) checkSpendQueries(t *testing.T, b scopedBoard, sent []spendSent, job, d string, at time.Time, window string, w spendWindow) {
	t.Helper()
	vals := map[string]string{"__rate_interval": window, "__range": window, "cluster": ".*", "namespace": ".*",
		"job": promRegex(job), "instance": ".*", "model_name": ".*", "dimension": d, "value": ".*", "top": "10"}
	want := spendExpectations(sent, job, d, w)
	seen := map[string]int{}
	checked := 0
	for _, q := range b.queries() {
		title := strings.TrimPrefix(q.what, "panel ")
		i := seen[title]
		seen[title]++
		exp, ok := want[title]
		if !ok || i >= len(exp) {
			t.Errorf("%s, %s: no expectation for query %d of panel %q", job, d, i, title)
			continue
		}
		expr := substitute(q.expr, vals)
		v, err := e.dashboardQuery(expr, at)
		if err != nil {
			t.Errorf("%s, %s: %s: %v", job, d, title, err)
			continue
		}
		got := resultKeys(v)
		quantile := strings.HasPrefix(expr, "histogram_quantile(")
		if quantile && !sameQuantiles(got, exp[i]) || !quantile && !sameResult(got, exp[i]) {
			t.Errorf("%s, by %s: %s:\n%s\n= %v\nwant %v", job, d, title, expr, got, exp[i])
			continue
		}
		checked++
		if d == "tenant" {
			t.Logf("%s, by tenant: %s: %s = %v", job, title, expr, got)
		}
	}
	for title, exp := range want {
		if seen[title] != len(exp) {
			t.Errorf("%s: %d queries of panel %q, the test expects %d", job, seen[title], title, len(exp))
		}
	}
	t.Logf("%s, by %s: %d queries return the numbers sent (window %s)", job, d, checked, window)
}

// checkSpendRules checks the usage recording rules (a series per
// deployment, model and tenant that spent; what caching saved of the
// same sign as the phase's) and waits for the usage alerts: the budget
// for each deployment's tenants whose phase spend is above it, the
// unpriced model of each deployment, the overflowing dimension; exactly
// those.
func (e *env) checkSpendRules(t *testing.T, sent []spendSent) {
	t.Helper()
	t0 := time.Now()
	e.rulesEvaluatedAfter(t, "", t0)
	at := time.Now()
	type key struct{ job, model, tenant string }
	saved := map[key]float64{}
	spent := map[key]float64{}
	wantAlerts := map[string]bool{}
	budget := map[[2]string]float64{}
	for _, r := range sent {
		s := spendShapes[r.shape]
		c, u, ok := s.cost()
		if ok {
			k := key{r.job, s.model, r.vals["tenant"]}
			saved[k] += u - c
			spent[k] += c
			budget[[2]string{r.job, r.vals["tenant"]}] += c
		} else if s.status == 200 {
			wantAlerts[fmt.Sprintf("InfermetricsUnpricedRequests{job=%s, model_name=%s}", r.job, s.model)] = true
		}
		for _, d := range r.over {
			wantAlerts[fmt.Sprintf("InfermetricsAttributionOverflow{job=%s, dimension=%s}", r.job, d)] = true
		}
	}
	// The rate over the budget's hour holds the second phase, and of the
	// first what came after the series' first scrape: between once and
	// twice a phase's spend.
	for k, v := range budget {
		switch {
		case v > 1.05*spendBudget:
			wantAlerts[fmt.Sprintf("InfermetricsSpendOverBudget{job=%s, tenant=%s}", k[0], k[1])] = true
		case v > spendBudget || 2*v > 0.95*spendBudget:
			t.Fatalf("%v spends %g a phase, too near the budget %g (or half of it) for the test to tell", k, v, spendBudget)
		}
	}
	for _, rule := range []string{"model_name_tenant:infermetrics_usage_cost:rate5m", "model_name_tenant:infermetrics_usage_cost:savings_rate5m"} {
		got := map[key]float64{}
		for _, s := range e.prom.mustQuery(t, rule, at) {
			got[key{s.labels["job"], s.labels["model_name"], s.labels["tenant"]}] = s.value
		}
		want := spent
		if strings.Contains(rule, "savings") {
			want = saved
		}
		if len(got) != len(want) {
			t.Errorf("%s: %v, want a series of each of %v", rule, got, want)
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || math.Signbit(g) != math.Signbit(v) || (g == 0) != (v == 0) {
				t.Errorf("%s %v = %v, want the sign of %g", rule, k, got[k], v)
			}
		}
		t.Logf("%s: %v", rule, got)
	}
	var firing map[string]bool
	poll(t, time.Minute, "the usage alerts firing", func() (bool, string) {
		all, err := e.firingAlerts()
		if err != nil {
			return false, err.Error()
		}
		firing = map[string]bool{}
		for _, l := range all {
			switch l["alertname"] {
			case "InfermetricsUnpricedRequests":
				firing[fmt.Sprintf("%s{job=%s, model_name=%s}", l["alertname"], l["job"], l["model_name"])] = true
			case "InfermetricsAttributionOverflow":
				firing[fmt.Sprintf("%s{job=%s, dimension=%s}", l["alertname"], l["job"], l["dimension"])] = true
			case "InfermetricsSpendOverBudget":
				firing[fmt.Sprintf("%s{job=%s, tenant=%s}", l["alertname"], l["job"], l["tenant"])] = true
			}
		}
		return maps.Equal(firing, wantAlerts), fmt.Sprintf("firing %v, want %v", slices.Sorted(maps.Keys(firing)), slices.Sorted(maps.Keys(wantAlerts)))
	})
	t.Logf("firing: %v", slices.Sorted(maps.Keys(firing)))
}
