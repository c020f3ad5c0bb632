package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/exporters"
	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// priceFile writes a price table in LiteLLM's format and returns its path.
func priceFile(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mPrices prices model m: 1e-6 per input token, 2e-6 per output token.
const mPrices = `{"m": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6, "litellm_provider": "openai", "mode": "chat"}}`

// hashOf is an API key's value under a salt, as the proxy records it.
func hashOf(salt, key string) string {
	m := hmac.New(sha256.New, []byte(salt))
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil))[:12]
}

// -attribute, -attribute-max-values, -attribute-salt and -prices, as flags
// or variables, make the Attribution, its sources and the price table.
func TestAttributeConfig(t *testing.T) {
	first := priceFile(t, mPrices)
	second := priceFile(t, `{"m": {"input_cost_per_token": 3e-6, "output_cost_per_token": 0}}`)
	for _, c := range []struct {
		name  string
		args  []string
		env   map[string]string
		dims  []string
		max   int
		salt  bool    // generated
		input float64 // the price of one input token of m; 0: no table
	}{
		{"flags", []string{"-attribute", "tenant=header:X-Tenant", "-attribute", "u=user", "-attribute", "k = apikey",
			"-attribute-max-values", "7", "-attribute-salt", "s", "-prices", first}, nil, []string{"tenant", "u", "k"}, 7, false, 1e-6},
		{"variables", nil, map[string]string{"INFERMETRICS_PROXY_ATTRIBUTE": "tenant=header:X-Tenant,k=apikey",
			"INFERMETRICS_PROXY_PRICES": first + "," + second}, []string{"tenant", "k"}, instrument.DefaultMaxValues, true, 3e-6},
		{"no apikey, no salt", []string{"-attribute", "u=user"}, nil, []string{"u"}, instrument.DefaultMaxValues, false, 0},
		{"none", nil, nil, nil, 0, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"INFERMETRICS_PROXY_UPSTREAM": "http://x"}
			for k, v := range c.env {
				env[k] = v
			}
			var out bytes.Buffer
			cfg, err := parseConfig(c.args, func(k string) string { return env[k] }, &out)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range cfg.usage.attribution.Dimensions() {
				names = append(names, d.Name)
				if d.MaxValues != c.max {
					t.Errorf("dimension %s caps %d values, want %d", d.Name, d.MaxValues, c.max)
				}
			}
			if fmt.Sprint(names) != fmt.Sprint(c.dims) || len(cfg.usage.sources) != len(c.dims) {
				t.Errorf("dimensions %q, %d sources; want %q", names, len(cfg.usage.sources), c.dims)
			}
			if cfg.usage.saltGenerated != c.salt {
				t.Errorf("salt generated %v, want %v", cfg.usage.saltGenerated, c.salt)
			}
			var u stats.TokenUsage
			u.Set(stats.TokenInput, 1)
			cost, _ := cfg.usage.prices.Cost("m", "", u)
			if (cfg.usage.prices != nil) != (c.input != 0) || math.Abs(cost.Charged-c.input) > 1e-18 {
				t.Errorf("prices %v, an input token of m costs %v; want %v", cfg.usage.prices != nil, cost.Charged, c.input)
			}
		})
	}
}

