package pricing

import (
	"strings"

	"github.com/infermetrics/infermetrics/stats"
)

// find returns the price of the first name the table has, in the order of
// the package doc: the provider's entries first (ForProvider), then all.
func (t *Table) find(model, responseModel string) *Price {
	if t == nil {
		return nil
	}
	if p := findIn(t.provider, model, responseModel); p != nil {
		return p
	}
	return findIn(t.prices, model, responseModel)
}

// findIn returns the price in prices of the first name of the package
// doc's order, or nil. A name longer than stats.MaxResponseModelLen names
// no model (each prefix stripped hashes the rest of it again).
func findIn(prices map[string]*Price, model, responseModel string) *Price {
	if len(prices) == 0 {
		return nil
	}
	names := [2]string{boundedName(responseModel), boundedName(model)}
	if names[1] == names[0] {
		names[1] = "" // looked up once
	}
	for _, name := range names {
		if p := get(prices, name); p != nil {
			return p
		}
	}
	for _, name := range names {
		for s, ok := unprefixed(name); ok; s, ok = unprefixed(s) {
			if p := get(prices, s); p != nil {
				return p
			}
		}
	}
	for _, name := range names {
		for s, ok := name, true; ok; s, ok = unprefixed(s) {
			if base, dated := undated(s); dated {
				if p := get(prices, base); p != nil {
					return p
				}
			}
		}
	}
	return nil
}

// get returns the price of the model named name exactly, or nil.
func get(prices map[string]*Price, name string) *Price {
	if name == "" {
		return nil
	}
	return prices[name]
}

// providerPrefixes are the key prefixes of LiteLLM's list for the models of
// a provider it prices apart, by the provider's gen_ai.provider.name (each
// prefix seen in the list at the commit of testdata/README.md).
var providerPrefixes = map[string]string{
	"azure.ai.openai": "azure",
	"aws.bedrock":     "bedrock",
	"deepseek":        "deepseek",
	"gcp.gemini":      "gemini",
	"gcp.vertex_ai":   "vertex_ai",
	"groq":            "groq",
	"mistral_ai":      "mistral",
	"moonshot_ai":     "moonshot",
}

// ForProvider returns the table for the traffic of one provider, named by
// its gen_ai.provider.name (openaihttp.ProviderName gives it from a host):
// the entries LiteLLM's list keeps under the provider's prefix, such as
// mistral/mistral-small-latest or azure/gpt-4o-mini, come first, each by its
// name without the prefix, by the whole rule of the package doc, before any
// other entry. A provider without such a prefix (openai, anthropic,
// self_hosted, ...) gets t itself.
func (t *Table) ForProvider(provider string) *Table {
	prefix, ok := providerPrefixes[provider]
	if t == nil || !ok {
		return t
	}
	own := map[string]*Price{}
	for name, p := range t.prices {
		if rest, ok := strings.CutPrefix(name, prefix+"/"); ok && rest != "" {
			own[rest] = p
		}
	}
	return &Table{prices: t.prices, provider: own}
}

// unprefixed returns name without its first provider prefix ("openai/gpt-4o":
// "gpt-4o"), and whether it had one.
func unprefixed(name string) (string, bool) {
	_, rest, ok := strings.Cut(name, "/")
	return rest, ok
}

// undated returns name without its date suffix (-YYYY-MM-DD, -YYYYMMDD,
// @YYYYMMDD), and whether it had one.
func undated(name string) (string, bool) {
	n := len(name)
	if n > 11 && name[n-11] == '-' && name[n-6] == '-' && name[n-3] == '-' &&
		isDate(name[n-10:n-6], name[n-5:n-3], name[n-2:]) {
		return name[:n-11], true
	}
	if n > 9 && (name[n-9] == '-' || name[n-9] == '@') && isDate(name[n-8:n-4], name[n-4:n-2], name[n-2:]) {
		return name[:n-9], true
	}
	return "", false
}

// isDate reports whether year, month and day are the digits of a day of a
// year 20xx.
func isDate(year, month, day string) bool {
	num := func(s string) int {
		v := 0
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return -1
			}
			v = v*10 + int(s[i]-'0')
		}
		return v
	}
	y, m, d := num(year), num(month), num(day)
	return y >= 2000 && y <= 2099 && m >= 1 && m <= 12 && d >= 1 && d <= 31
}

// boundedName is name, or "" when it is longer than any model name a request
// can carry.
func boundedName(name string) string {
	if len(name) > stats.MaxResponseModelLen {
		return ""
	}
	return name
}
