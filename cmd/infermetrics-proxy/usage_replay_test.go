package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/internal/corpus"
	"github.com/infermetrics/infermetrics/internal/sample"
	"github.com/infermetrics/infermetrics/pricing"
	"github.com/infermetrics/infermetrics/stats"
)

// realPrices is the price table of real LiteLLM entries the pricing
// package's tests read (its README names the LiteLLM commit).
const realPrices = "../../pricing/testdata/litellm_prices.json"

// replayShare is who sent corpus entry i: a tenant and a team (headers) and
// an API key, few enough values that no cap folds any.
func replayShare(i int) (tenant, team, key string) {
	return "tenant-" + strconv.Itoa(i%5), "team-" + strconv.Itoa(i%3), "sk-corpus-key-" + strconv.Itoa(i%4)
}

// kindTotals are tokens by kind (stats.TokenKind's label values) and costs.
type kindTotals struct {
	tokens             map[string]float64
	cost, uncached     float64
	unpriced, requests float64
}

// The recorded provider traffic through the proxy with three attribution
// dimensions (two headers and the API key) and a price table of real
// LiteLLM entries: for each value of each dimension, the tokens of every
// kind, the cost, what it would have cost uncached and the unpriced
// requests equal the sums computed here from each recording's JSON
// (encoding/json, not the proxy's scanner) and the price file's numbers
// (read here; the pricing package only names the entry a model matches);
// no API key, nor any 8 bytes of one, reaches /metrics or the logs.
func TestCorpusAttributedAndPriced(t *testing.T) {
	t.Parallel()
	all, err := corpus.Load()
	if err != nil {
		t.Fatal(err)
	}
	table, err := pricing.Load(realPrices)
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]map[string]any{}
	b, err := os.ReadFile(realPrices)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	var es []corpus.Entry
	for i := range all {
		e := &all[i]
		x := e.Expect
		if !e.Observed || e.Status != http.StatusOK || x.PromptTokens == nil {
			continue
		}
		u, _, err := e.Kinds()
		if err != nil {
			t.Fatalf("%s: %v", e.ID, err)
		}
		if detailAboveWhole(u, *x.PromptTokens, *x.GenerationTokens) {
			continue // a kind the proxy drops for its request: TestCorpusThroughProxy holds it
		}
		es = append(es, *e)
	}
	const salt = "replay-salt"
	up := newCorpusUpstream(t, es)
	p := startProxy(t, nil, "-upstream", up.URL, "-max-models", "8", "-attribute", "tenant=header:X-Tenant",
		"-attribute", "team=header:X-Team", "-attribute", "key=apikey", "-attribute-salt", salt, "-prices", realPrices)

	want := map[string]map[string]*kindTotals{"tenant": {}, "team": {}, "key": {}}
	add := func(dim, v string, f func(*kindTotals)) {
		if want[dim][v] == nil {
			want[dim][v] = &kindTotals{tokens: map[string]float64{}}
		}
		f(want[dim][v])
	}
	priced := 0
	var keys []string
	for i := range es {
		e := &es[i]
		tenant, team, key := replayShare(i)
		keys = append(keys, key)
		req, err := http.NewRequest(e.Method, p.url(e.Path), strings.NewReader(string(e.WithModel("replay"))))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = e.RequestHeader()
		req.Header.Set("X-Corpus-Entry", strconv.Itoa(i))
		req.Header.Set("X-Tenant", tenant)
		req.Header.Set("X-Team", team)
		req.Header.Del("Api-Key")
		req.Header.Del("X-Api-Key")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := corpusClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()

		tokens, model := entryTokens(t, e)
		cost, uncached, ok := handPrice(t, table, raw, model, tokens)
		if ok {
			priced++
		}
		for dim, v := range map[string]string{"tenant": tenant, "team": team, "key": hashOf(salt, key)} {
			add(dim, v, func(k *kindTotals) {
				k.requests++
				for kind, n := range tokens {
					k.tokens[kind] += float64(n)
				}
				if ok {
					k.cost += cost
					k.uncached += uncached
				} else {
					k.unpriced++
				}
			})
		}
	}
	t.Logf("%d recordings with usage replayed, %d of them priced by the real entries", len(es), priced)
	if priced < 10 || priced == len(es) {
		t.Fatalf("%d of %d recordings priced: want both priced and unpriced ones", priced, len(es))
	}

	var s string
	waitFor(t, func() (bool, string) {
		s = p.scrape(t)
		v, _ := value(s, "infermetrics_usage_requests_total")
		return v == float64(len(es)), fmt.Sprintf("%v usage requests, want %d", v, len(es))
	})
	for dim, values := range want {
		for v, k := range values {
			for _, kind := range stats.TokenKinds() {
				got, _ := value(s, "infermetrics_usage_tokens_total", dim, v, "kind", kind.String())
				if got != k.tokens[kind.String()] {
					t.Errorf("%s=%s: %s tokens %v, want %v", dim, v, kind, got, k.tokens[kind.String()])
				}
			}
			for _, c := range []struct {
				family string
				want   float64
			}{
				{"infermetrics_usage_cost_total", k.cost},
				{"infermetrics_usage_cost_uncached_total", k.uncached},
				{"infermetrics_usage_unpriced_requests_total", k.unpriced},
				{"infermetrics_usage_requests_total", k.requests},
			} {
				got, _ := value(s, c.family, dim, v)
				if math.Abs(got-c.want) > 1e-9*math.Max(1, c.want) {
					t.Errorf("%s=%s: %s %v, want %v", dim, v, c.family, got, c.want)
				}
			}
		}
	}
	if v, _ := value(s, "infermetrics_attribution_overflow_total"); v != 0 {
		t.Errorf("%v values folded into %s, want none", v, instrument.AttributionOverflow)
	}
	for _, key := range keys {
		for i := 0; i+8 <= len(key); i++ {
			if strings.Contains(s, key[i:i+8]) || strings.Contains(p.logs.String(), key[i:i+8]) {
				t.Fatalf("%q of an API key in /metrics or the logs", key[i:i+8])
			}
		}
	}
}