// A value the proxy refuses is named where it was given, with the form
// wanted; a salt is never shown.
func TestAttributeConfigErrors(t *testing.T) {
	bad := priceFile(t, `{"m": {"input_cost_per_token": -1}}`)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"-attribute", "tenant"}, nil, []string{`invalid value "tenant" for flag -attribute: want NAME=header:HEADER, NAME=user or NAME=apikey`}},
		{[]string{"-attribute", "t=header:"}, nil, []string{"want NAME=header:HEADER"}},
		{[]string{"-attribute", "t=cookie"}, nil, []string{"want NAME=header:HEADER"}},
		{nil, map[string]string{"ATTRIBUTE": "a=user,b=header"}, []string{`INFERMETRICS_PROXY_ATTRIBUTE="a=user,b=header": want NAME=header:HEADER, NAME=user or NAME=apikey`}},
		{[]string{"-attribute", "model_name=user"}, nil, []string{`-attribute "model_name=user": `, `"model_name"`}},
		{[]string{"-attribute", "a=user", "-attribute", "a=apikey"}, nil, []string{`-attribute "a=user,a=apikey": `, `"a"`}},
		{nil, map[string]string{"ATTRIBUTE": "_t=user"}, []string{`INFERMETRICS_PROXY_ATTRIBUTE="_t=user": `, "not starting with '_'"}},
		{[]string{"-attribute", "a=user", "-attribute", "b=user", "-attribute", "c=user", "-attribute", "d=user", "-attribute", "e=user"},
			nil, []string{"5 attribution dimensions: want 1 to 4"}},
		{[]string{"-attribute", "t=header:Authorization"}, nil, []string{`-attribute "t=header:Authorization": `, "carries credentials", "t=apikey"}},
		{[]string{"-attribute", "t=header:x-api-key"}, nil, []string{"X-Api-Key carries credentials"}},
		{[]string{"-attribute-max-values", "0"}, nil, []string{"-attribute-max-values 0: want 1 to 10000"}},
		{nil, map[string]string{"ATTRIBUTE_MAX_VALUES": "10001"}, []string{"INFERMETRICS_PROXY_ATTRIBUTE_MAX_VALUES=10001: want 1 to 10000"}},
		{nil, map[string]string{"ATTRIBUTE_MAX_VALUES": "many"}, []string{`INFERMETRICS_PROXY_ATTRIBUTE_MAX_VALUES="many": want a whole number`}},
		{[]string{"-prices", "/nonexistent.json"}, nil, []string{`-prices "/nonexistent.json": `, "no such file"}},
		{nil, map[string]string{"PRICES": bad}, []string{`INFERMETRICS_PROXY_PRICES="` + bad + `": `, `model "m"`, "input_cost_per_token"}},
	} {
		env := map[string]string{"INFERMETRICS_PROXY_UPSTREAM": "http://x", "INFERMETRICS_PROXY_ATTRIBUTE_SALT": "secret-salt"}
		for k, v := range c.env {
			env["INFERMETRICS_PROXY_"+k] = v
		}
		var out bytes.Buffer
		_, err := parseConfig(c.args, func(k string) string { return env[k] }, &out)
		if err == nil {
			t.Errorf("%q %v: no error", c.args, c.env)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q %v: error %q, want %q", c.args, c.env, err, w)
			}
		}
		if strings.Contains(err.Error()+out.String(), "secret-salt") {
			t.Errorf("%q: the error shows the salt: %v", c.args, err)
		}
	}
}

