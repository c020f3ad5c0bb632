package pricing

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// The prices of testdata/litellm_prices.json (BerriAI/litellm @
// 00035b69f416be24e2e323c13198d9b7d2d1bdf9), written again by hand so that
// a test compares the parser with the file, not with itself.
const realFile = "testdata/litellm_prices.json"

func loadReal(t testing.TB) *Table {
	t.Helper()
	tab, err := Load(realFile)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func parse(t testing.TB, doc string) *Table {
	t.Helper()
	tab, err := Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// near reports whether got is want within a relative 1e-12: float64 sums
// of a few products, against the exact decimal computed by hand.
func near(got, want float64) bool {
	return math.Abs(got-want) <= 1e-12*math.Abs(want)
}

func checkCost(t *testing.T, what string, got stats.Cost, ok bool, charged, uncached float64) {
	t.Helper()
	if !ok || !got.Known {
		t.Errorf("%s: not priced (%+v, %v)", what, got, ok)
		return
	}
	if !near(got.Charged, charged) || !near(got.Uncached, uncached) {
		t.Errorf("%s: Charged %.12g Uncached %.12g, want %.12g and %.12g", what, got.Charged, got.Uncached, charged, uncached)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// usage builds a TokenUsage from kind=count pairs.
func usage(kv ...any) stats.TokenUsage {
	var u stats.TokenUsage
	for i := 0; i < len(kv); i += 2 {
		u.Set(kv[i].(stats.TokenKind), int64(kv[i+1].(int)))
	}
	return u
}

func TestParseRealEntries(t *testing.T) {
	tab := loadReal(t)
	// 23 entries: sample_spec and the per-pixel dall-e-2 have no token price.
	if tab.Len() != 21 {
		t.Errorf("Len() = %d, want 21", tab.Len())
	}
	for _, skipped := range []string{"sample_spec", "1024-x-1024/dall-e-2"} {
		if p, ok := tab.Lookup(skipped, ""); ok {
			t.Errorf("%s priced: %+v", skipped, p)
		}
	}
	want := map[string]map[stats.TokenKind]float64{
		"gpt-4o":            {stats.TokenInput: 2.5e-06, stats.TokenCacheRead: 1.25e-06, stats.TokenOutput: 1e-05},
		"gpt-4o-2024-05-13": {stats.TokenInput: 5e-06, stats.TokenOutput: 1.5e-05},
		"gemini/gemini-2.5-flash-preview-09-2025": {stats.TokenInput: 3e-07, stats.TokenCacheRead: 7.5e-08,
			stats.TokenInputAudio: 1e-06, stats.TokenOutput: 2.5e-06, stats.TokenReasoning: 2.5e-06},
		"gpt-4o-audio-preview": {stats.TokenInput: 2.5e-06, stats.TokenInputAudio: 4e-05,
			stats.TokenOutput: 1e-05, stats.TokenOutputAudio: 8e-05},
		// mode image_generation, but priced per token: priced.
		"gpt-image-1.5": {stats.TokenInput: 5e-06, stats.TokenCacheRead: 1.25e-06, stats.TokenInputImage: 8e-06,
			stats.TokenOutput: 1e-05, stats.TokenOutputImage: 3.2e-05},
		"bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0": {stats.TokenInput: 8e-07, stats.TokenCacheRead: 8e-08,
			stats.TokenCacheWrite: 1e-06, stats.TokenOutput: 4e-06},
		// The cache read price under DeepSeek's name alone, and under both.
		"deepseek/deepseek-v3.2": {stats.TokenInput: 2.8e-07, stats.TokenCacheRead: 2.8e-08, stats.TokenOutput: 4e-07},
		"deepseek/deepseek-chat": {stats.TokenInput: 2.8e-07, stats.TokenCacheRead: 2.8e-08, stats.TokenCacheWrite: 0,
			stats.TokenOutput: 4.2e-07},
	}
	for model, rates := range want {
		p, ok := tab.Lookup(model, "")
		if !ok || p.Model != model {
			t.Errorf("%s: Lookup = %q, %v", model, p.Model, ok)
			continue
		}
		var w Rates
		for k, v := range rates {
			w.Set(k, v)
		}
		if p.Rates != w {
			t.Errorf("%s: rates %+v, want %+v", model, p.Rates, w)
		}
		if len(p.Tiers) != 0 {
			t.Errorf("%s: tiers %+v, want none", model, p.Tiers)
		}
	}
	// Tiers, and the service tier's _above_ keys that are none.
	tiers := map[string][]Tier{
		"gemini/gemini-2.5-pro": {{Above: 200000, Rates: rates(stats.TokenInput, 2.5e-06, stats.TokenCacheRead, 2.5e-07, stats.TokenOutput, 1.5e-05)}},
		"claude-sonnet-4-20250514": {{Above: 200000, Rates: rates(stats.TokenInput, 6e-06, stats.TokenCacheRead, 6e-07,
			stats.TokenCacheWrite, 7.5e-06, stats.TokenOutput, 2.25e-05)}},
		"claude-sonnet-4-5": {{Above: 200000, Rates: rates(stats.TokenInput, 6e-06, stats.TokenCacheRead, 6e-07,
			stats.TokenCacheWrite, 7.5e-06, stats.TokenOutput, 2.25e-05)}},
		"azure/gpt-5.4": {{Above: 272000, Rates: rates(stats.TokenInput, 5e-06, stats.TokenCacheRead, 5e-07, stats.TokenOutput, 2.25e-05)}},
	}
	base := map[string]Rates{
		"claude-sonnet-4-20250514": rates(stats.TokenInput, 3e-06, stats.TokenCacheRead, 3e-07,
			stats.TokenCacheWrite, 3.75e-06, stats.TokenOutput, 1.5e-05),
		"claude-sonnet-4-5": rates(stats.TokenInput, 3e-06, stats.TokenCacheRead, 3e-07,
			stats.TokenCacheWrite, 3.75e-06, stats.TokenOutput, 1.5e-05),
		"gemini/gemini-2.5-pro": rates(stats.TokenInput, 1.25e-06, stats.TokenCacheRead, 1.25e-07, stats.TokenOutput, 1e-05),
		"azure/gpt-5.4":         rates(stats.TokenInput, 2.5e-06, stats.TokenCacheRead, 2.5e-07, stats.TokenOutput, 1.5e-05),
	}
	for model, want := range tiers {
		p, _ := tab.Lookup(model, "")
		if p.Rates != base[model] {
			t.Errorf("%s: rates %+v, want %+v", model, p.Rates, base[model])
		}
		if len(p.Tiers) != len(want) || p.Tiers[0] != want[0] {
			t.Errorf("%s: tiers %+v, want %+v", model, p.Tiers, want)
		}
	}
}

func rates(kv ...any) Rates {
	var r Rates
	for i := 0; i < len(kv); i += 2 {
		r.Set(kv[i].(stats.TokenKind), kv[i+1].(float64))
	}
	return r
}

// TestCostRules holds each pricing rule of the package doc, on real entries
// where one shows it and on made-up ones where none does.
func TestCostRules(t *testing.T) {
	const same = -1 // Uncached: the same as Charged (no cache price differs)
	tab := loadReal(t)
	made := parse(t, `{
		"only-input": {"input_cost_per_token": 1e-06},
		"two-tiers": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06,
			"output_cost_per_reasoning_token": 3e-06,
			"input_cost_per_token_above_128k_tokens": 4e-06,
			"output_cost_per_token_above_128k_tokens": 5e-06,
			"input_cost_per_token_above_200000_tokens": 6e-06,
			"cache_read_input_token_cost_above_200000_tokens": 7e-07},
		"orphan-tier": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06,
			"output_cost_per_token_above_100_tokens": 9e-06},
		"reasoning": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06,
			"output_cost_per_reasoning_token": 5e-06, "output_cost_per_audio_token": 7e-06},
		"dear": {"input_cost_per_token": 1, "output_cost_per_token": 1},
		"free-above": {"input_cost_per_token": 1e-18, "output_cost_per_token": 0, "input_cost_per_token_above_1k_tokens": 0}
	}`)
	for _, c := range []struct {
		name              string
		tab               *Table
		model             string
		u                 stats.TokenUsage
		charged, uncached float64
	}{
		// An entry without a cache read price (LiteLLM's gpt-4o-2024-05-13):
		// cache reads at the input price, Charged = Uncached.
		{"no cache read price", tab, "gpt-4o-2024-05-13",
			usage(stats.TokenInput, 100, stats.TokenCacheRead, 1000, stats.TokenOutput, 10),
			1100*5e-06 + 10*1.5e-05, same},
		// Without a cache write price (gpt-4o): at the input price.
		{"no cache write price", tab, "gpt-4o",
			usage(stats.TokenInput, 100, stats.TokenCacheRead, 1000, stats.TokenCacheWrite, 50, stats.TokenOutput, 10),
			150*2.5e-06 + 1000*1.25e-06 + 10*1e-05, 1150*2.5e-06 + 10*1e-05},
		// Reasoning without its price (o3-mini): at the output price.
		{"no reasoning price", tab, "o3-mini",
			usage(stats.TokenInput, 11, stats.TokenOutput, 809, stats.TokenReasoning, 768),
			11*1.1e-06 + 809*4.4e-06, same},
		// Reasoning and output audio with their own prices, out of the output.
		{"reasoning and audio priced apart", made, "reasoning",
			usage(stats.TokenInput, 10, stats.TokenOutput, 100, stats.TokenReasoning, 60, stats.TokenOutputAudio, 30),
			10*1e-06 + 60*5e-06 + 30*7e-06 + 10*2e-06, same},
		// Parts above their whole: each at most what the others left.
		{"parts never counted twice", made, "reasoning",
			usage(stats.TokenOutput, 100, stats.TokenReasoning, 80, stats.TokenOutputAudio, 50),
			80*5e-06 + 20*7e-06, same},
		// Audio in and out at their prices (gpt-4o-audio-preview).
		{"audio", tab, "gpt-4o-audio-preview",
			usage(stats.TokenInput, 300, stats.TokenInputAudio, 200, stats.TokenOutput, 50, stats.TokenOutputAudio, 40),
			100*2.5e-06 + 200*4e-05 + 10*1e-05 + 40*8e-05, same},
		// Input audio out of the uncached input only (gemini flash: 1e-6 an
		// audio token), the cached ones at the cache read price.
		{"input audio capped by the uncached input", tab, "gemini/gemini-2.5-flash-preview-09-2025",
			usage(stats.TokenInput, 100, stats.TokenCacheRead, 400, stats.TokenInputAudio, 300, stats.TokenOutput, 10,
				stats.TokenReasoning, 4),
			100*1e-06 + 400*7.5e-08 + 10*2.5e-06, 100*1e-06 + 400*3e-07 + 10*2.5e-06},
		// Images (gpt-image-1.5) at their prices; an image part of a model
		// without an image price (gpt-4o) at the input price.
		{"image", tab, "gpt-image-1.5",
			usage(stats.TokenInput, 100, stats.TokenInputImage, 60, stats.TokenOutput, 1000, stats.TokenOutputImage, 1000),
			40*5e-06 + 60*8e-06 + 1000*3.2e-05, same},
		{"image without its price", tab, "gpt-4o",
			usage(stats.TokenInput, 100, stats.TokenInputImage, 60, stats.TokenOutput, 10),
			100*2.5e-06 + 10*1e-05, same},
		// An entry without an output price prices output at 0.
		{"no output price", made, "only-input", usage(stats.TokenInput, 100, stats.TokenOutput, 100), 100 * 1e-06, same},
		// Kinds not reported, or reported below zero, count nothing.
		{"nothing reported", tab, "gpt-4o", stats.TokenUsage{}, 0, 0},
		{"negative counts", tab, "gpt-4o", usage(stats.TokenInput, -5, stats.TokenCacheRead, -1, stats.TokenOutput, 10), 10 * 1e-05, same},
		// Tiers: strictly above the threshold, the whole prompt counted.
		{"at the threshold", tab, "gemini/gemini-2.5-pro",
			usage(stats.TokenInput, 100000, stats.TokenCacheRead, 100000, stats.TokenOutput, 1000),
			100000*1.25e-06 + 100000*1.25e-07 + 1000*1e-05, 200000*1.25e-06 + 1000*1e-05},
		// gemini-2.5-pro has no cache write price: at the tier's input price.
		{"above the threshold", tab, "gemini/gemini-2.5-pro",
			usage(stats.TokenInput, 100000, stats.TokenCacheRead, 100000, stats.TokenCacheWrite, 1, stats.TokenOutput, 1000),
			100001*2.5e-06 + 100000*2.5e-07 + 1000*1.5e-05, 200001*2.5e-06 + 1000*1.5e-05},
		{"cache reads take the prompt above", tab, "claude-sonnet-4-5",
			usage(stats.TokenInput, 1000, stats.TokenCacheRead, 199001, stats.TokenCacheWrite, 100, stats.TokenOutput, 10),
			1000*6e-06 + 199001*6e-07 + 100*7.5e-06 + 10*2.25e-05, 200101*6e-06 + 10*2.25e-05},
		{"272k tier", tab, "azure/gpt-5.4",
			usage(stats.TokenInput, 272001, stats.TokenOutput, 1),
			272001*5e-06 + 2.25e-05, same},
		// Two tiers: the highest that applies, alone; a price the tier lacks
		// is the base price, not the lower tier's; reasoning keeps its own.
		{"lower tier", made, "two-tiers",
			usage(stats.TokenInput, 150000, stats.TokenCacheRead, 10, stats.TokenOutput, 10, stats.TokenReasoning, 5),
			150010*4e-06 + 5*5e-06 + 5*3e-06, same},
		{"higher tier", made, "two-tiers",
			usage(stats.TokenInput, 200000, stats.TokenCacheRead, 10, stats.TokenOutput, 10),
			200000*6e-06 + 10*7e-07 + 10*2e-06, 200010*6e-06 + 10*2e-06},
		// A tier's price without the tier's input price is no tier.
		{"orphan tier", made, "orphan-tier", usage(stats.TokenInput, 1000, stats.TokenOutput, 10), 1000*1e-06 + 10*2e-06, same},
		// A cost above stats.MaxCost is returned as stats.MaxCost.
		{"clamped", made, "dear", usage(stats.TokenInput, 1_500_000, stats.TokenCacheRead, 1, stats.TokenOutput, 10), stats.MaxCost, same},
		// The prompt's count saturates: above every tier, never wrapped below.
		{"saturated prompt", made, "free-above", usage(stats.TokenInput, math.MaxInt64, stats.TokenCacheRead, math.MaxInt64, stats.TokenCacheWrite, 5), 0, same},
		{"clamped without overflow", made, "dear", usage(stats.TokenInput, math.MaxInt64, stats.TokenCacheRead, math.MaxInt64, stats.TokenOutput, math.MaxInt64), stats.MaxCost, same},
	} {
		if c.uncached == same {
			c.uncached = c.charged
		}
		got, ok := c.tab.Cost(c.model, "", c.u)
		checkCost(t, c.name, got, ok, c.charged, c.uncached)
	}
}

// TestHandMadePrice holds that a Price built by hand, with prices no
// Table accepts, still gives a cost that stats accepts.
func TestHandMadePrice(t *testing.T) {
	u := usage(stats.TokenInput, 10, stats.TokenOutput, 10)
	for _, v := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		var p Price
		p.Rates.Set(stats.TokenInput, v)
		c := p.Cost(u)
		if err := c.Validate(); err != nil || !c.Known {
			t.Errorf("input price %g: %+v, %v", v, c, err)
		}
	}
}

func TestRate(t *testing.T) {
	p, _ := loadReal(t).Lookup("gemini/gemini-2.5-pro", "")
	for _, c := range []struct {
		k      stats.TokenKind
		prompt int64
		want   float64
	}{
		{stats.TokenInput, 200000, 1.25e-06},
		{stats.TokenInput, 200001, 2.5e-06},
		{stats.TokenCacheRead, 1, 1.25e-07},
		{stats.TokenCacheWrite, 1, 1.25e-06},     // the input price
		{stats.TokenCacheWrite, 300000, 2.5e-06}, // the tier's input price
		{stats.TokenReasoning, 300000, 1.5e-05},  // the tier's output price
		{stats.TokenOutputImage, 100, 1e-05},     // the output price
		{stats.TokenKind(200), 100, 0},           // no such kind
	} {
		if got := p.Rate(c.k, c.prompt); got != c.want {
			t.Errorf("Rate(%v, %d) = %g, want %g", c.k, c.prompt, got, c.want)
		}
	}
}

// TestLookupCopies holds that a Price from Lookup cannot change the table.
func TestLookupCopies(t *testing.T) {
	tab := loadReal(t)
	p, _ := tab.Lookup("claude-sonnet-4-5", "")
	p.Tiers[0].Rates.Set(stats.TokenInput, 1)
	q, _ := tab.Lookup("claude-sonnet-4-5", "")
	if v, _ := q.Tiers[0].Rates.Get(stats.TokenInput); v != 6e-06 {
		t.Errorf("the table's tier changed to %g", v)
	}
}

func TestNilTable(t *testing.T) {
	var tab *Table
	if c, ok := tab.Cost("gpt-4o", "", usage(stats.TokenInput, 1)); ok || c != (stats.Cost{}) {
		t.Errorf("nil Table priced: %+v", c)
	}
	if _, ok := tab.Lookup("gpt-4o", ""); ok || tab.Len() != 0 {
		t.Error("nil Table has prices")
	}
}

func TestParseAccepts(t *testing.T) {
	tab := parse(t, `{
		"string-price": {"input_cost_per_token": " 3e-7 ", "output_cost_per_token": "1E-06"},
		"null-prices": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06, "cache_read_input_token_cost": null,
			"input_cost_per_token_above_200k_tokens": null},
		"zero": {"input_cost_per_token": 0, "output_cost_per_token": 0.0},
		"tiny": {"input_cost_per_token": 1e-400, "output_cost_per_token": 1},
		"odd-fields": {"input_cost_per_token": 1e-06, "max_tokens": "many", "mode": 7, "output_cost_per_pixel": -1,
			"input_cost_per_token_above_1hr_tokens": 5, "input_cost_per_token_above_200k_tokens_priority": -1,
			"cache_creation_input_token_cost_above_1hr_above_200k_tokens": 2},
		"no-token-price": {"input_cost_per_pixel": -1, "output_cost_per_image": "free", "cache_read_input_token_cost": -1},
		"all-null": {"input_cost_per_token": null, "output_cost_per_token": null},
		"sample_spec": {"input_cost_per_token": 0.0, "max_tokens": "LEGACY parameter"},
		"": {"input_cost_per_token": 1e-06},
		"cache-hit": {"input_cost_per_token": 1.4e-07, "input_cost_per_token_cache_hit": 1.4e-08, "output_cost_per_token": 2.8e-07},
		"cache-hit-and-read": {"input_cost_per_token": 1e-06, "input_cost_per_token_cache_hit": 3e-07, "cache_read_input_token_cost": 2e-07},
		"cache-hit-null": {"input_cost_per_token": 1e-06, "input_cost_per_token_cache_hit": null}
	}`)
	for model, want := range map[string]Rates{
		"string-price": rates(stats.TokenInput, 3e-07, stats.TokenOutput, 1e-06),
		"null-prices":  rates(stats.TokenInput, 1e-06, stats.TokenOutput, 2e-06),
		"zero":         rates(stats.TokenInput, 0.0, stats.TokenOutput, 0.0),
		"tiny":         rates(stats.TokenInput, 0.0, stats.TokenOutput, 1.0),
		"odd-fields":   rates(stats.TokenInput, 1e-06),
		// DeepSeek's name of the cache read price, where the entry has not
		// cache_read_input_token_cost's.
		"cache-hit":          rates(stats.TokenInput, 1.4e-07, stats.TokenCacheRead, 1.4e-08, stats.TokenOutput, 2.8e-07),
		"cache-hit-and-read": rates(stats.TokenInput, 1e-06, stats.TokenCacheRead, 2e-07),
		"cache-hit-null":     rates(stats.TokenInput, 1e-06),
	} {
		p, ok := tab.Lookup(model, "")
		if !ok || p.Rates != want || len(p.Tiers) != 0 {
			t.Errorf("%s: %+v, %v; want %+v without tiers", model, p, ok, want)
		}
	}
	if tab.Len() != 8 {
		t.Errorf("Len() = %d, want 8 (no-token-price, all-null, sample_spec and \"\" skipped)", tab.Len())
	}
	if p, ok := parse(t, manyTiers(maxTiers)).Lookup("m", ""); !ok || len(p.Tiers) != maxTiers {
		t.Errorf("a model of %d tiers: %d tiers, %v", maxTiers, len(p.Tiers), ok)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		doc, model, field string
		want              error
	}{
		{`{"m": {"input_cost_per_token": -1e-06}}`, "m", "input_cost_per_token", stats.ErrNegative},
		{`{"m": {"input_cost_per_token": 1e-06, "output_cost_per_token": 1e400}}`, "m", "output_cost_per_token", stats.ErrNotFinite},
		{`{"m": {"input_cost_per_token": "NaN"}}`, "m", "input_cost_per_token", stats.ErrNotFinite},
		{`{"m": {"input_cost_per_token": "-Inf"}}`, "m", "input_cost_per_token", stats.ErrNotFinite},
		{`{"m": {"input_cost_per_token": 1.5}}`, "m", "input_cost_per_token", stats.ErrOutOfRange},
		{`{"m": {"input_cost_per_token": "3 dollars"}}`, "m", "input_cost_per_token", ErrNotNumber},
		{`{"m": {"input_cost_per_token": true}}`, "m", "input_cost_per_token", ErrNotNumber},
		{`{"m": {"input_cost_per_token": {"usd": 1}}}`, "m", "input_cost_per_token", ErrNotNumber},
		{`{"m": {"input_cost_per_token": [1]}}`, "m", "input_cost_per_token", ErrNotNumber},
		{`{"ok": {"input_cost_per_token": 1e-06}, "m": {"input_cost_per_token": 1e-06, "cache_read_input_token_cost": -0.1}}`,
			"m", "cache_read_input_token_cost", stats.ErrNegative},
		{`{"m": {"input_cost_per_token": 1e-06, "output_cost_per_reasoning_token": 2}}`, "m", "output_cost_per_reasoning_token", stats.ErrOutOfRange},
		{`{"m": {"input_cost_per_token": 1e-06, "input_cost_per_token_cache_hit": "free"}}`, "m", "input_cost_per_token_cache_hit", ErrNotNumber},
		{`{"m": {"input_cost_per_token": 1e-06, "input_cost_per_token_above_200k_tokens": -1}}`, "m", "input_cost_per_token_above_200k_tokens", stats.ErrNegative},
		{`{"m": {"input_cost_per_token": 1e-06, "input_cost_per_token_above_200k_tokens": 2e-06, "cache_read_input_token_cost_above_200k_tokens": "x"}}`,
			"m", "cache_read_input_token_cost_above_200k_tokens", ErrNotNumber},
		{`{"m": {"input_cost_per_token": 1e-06, "input_cost_per_token_above_200k_tokens": 2e-06, "input_cost_per_token_above_200000_tokens": 3e-06}}`,
			"m", "", stats.ErrOutOfRange},
		{manyTiers(maxTiers + 1), "m", "", stats.ErrOutOfRange},
		{`{"m": 5}`, "m", "(entry)", nil},
		{`{"m": [1e-06]}`, "m", "(entry)", nil},
	} {
		tab, err := Parse(strings.NewReader(c.doc))
		var e *EntryError
		if tab != nil || !errors.As(err, &e) || e.Model != c.model || (c.field != "" && e.Field != c.field) ||
			(c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: %v, %v; want an EntryError for %s %s matching %v", c.doc, tab, err, c.model, c.field, c.want)
			continue
		}
		if !strings.Contains(err.Error(), `model "`+c.model+`"`) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %q names neither the model nor the field", c.doc, err)
		}
	}
	for _, doc := range []string{``, `[]`, `"gpt-4o"`, `{"m": {"input_cost_per_token": 1e-06}`, `null x`, `null`} {
		if tab, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%q: %v, want an error", doc, tab)
		}
	}
}

// manyTiers is a price file whose model m has n tiers.
func manyTiers(n int) string {
	var b strings.Builder
	b.WriteString(`{"m": {"input_cost_per_token": 1e-06`)
	for i := range n {
		fmt.Fprintf(&b, `, "input_cost_per_token_above_%dk_tokens": 2e-06`, i+1)
	}
	b.WriteString("}}")
	return b.String()
}

// TestParseFirstError holds that of several bad models the error names the
// first by name, every time (Go's map order changes from run to run).
func TestParseFirstError(t *testing.T) {
	doc := `{"d": {"input_cost_per_token": -1}, "b": {"input_cost_per_token": -1}, "c": {"input_cost_per_token": 2},
		"a": {"input_cost_per_token": 1e-06, "input_cost_per_token_above_2k_tokens": 2e-06, "input_cost_per_token_above_2000_tokens": 3e-06}}`
	for range 20 {
		var e *EntryError
		if _, err := Parse(strings.NewReader(doc)); !errors.As(err, &e) || e.Model != "a" || e.Field != "input_cost_per_token_above_2k_tokens" {
			t.Fatalf("%v, want model a's second tier, input_cost_per_token_above_2k_tokens", err)
		}
	}
}

func TestParseRefusesLargeFile(t *testing.T) {
	if maxFileSize != MaxFileSize {
		t.Fatalf("maxFileSize %d, want MaxFileSize", maxFileSize)
	}
	defer func(n int) { maxFileSize = n }(maxFileSize)
	maxFileSize = 1 << 10
	doc := `{"m": {"input_cost_per_token": 1e-06}}`
	doc += strings.Repeat(" ", maxFileSize-len(doc))
	if _, err := Parse(strings.NewReader(doc)); err != nil {
		t.Errorf("a file of maxFileSize bytes: %v", err)
	}
	if _, err := Parse(strings.NewReader(doc + " ")); err == nil || !strings.Contains(err.Error(), "more than 1024 bytes") {
		t.Errorf("a file of one byte more: %v, want refused for its size", err)
	}
}

func TestLoadOverridesWholeEntries(t *testing.T) {
	dir := t.TempDir()
	override := filepath.Join(dir, "contract.json")
	if err := os.WriteFile(override, []byte(`{
		"gpt-4o": {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06},
		"gpt-4o-mini": {"mode": "chat", "max_tokens": 16384},
		"my-llama-70b": {"input_cost_per_token": 2e-07, "output_cost_per_token": 4e-07}
	}`), 0o600); err != nil {
		t.Fatal(err)
	}
	u := usage(stats.TokenInput, 100, stats.TokenCacheRead, 1000, stats.TokenOutput, 10)
	tab, err := Load(realFile, override)
	if err != nil {
		t.Fatal(err)
	}
	// The whole entry replaced: the list's cache read price (1.25e-6) is
	// gone with it, cache reads at the contract's input price.
	c, ok := tab.Cost("gpt-4o", "", u)
	checkCost(t, "gpt-4o overridden", c, ok, 1100*2e-06+10*8e-06, 1100*2e-06+10*8e-06)
	// A dated snapshot of the list stays the list's own.
	c, ok = tab.Cost("gpt-4o", "gpt-4o-2024-08-06", u)
	checkCost(t, "gpt-4o-2024-08-06 kept", c, ok, 100*2.5e-06+1000*1.25e-06+10*1e-05, 1100*2.5e-06+10*1e-05)
	// An override entry without a token price takes no price away.
	c, ok = tab.Cost("gpt-4o-mini", "", u)
	checkCost(t, "gpt-4o-mini kept", c, ok, 100*1.5e-07+1000*7.5e-08+10*6e-07, 1100*1.5e-07+10*6e-07)
	c, ok = tab.Cost("my-llama-70b", "", u)
	checkCost(t, "self-hosted model added", c, ok, 1100*2e-07+10*4e-07, 1100*2e-07+10*4e-07)
	if tab.Len() != 22 {
		t.Errorf("Len() = %d, want 22", tab.Len())
	}
	// The other order: the list's entry replaces the contract's.
	tab, err = Load(override, realFile)
	if err != nil {
		t.Fatal(err)
	}
	c, ok = tab.Cost("gpt-4o", "", u)
	checkCost(t, "gpt-4o listed last", c, ok, 100*2.5e-06+1000*1.25e-06+10*1e-05, 1100*2.5e-06+10*1e-05)

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"gpt-4o": {"input_cost_per_token": -1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, paths := range [][]string{{realFile, bad}, {realFile, filepath.Join(dir, "missing.json")}, nil} {
		if tab, err := Load(paths...); err == nil || tab != nil || (len(paths) > 0 && !strings.Contains(err.Error(), paths[1])) {
			t.Errorf("Load(%q) = %v, %v; want an error naming the file", paths, tab, err)
		}
	}
}

// TestDocsExample parses the override file of docs/pricing.md and checks
// the recorded request it prices there.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/pricing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```json\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/pricing.md has no json block")
	}
	tab := parse(t, block)
	u := usage(stats.TokenInput, 100, stats.TokenCacheRead, 1000, stats.TokenOutput, 10)
	c, ok := tab.Cost("gpt-4o", "", u)
	checkCost(t, "docs gpt-4o", c, ok, 100*2e-06+1000*1e-06+10*8e-06, 1100*2e-06+10*8e-06)
	c, ok = tab.Cost("my-llama-70b", "", u)
	checkCost(t, "docs my-llama-70b", c, ok, 1100*2e-07+10*4e-07, 1100*2e-07+10*4e-07)
	for _, figure := range []string{"$0.00926025", "$0.007719", "$0.00154125", "$0.0021495", "$0.007698", "1,600 times"} {
		if !strings.Contains(string(doc), figure) {
			t.Errorf("docs/pricing.md no longer says %s: update TestDocsExample and TestRecordedUsage", figure)
		}
	}
	if MaxPrice/6e-04 < 1600 {
		t.Errorf("MaxPrice %g is not 1,600 times o1-pro's output price", MaxPrice)
	}
}

// BenchmarkCost prices a request by an exact name and by a name found only
// with its provider prefix and date suffix stripped (the longest search).
func BenchmarkCost(b *testing.B) {
	tab := loadReal(b)
	u := usage(stats.TokenInput, 125, stats.TokenCacheRead, 1390, stats.TokenOutput, 8, stats.TokenReasoning, 0)
	for _, c := range []struct{ name, provider, model, response string }{
		{"exact", "", "gpt-4o", "gpt-4o-2024-08-06"},
		{"stripped", "", "openrouter/anthropic/claude-sonnet-4-5-20250929", "openrouter/anthropic/claude-sonnet-4-5-20250929"},
		// The provider's entries searched first, in vain, then all.
		{"provider/exact", "azure.ai.openai", "gpt-4o-2024-08-06", "gpt-4o-2024-08-06"},
		{"provider/own", "azure.ai.openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18"},
	} {
		tab := tab.ForProvider(c.provider)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := tab.Cost(c.model, c.response, u); !ok {
					b.Fatal("not priced")
				}
			}
		})
	}
}
