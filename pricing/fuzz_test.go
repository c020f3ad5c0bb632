package pricing

import (
	"bytes"
	"math"
	"os"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// FuzzParse holds that Parse never panics, and that a table it accepts
// holds only bounded prices and tiers in order, and gives costs that
// stats accepts for any usage.
func FuzzParse(f *testing.F) {
	real, err := os.ReadFile(realFile)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(real, int64(1000), int64(200000))
	for _, doc := range []string{
		`{}`, `null`, `[]`, `{"m": null}`, `{"m": 1}`,
		`{"m": {"input_cost_per_token": "1e-6", "output_cost_per_token": 2e-06, "output_cost_per_reasoning_token": null}}`,
		`{"m": {"input_cost_per_token": 1, "input_cost_per_token_above_0k_tokens": 1, "output_cost_per_token_above_0k_tokens": 1}}`,
		`{"m": {"input_cost_per_token": 1e-06, "input_cost_per_token_above_99999999999999999999k_tokens": 1}}`,
		`{"m": {"input_cost_per_token": -0, "cache_read_input_token_cost": "  0x1p-30 "}}`,
	} {
		f.Add([]byte(doc), int64(10), int64(-3))
	}
	f.Fuzz(func(t *testing.T, doc []byte, a, b int64) {
		tab, err := Parse(bytes.NewReader(doc))
		if err != nil {
			if tab != nil {
				t.Fatalf("a table with an error: %v", err)
			}
			return
		}
		for model, p := range tab.prices {
			if p.Model != model {
				t.Fatalf("%q priced as %q", model, p.Model)
			}
			all := []Rates{p.Rates}
			for i, tier := range p.Tiers {
				all = append(all, tier.Rates)
				if tier.Above < 0 || (i > 0 && tier.Above <= p.Tiers[i-1].Above) || !tier.Rates.Has(stats.TokenInput) {
					t.Fatalf("%q: tiers %+v", model, p.Tiers)
				}
			}
			for _, r := range all {
				for _, v := range r.PerToken {
					if math.IsNaN(v) || v < 0 || v > MaxPrice {
						t.Fatalf("%q: price %g", model, v)
					}
				}
			}
			var u stats.TokenUsage
			for i, k := range stats.TokenKinds() {
				u.Set(k, []int64{a, b, a ^ b, math.MaxInt64}[i%4])
			}
			c, ok := tab.Cost("", model, u)
			if !ok || !c.Known {
				t.Fatalf("%q: not priced", model)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("%q: %v", model, err)
			}
		}
	})
}