// Through the proxy, each request is recorded on the usage families by its
// tenant (a header), user (the body's) and API key (its salted hash), and
// priced by -prices; a model without a price counts as unpriced.
func TestAttributionThroughProxy(t *testing.T) {
	const salt = "a-salt"
	up := stopUpstream(t) // usage 1 prompt, 1 completion token
	p := startProxy(t, nil, "-upstream", up.URL, "-attribute", "tenant=header:X-Tenant", "-attribute", "user=user",
		"-attribute", "key=apikey", "-attribute-salt", salt, "-prices", priceFile(t, mPrices))
	send := func(body string, header ...string) {
		req, err := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send(`{"model":"m","user":"alice","messages":[]}`, "X-Tenant", "acme", "Authorization", "Bearer sk-test-1")
	send(`{"model":"m","user":"alice","messages":[]}`, "X-Tenant", "acme", "Authorization", "Bearer sk-test-1")
	send(`{"model":"other","messages":[]}`)
	var s string
	waitFor(t, func() (bool, string) {
		s = p.scrape(t)
		v, _ := value(s, "infermetrics_usage_requests_total")
		return v == 3, fmt.Sprintf("%v usage requests, want 3", v)
	})
	who := []string{"model_name", "m", "tenant", "acme", "user", "alice", "key", hashOf(salt, "sk-test-1")}
	for kind, want := range map[string]float64{"input": 2, "output": 2} {
		if v := mustValue(t, s, "infermetrics_usage_tokens_total", append(who, "kind", kind)...); v != want {
			t.Errorf("%s tokens %v, want %v", kind, v, want)
		}
	}
	if v := mustValue(t, s, "infermetrics_usage_cost_total", who...); math.Abs(v-6e-6) > 1e-15 {
		t.Errorf("cost %v, want 6e-6 (2 input tokens at 1e-6, 2 output at 2e-6)", v)
	}
	none := []string{"model_name", "other", "tenant", "_none", "user", "_none", "key", "_none"}
	if v := mustValue(t, s, "infermetrics_usage_unpriced_requests_total", none...); v != 1 {
		t.Errorf("unpriced %v, want 1", v)
	}
	// vLLM's families keep vLLM's labels.
	if strings.Contains(grep(s, "vllm:request_success_total{"), "tenant=") {
		t.Errorf("vLLM's families carry a dimension:\n%s", grep(s, "vllm:request_success_total{"))
	}
	if strings.Contains(p.logs.String(), "no -attribute-salt") {
		t.Errorf("warned of a missing salt:\n%s", p.logs)
	}
}

// -prices looks first among the entries of -provider's prefix in LiteLLM's
// list (pricing.Table.ForProvider), here real entries: Mistral's model,
// which the list has only as mistral/mistral-small-latest, is priced in
// front of Mistral and unpriced in front of a server of no provider;
// Azure's gpt-4o-mini at Azure's price, not OpenAI's.
func TestPricesOfTheProvider(t *testing.T) {
	up := stopUpstream(t) // usage 1 prompt, 1 completion token
	for _, c := range []struct {
		provider, model string
		cost            float64 // 0: unpriced
	}{
		{"mistral_ai", "mistral-small-latest", 6e-08 + 1.8e-07},
		{"", "mistral-small-latest", 0}, // self_hosted: 127.0.0.1
		{"azure.ai.openai", "gpt-4o-mini", 1.65e-07 + 6.6e-07},
		{"openai", "gpt-4o-mini", 1.5e-07 + 6e-07},
		{"deepseek", "deepseek-chat", 2.8e-07 + 4.2e-07},
	} {
		args := []string{"-upstream", up.URL, "-prices", realPrices}
		if c.provider != "" {
			args = append(args, "-provider", c.provider)
		}
		p := startProxy(t, nil, args...)
		post(t, p.url("/v1/chat/completions"), []byte(`{"model":"`+c.model+`","messages":[]}`))
		var s string
		waitFor(t, func() (bool, string) {
			s = p.scrape(t)
			v, _ := value(s, "infermetrics_usage_requests_total")
			return v == 1, fmt.Sprintf("%v usage requests, want 1", v)
		})
		cost, _ := value(s, "infermetrics_usage_cost_total", "model_name", c.model)
		unpriced, _ := value(s, "infermetrics_usage_unpriced_requests_total", "model_name", c.model)
		if math.Abs(cost-c.cost) > 1e-18 || (unpriced == 1) != (c.cost == 0) {
			t.Errorf("-provider %q, model %s: cost %v and %v unpriced, want cost %v", c.provider, c.model, cost, unpriced, c.cost)
		}
		p.stop(t)
	}
}

// Without -attribute-salt an apikey dimension has a random salt, which the
// proxy warns of at start, without showing it.
func TestAttributionRandomSalt(t *testing.T) {
	p := startProxy(t, nil, "-upstream", stopUpstream(t).URL, "-attribute", "key=apikey")
	if !strings.Contains(p.logs.String(), "no -attribute-salt") {
		t.Errorf("no warning of the random salt:\n%s", p.logs)
	}
}

// fullUse records, on each model, every combination of values the default
// caps keep (and the one past them, with each dimension overflowed), each
// with every token kind, every finish reason with every error type it can
// carry, a cost, an unpriced request and a time to first token.
func fullUse(t *testing.T, m *models, names []string, dims int) {
	t.Helper()
	combos := [][]string{}
	switch dims {
	case 3: // 100 tenants x 2 users x 1 key: the 200 combinations of the cap
		for i := range 2 * instrument.DefaultMaxValues {
			combos = append(combos, []string{fmt.Sprintf("t%d", i%100), fmt.Sprintf("u%d", i/100), "k0"})
		}
	case 1: // 100 tenants, none and one not a label value
		for i := range instrument.DefaultMaxValues {
			combos = append(combos, []string{fmt.Sprintf("t%d", i)})
		}
		combos = append(combos, []string{""}, []string{"\xff"})
	}
	// Past the caps: new values of each dimension, then a combination.
	over := make([][]string, 0, 3*instrument.DefaultMaxValues)
	for d := range dims {
		for i := range instrument.DefaultMaxValues + 1 {
			v := []string{"t0", "u0", "k0"}[:dims]
			v[d] = fmt.Sprintf("new%d", i)
			over = append(over, v)
		}
	}
	if dims == 3 {
		over = append(over, []string{"t0", "u0", "new0"}) // within each cap, past the combinations'
	}
	full := func(values []string) []stats.ObservedRequest {
		var rs []stats.ObservedRequest
		for _, reason := range stats.FinishReasons() {
			types := []stats.ErrorType{stats.ErrorNone}
			if reason == stats.FinishAbort || reason == stats.FinishError {
				types = append(types, stats.ErrorTypes()...)
			}
			for _, et := range types {
				r := stats.ObservedRequest{Reason: reason, ErrorType: et, E2ELatency: 1, FirstToken: true, TimeToFirstToken: 0.5,
					TimeToLastToken: 1, UsageKnown: true, PromptTokens: 100, CachedPromptTokens: 10, GenerationTokens: 50,
					Attribution: values}
				for _, k := range []stats.TokenKind{stats.TokenCacheRead, stats.TokenCacheWrite, stats.TokenReasoning,
					stats.TokenInputAudio, stats.TokenInputImage, stats.TokenOutputAudio, stats.TokenOutputImage} {
					r.Details.Set(k, 10)
				}
				if len(rs) == 0 {
					r.Cost = stats.Cost{Known: true, Charged: 0.001, Uncached: 0.002}
				}
				rs = append(rs, r)
			}
		}
		return rs
	}
	for _, name := range names {
		e := m.engine(name)
		for _, vs := range append(combos, over...) {
			for _, r := range full(vs) {
				e.RecordRequest(context.Background(), &r)
			}
		}
	}
}

// At the default caps, fully used on every model (-max-models and the
// overflow model), no usage family loses a series to the SDK's overflow
// series: the proxy raises the cardinality limit per stream to what they
// need. The series each costs per model are counted here, for docs/proxy.md:
// per combination of values, 9 token kinds, 32 finish reason and error
// type pairs, cost, uncached cost, unpriced, and the duration (14 bounds:
// 17 series with +Inf, sum and count) and TTFT (16 bounds: 19) histograms.
func TestUsageCardinality(t *testing.T) {
	for _, c := range []struct {
		dims   int
		args   []string
		combos int // at full use
	}{
		{3, []string{"-attribute", "tenant=header:X-Tenant", "-attribute", "user=user", "-attribute", "key=apikey"},
			2*instrument.DefaultMaxValues + 1},
		{1, []string{"-attribute", "tenant=header:X-Tenant"}, instrument.DefaultMaxValues + 3}, // and _none, _invalid, _overflow
	} {
		t.Run(fmt.Sprintf("%d dimensions", c.dims), func(t *testing.T) {
			env := map[string]string{"INFERMETRICS_PROXY_UPSTREAM": "http://x"}
			args := append(c.args, "-max-models", "2", "-attribute-salt", "s", "-prices", priceFile(t, mPrices))
			cfg, err := parseConfig(args, func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if n := cfg.cardinalityLimit(); n <= exporters.DefaultCardinalityLimit {
				t.Fatalf("cardinality limit %d, the SDK's default", n)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			provider, m, err := newRecording(t.Context(), cfg, func(err error) { t.Error(err) }, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
			fullUse(t, m, []string{"default", "m1", "m2"}, c.dims) // m2: past -max-models, the overflow model
			w := httptest.NewRecorder()
			provider.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			s := w.Body.String()
			if strings.Contains(s, "otel_metric_overflow") {
				t.Fatalf("series in the SDK's overflow series:\n%s", grep(s, "otel_metric_overflow"))
			}
			perCombination := map[string]int{
				"infermetrics_usage_tokens_total{":                stats.NumTokenKinds,
				"infermetrics_usage_requests_total{":              3 + stats.NumErrorTypes + stats.NumErrorTypes - 1,
				"infermetrics_usage_cost_total{":                  1,
				"infermetrics_usage_cost_uncached_total{":         1,
				"infermetrics_usage_unpriced_requests_total{":     1,
				"infermetrics_usage_request_duration_seconds_":    14 + 3,
				"infermetrics_usage_time_to_first_token_seconds_": 16 + 3,
				"infermetrics_attribution_overflow_total{":        0,
			}
			total := 0
			for _, model := range []string{"default", "m1", OverflowModel} {
				total = 0
				for prefix, n := range perCombination {
					got := 0
					for _, line := range strings.Split(s, "\n") {
						if strings.HasPrefix(line, prefix) && strings.Contains(line, `model_name="`+model+`"`) {
							got++
						}
					}
					want := n * c.combos
					if n == 0 { // one per dimension, and the combinations' with 3
						want = c.dims
						if c.dims > 1 {
							want++
						}
					}
					if got != want {
						t.Errorf("model %s: %d series of %s, want %d", model, got, prefix, want)
					}
					total += got
				}
			}
			t.Logf("%d dimensions at the default caps: %d series per model (%d combinations)", c.dims, total, c.combos)
		})
	}
}
