package pricing_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/infermetrics/infermetrics/pricing"
	"github.com/infermetrics/infermetrics/stats"
)

// ExampleTable_Cost prices a request of 1,515 prompt tokens, 1,390 of them
// read from the prompt cache, and 8 output tokens, with gpt-4o's prices as
// LiteLLM lists them. The request named gpt-4o; the response named the
// dated snapshot, which this table prices under gpt-4o (its date stripped).
// In a program, pricing.Load reads LiteLLM's file and the operator's.
func ExampleTable_Cost() {
	tab, err := pricing.Parse(strings.NewReader(`{
		"gpt-4o": {
			"input_cost_per_token": 2.5e-06,
			"cache_read_input_token_cost": 1.25e-06,
			"output_cost_per_token": 1e-05
		}
	}`))
	if err != nil {
		log.Fatal(err)
	}
	var u stats.TokenUsage
	u.Set(stats.TokenInput, 125) // the prompt less its cache reads
	u.Set(stats.TokenCacheRead, 1390)
	u.Set(stats.TokenOutput, 8)
	cost, ok := tab.Cost("gpt-4o", "gpt-4o-2024-08-06", u)
	fmt.Printf("priced %v: $%.6f, $%.6f without the cache, caching saved $%.6f\n",
		ok, cost.Charged, cost.Uncached, cost.Uncached-cost.Charged)

	_, ok = tab.Cost("gpt-4o-mini", "gpt-4o-mini-2024-07-18", u)
	fmt.Println("gpt-4o-mini priced:", ok)
	// Output:
	// priced true: $0.002130, $0.003868 without the cache, caching saved $0.001738
	// gpt-4o-mini priced: false
}

// ExampleTable_Lookup shows the price a table gives a model's tokens,
// for a doc or a dashboard: Rate applies the tier of the prompt's size and
// the price of a part's whole where the entry has no price of the part.
func ExampleTable_Lookup() {
	tab, err := pricing.Parse(strings.NewReader(`{
		"gemini/gemini-2.5-pro": {
			"input_cost_per_token": 1.25e-06,
			"input_cost_per_token_above_200k_tokens": 2.5e-06,
			"output_cost_per_token": 1e-05,
			"output_cost_per_token_above_200k_tokens": 1.5e-05
		}
	}`))
	if err != nil {
		log.Fatal(err)
	}
	p, ok := tab.Lookup("", "gemini/gemini-2.5-pro")
	fmt.Println(p.Model, ok)
	for _, prompt := range []int64{1000, 300000} {
		fmt.Printf("prompt %d: reasoning $%g/M tokens, cache write $%g/M tokens\n", prompt,
			p.Rate(stats.TokenReasoning, prompt)*1e6, p.Rate(stats.TokenCacheWrite, prompt)*1e6)
	}
	// Output:
	// gemini/gemini-2.5-pro true
	// prompt 1000: reasoning $10/M tokens, cache write $1.25/M tokens
	// prompt 300000: reasoning $15/M tokens, cache write $2.5/M tokens
}

// ExampleTable_ForProvider prices requests sent to Azure OpenAI, whose
// gpt-4o-mini LiteLLM's list prices apart (azure/gpt-4o-mini), and to
// Mistral, whose models it has under mistral/ only. The provider is its
// gen_ai.provider.name, as openaihttp.ProviderName gives it from a host.
func ExampleTable_ForProvider() {
	tab, err := pricing.Parse(strings.NewReader(`{
		"gpt-4o-mini": {"input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07},
		"azure/gpt-4o-mini": {"input_cost_per_token": 1.65e-07, "output_cost_per_token": 6.6e-07},
		"mistral/mistral-small-latest": {"input_cost_per_token": 6e-08, "output_cost_per_token": 1.8e-07}
	}`))
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range []struct{ provider, model string }{
		{"openai", "gpt-4o-mini"},
		{"azure.ai.openai", "gpt-4o-mini"},
		{"mistral_ai", "mistral-small-latest"},
		{"self_hosted", "mistral-small-latest"},
	} {
		p, ok := tab.ForProvider(c.provider).Lookup(c.model, "")
		fmt.Printf("%s %s: %q %v\n", c.provider, c.model, p.Model, ok)
	}
	// Output:
	// openai gpt-4o-mini: "gpt-4o-mini" true
	// azure.ai.openai gpt-4o-mini: "azure/gpt-4o-mini" true
	// mistral_ai mistral-small-latest: "mistral/mistral-small-latest" true
	// self_hosted mistral-small-latest: "" false
}
