package openaihttp_test

import (
	"fmt"
	"testing"

	"github.com/infermetrics/infermetrics/openaihttp"
)

// Each provider's API host gives the gen_ai.provider.name the GenAI
// conventions list for it, with or without a port, in any case; any other
// host, look-alikes included, is self_hosted.
func TestProviderName(t *testing.T) {
	for host, want := range map[string]string{
		"api.openai.com":                                "openai",
		"API.OpenAI.com:443":                            "openai",
		"api.openai.com.":                               "openai",
		"api.anthropic.com":                             "anthropic",
		"my-resource.openai.azure.com":                  "azure.ai.openai",
		"my-resource.services.ai.azure.com":             "azure.ai.inference",
		"my-endpoint.eastus.models.ai.azure.com":        "azure.ai.inference",
		"bedrock-runtime.us-east-1.amazonaws.com":       "aws.bedrock",
		"bedrock-runtime.eu-west-3.amazonaws.com:443":   "aws.bedrock",
		"generativelanguage.googleapis.com":             "gcp.gemini",
		"aiplatform.googleapis.com":                     "gcp.vertex_ai",
		"us-central1-aiplatform.googleapis.com":         "gcp.vertex_ai",
		"api.mistral.ai":                                "mistral_ai",
		"api.groq.com":                                  "groq",
		"api.deepseek.com":                              "deepseek",
		"api.perplexity.ai":                             "perplexity",
		"api.x.ai":                                      "x_ai",
		"api.cohere.com":                                "cohere",
		"api.cohere.ai":                                 "cohere",
		"api.moonshot.ai":                               "moonshot_ai",
		"us-south.ml.cloud.ibm.com":                     "ibm.watsonx.ai",
		"127.0.0.1:8000":                                "self_hosted",
		"[::1]:8000":                                    "self_hosted",
		"localhost":                                     "self_hosted",
		"vllm.default.svc.cluster.local:8000":           "self_hosted",
		"openrouter.ai":                                 "self_hosted",
		"api.openai.com.evil.example":                   "self_hosted",
		"notapi.openai.com":                             "self_hosted",
		"openai.azure.com":                              "self_hosted",
		"bedrock-runtime.amazonaws.com":                 "self_hosted",
		"bedrock-runtime.us-east-1.fips.amazonaws.com":  "self_hosted",
		"bedrock-agent-runtime.us-east-1.amazonaws.com": "self_hosted",
		"": "self_hosted",
	} {
		if got := openaihttp.ProviderName(host); got != want {
			t.Errorf("ProviderName(%q) = %q, want %q", host, got, want)
		}
	}
}

func ExampleProviderName() {
	for _, host := range []string{"api.anthropic.com", "my-resource.openai.azure.com:443", "10.0.0.7:8000"} {
		fmt.Println(host, openaihttp.ProviderName(host))
	}
	// Output:
	// api.anthropic.com anthropic
	// my-resource.openai.azure.com:443 azure.ai.openai
	// 10.0.0.7:8000 self_hosted
}
