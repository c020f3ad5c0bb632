package pricing

import (
	"strings"
	"testing"

	"github.com/infermetrics/infermetrics/stats"
)

// TestMatch holds each step of the name rule of the package doc, on the
// real entries, and the names that must not match.
func TestMatch(t *testing.T) {
	tab := loadReal(t)
	for _, c := range []struct {
		model, response, want string // want "" for no price
	}{
		// The response's model, a dated snapshot with its own entry and its
		// own price (twice gpt-4o's input), before the request's.
		{"gpt-4o", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13"},
		{"gpt-4o", "", "gpt-4o"},
		// The request's model when the response's matches nothing exactly.
		{"gpt-4o", "gpt-4o-turbo-unknown", "gpt-4o"},
		// An exact request beats a response that matches only stripped.
		{"gpt-4o-mini", "openai/gpt-4o", "gpt-4o-mini"},
		{"gpt-4o-mini", "gpt-4o-2099-01-01", "gpt-4o-mini"},
		// Provider prefixes stripped one at a time, response first.
		{"", "openai/gpt-4o-mini", "gpt-4o-mini"},
		{"openrouter/openai/gpt-4o", "", "gpt-4o"},
		{"openai/gpt-4o", "openai/o3-mini", "o3-mini"},
		// A table key with a prefix is found by its whole name only.
		{"azure/gpt-4o-mini", "", "azure/gpt-4o-mini"},
		{"gpt-4o-mini", "", "gpt-4o-mini"},
		{"bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0", "", "bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0"},
		// Date suffixes stripped: -YYYY-MM-DD, -YYYYMMDD, @YYYYMMDD, after
		// every exact and stripped name.
		{"gpt-4o-mini-2024-07-18", "", "gpt-4o-mini"},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"},
		{"claude-sonnet-4-5@20250929", "", "claude-sonnet-4-5"},
		{"anthropic/claude-sonnet-4-5-20250929", "", "claude-sonnet-4-5"},
		{"o3-mini", "o3-mini-2025-01-31", "o3-mini-2025-01-31"},
		{"", "gpt-4o-2024-08-06", "gpt-4o-2024-08-06"},
		{"unknown", "o3-mini-2031-12-31", "o3-mini"},

		// Never a prefix of another name, a different case, an added prefix,
		// a suffix that is not a date, nor a skipped entry.
		{"gpt-4", "", ""},
		{"gpt-4o-mini-tts", "", ""},
		{"o3-mini-high", "", ""},
		{"claude-sonnet-4", "", ""},
		{"GPT-4o", "", ""},
		{"gemini-2.5-pro", "", ""},
		{"gpt-4o-2024-13-01", "", ""},
		{"gpt-4o-2024-08-32", "", ""},
		{"gpt-4o-1999-08-06", "", ""},
		{"gpt-4o-20241301", "", ""},
		{"gpt-4o-0806", "", ""},
		{"gpt-4o-2024-08-06x", "", ""},
		{"gpt-4o_20240806", "", ""},
		{"-20240806", "", ""},
		{"openai/", "", ""},
		{"sample_spec", "", ""},
		{"1024-x-1024/dall-e-2", "", ""},
		{"", "", ""},
		// A name longer than any a request carries names no model.
		{strings.Repeat("a/", 200) + "gpt-4o", "", ""},
		{strings.Repeat("a/", 200) + "gpt-4o", "gpt-4o-mini", "gpt-4o-mini"},
	} {
		p, ok := tab.Lookup(c.model, c.response)
		if ok != (c.want != "") || p.Model != c.want {
			t.Errorf("Lookup(%q, %q) = %q, %v; want %q", c.model, c.response, p.Model, ok, c.want)
		}
		cost, ok := tab.Cost(c.model, c.response, usage(stats.TokenInput, 1000))
		if ok != (c.want != "") || (!ok && cost != (stats.Cost{})) {
			t.Errorf("Cost(%q, %q) = %+v, %v", c.model, c.response, cost, ok)
		}
	}
}

// TestForProvider holds the provider's entries first, on the real entries:
// its own price for a model the list also prices without a prefix (Azure's
// gpt-4o-mini costs 10% more than OpenAI's), a model named only under its
// prefix (Mistral's), a provider's model whose name has a slash of its own
// (Groq's openai/gpt-oss-120b, which without the provider would strip to
// nothing of Groq's), and the rest of the rule after them.
func TestForProvider(t *testing.T) {
	tab := loadReal(t)
	for _, c := range []struct {
		provider, model, response, want string
	}{
		{"azure.ai.openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18", "azure/gpt-4o-mini"},
		{"azure.ai.openai", "my-deployment", "gpt-4o-2024-08-06", "azure/gpt-4o"},
		{"azure.ai.openai", "o3-mini", "", "o3-mini"}, // not under azure/: the list's
		{"mistral_ai", "mistral-small-latest", "mistral-small-latest", "mistral/mistral-small-latest"},
		{"groq", "openai/gpt-oss-120b", "openai/gpt-oss-120b", "groq/openai/gpt-oss-120b"},
		{"moonshot_ai", "kimi-k2.5", "", "moonshot/kimi-k2.5"},
		{"deepseek", "deepseek-chat", "deepseek-chat", "deepseek/deepseek-chat"},
		{"aws.bedrock", "us.anthropic.claude-3-5-haiku-20241022-v1:0", "", "bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0"},
		{"gcp.gemini", "gemini-2.5-pro", "", "gemini/gemini-2.5-pro"},
		// Without the provider, or for one without a prefix, none of them.
		{"", "gpt-4o-mini", "", "gpt-4o-mini"},
		{"openai", "mistral-small-latest", "", ""},
		{"self_hosted", "openai/gpt-oss-120b", "", ""},
		{"mistral_ai", "gpt-4o-mini", "", "gpt-4o-mini"},
	} {
		p, ok := tab.ForProvider(c.provider).Lookup(c.model, c.response)
		if ok != (c.want != "") || p.Model != c.want {
			t.Errorf("ForProvider(%q).Lookup(%q, %q) = %q, %v; want %q", c.provider, c.model, c.response, p.Model, ok, c.want)
		}
	}
	if got := tab.ForProvider("openai"); got != tab {
		t.Error("ForProvider of a provider without a prefix is a new table")
	}
	var nilTable *Table
	if _, ok := nilTable.ForProvider("groq").Lookup("openai/gpt-oss-120b", ""); ok {
		t.Error("a nil table priced a request")
	}
}
