package openaihttp

import (
	"net"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
)

// ProviderSelfHosted is the gen_ai.provider.name ProviderName gives a host
// it does not know: a server of your own (vLLM, SGLang, Ollama, llama.cpp,
// a gateway).
const ProviderSelfHosted = instrument.DefaultGenAIProvider

// providerHosts are the hosts of the providers whose gen_ai.provider.name
// the GenAI conventions list (open-telemetry/semantic-conventions-genai @
// 024a4f94, docs/gen-ai/client-inference.md, the well-known values of
// gen_ai.provider.name; its notes name generativelanguage.googleapis.com
// for gcp.gemini and aiplatform.googleapis.com for gcp.vertex_ai), by
// their API's host: an exact name, or a suffix (".openai.azure.com": any
// resource's), or a prefix and suffix around one label (a region's).
var providerHosts = []struct {
	exact, prefix, suffix string
	provider              string
}{
	{exact: "api.openai.com", provider: "openai"},
	{exact: "api.anthropic.com", provider: "anthropic"},
	{suffix: ".openai.azure.com", provider: "azure.ai.openai"},
	{suffix: ".services.ai.azure.com", provider: "azure.ai.inference"},
	{suffix: ".models.ai.azure.com", provider: "azure.ai.inference"},
	{prefix: "bedrock-runtime.", suffix: ".amazonaws.com", provider: "aws.bedrock"},
	{exact: "generativelanguage.googleapis.com", provider: "gcp.gemini"},
	{exact: "aiplatform.googleapis.com", provider: "gcp.vertex_ai"},
	{suffix: "-aiplatform.googleapis.com", provider: "gcp.vertex_ai"},
	{exact: "api.mistral.ai", provider: "mistral_ai"},
	{exact: "api.groq.com", provider: "groq"},
	{exact: "api.deepseek.com", provider: "deepseek"},
	{exact: "api.perplexity.ai", provider: "perplexity"},
	{exact: "api.x.ai", provider: "x_ai"},
	{exact: "api.cohere.com", provider: "cohere"},
	{exact: "api.cohere.ai", provider: "cohere"},
	{exact: "api.moonshot.ai", provider: "moonshot_ai"},
	{exact: "api.moonshot.cn", provider: "moonshot_ai"},
	{suffix: ".ml.cloud.ibm.com", provider: "ibm.watsonx.ai"},
}

// ProviderName returns the gen_ai.provider.name of the GenAI conventions
// for an upstream's host (a URL's Host: a name, with or without a port; case
// and a final dot do not matter): openai for api.openai.com, anthropic for
// api.anthropic.com, azure.ai.openai for any *.openai.azure.com,
// azure.ai.inference for *.services.ai.azure.com and *.models.ai.azure.com,
// aws.bedrock for bedrock-runtime.<region>.amazonaws.com, gcp.gemini for
// generativelanguage.googleapis.com, gcp.vertex_ai for
// aiplatform.googleapis.com and its regional <region>-aiplatform hosts,
// mistral_ai, groq, deepseek, perplexity, x_ai, cohere and moonshot_ai for
// their api.* hosts, ibm.watsonx.ai for *.ml.cloud.ibm.com; ProviderSelfHosted
// for any other host (an address, localhost, a gateway's name). A gateway
// in front of a provider under a name of its own is self_hosted: give its
// provider to instrument.WithGenAI yourself.
func ProviderName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, p := range providerHosts {
		switch {
		case p.exact != "":
			if host == p.exact {
				return p.provider
			}
		case p.prefix != "":
			rest, prefixed := strings.CutPrefix(host, p.prefix)
			region, suffixed := strings.CutSuffix(rest, p.suffix)
			if prefixed && suffixed && region != "" && !strings.Contains(region, ".") {
				return p.provider
			}
		case strings.HasSuffix(host, p.suffix) && len(host) > len(p.suffix):
			return p.provider
		}
	}
	return ProviderSelfHosted
}