// entryTokens returns a recording's tokens by kind as the usage families
// count them (from its JSON: corpus.Entry.Kinds and Expect) and the model
// its response names, the one priced.
func entryTokens(t *testing.T, e *corpus.Entry) (map[string]int64, string) {
	t.Helper()
	u, model, err := e.Kinds()
	if err != nil {
		t.Fatalf("%s: %v", e.ID, err)
	}
	out := map[string]int64{}
	for _, k := range stats.TokenKinds() {
		if n, ok := u.Get(k); ok && n > 0 {
			out[k.String()] = n
		}
	}
	prompt, generation := *e.Expect.PromptTokens, *e.Expect.GenerationTokens
	if n := prompt - out["cache_read"] - out["cache_write"]; n > 0 {
		out["input"] = n
	}
	if generation > 0 {
		out["output"] = generation
	}
	return out, model
}

// handPrice prices tokens by kind at the raw entry the price table matches
// for the model (pricing.Table.Lookup names it): each kind at its own
// price, cache reads and writes at the input price when the entry has none
// of theirs, reasoning at the output price likewise, the rest of the output
// at the output price; uncached, cache reads and writes at the input
// price. It refuses the entries this sum does not cover (a tier above the
// prompt, an audio or image price with such tokens).
func handPrice(t *testing.T, table *pricing.Table, raw map[string]map[string]any, model string, tokens map[string]int64) (cost, uncached float64, ok bool) {
	t.Helper()
	p, ok := table.Lookup("replay", model)
	if !ok {
		return 0, 0, false
	}
	entry := raw[p.Model]
	price := func(field, or string) float64 {
		if v, ok := entry[field].(float64); ok {
			return v
		}
		if or == "" {
			t.Fatalf("entry %s has no %s", p.Model, field)
		}
		v, _ := entry[or].(float64)
		return v
	}
	prompt := tokens["input"] + tokens["cache_read"] + tokens["cache_write"]
	for field := range entry {
		if strings.Contains(field, "_above_") && strings.HasPrefix(field, "input_cost_per_token") {
			k, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(field, "input_cost_per_token_above_"), "k_tokens"))
			if prompt > int64(k)*1000 {
				t.Fatalf("entry %s: a prompt of %d above its tier %s", p.Model, prompt, field)
			}
		}
	}
	for _, kind := range []string{"input_audio", "input_image", "output_audio", "output_image"} {
		if tokens[kind] > 0 {
			t.Fatalf("entry %s: %d %s tokens, which this sum does not price", p.Model, tokens[kind], kind)
		}
	}
	in, out := price("input_cost_per_token", ""), price("output_cost_per_token", "")
	f := func(kind string) float64 { return float64(tokens[kind]) }
	outputs := f("output")*out - f("reasoning")*out + f("reasoning")*price("output_cost_per_reasoning_token", "output_cost_per_token")
	cost = f("input")*in + f("cache_read")*price("cache_read_input_token_cost", "input_cost_per_token") +
		f("cache_write")*price("cache_creation_input_token_cost", "input_cost_per_token") + outputs
	uncached = float64(prompt)*in + outputs
	return cost, uncached, true
}

// 10,000 clients each with a tenant of its own (2,000 under the race
// detector, which runs the unit tests twice; the newest-dependencies stage
// runs them without it): the tenant dimension keeps at most its cap of
// values, the rest folded into _overflow and counted, every request
// counted once.
func TestAttributionManyTenants(t *testing.T) {
	t.Parallel()
	tenants := 10000
	if sample.Race {
		tenants = 2000
	}
	p := startProxy(t, nil, "-upstream", stopUpstream(t).URL, "-attribute", "tenant=header:X-Tenant")
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				req, err := http.NewRequest(http.MethodPost, p.url("/v1/chat/completions"), strings.NewReader(`{"model":"m","messages":[]}`))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("X-Tenant", "tenant-"+strconv.Itoa(i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	for i := range tenants {
		next <- i
	}
	close(next)
	wg.Wait()
	var s string
	waitFor(t, func() (bool, string) {
		s = p.scrape(t)
		v, _ := value(s, "infermetrics_usage_requests_total")
		return v == float64(tenants), fmt.Sprintf("%v usage requests, want %d", v, tenants)
	})
	seen := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(l, "infermetrics_usage_requests_total{"); ok {
			_, v, _ := strings.Cut(rest, `tenant="`)
			v, _, _ = strings.Cut(v, `"`)
			seen[v] = true
		}
	}
	if !seen[instrument.AttributionOverflow] || len(seen) != instrument.DefaultMaxValues+1 {
		t.Errorf("%d tenant values recorded, want the cap %d and %s", len(seen), instrument.DefaultMaxValues, instrument.AttributionOverflow)
	}
	if v := mustValue(t, s, "infermetrics_attribution_overflow_total", "dimension", "tenant"); v != float64(tenants-instrument.DefaultMaxValues) {
		t.Errorf("overflow %v, want %d", v, tenants-instrument.DefaultMaxValues)
	}
	if v := mustValue(t, s, "infermetrics_usage_requests_total", "tenant", instrument.AttributionOverflow); v != float64(tenants-instrument.DefaultMaxValues) {
		t.Errorf("%v requests under %s, want %d", v, instrument.AttributionOverflow, tenants-instrument.DefaultMaxValues)
	}
}
