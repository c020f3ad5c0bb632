package views

import (
	"slices"

	"github.com/infermetrics/infermetrics/instrument"
)

// clientKeys are the attributes the GenAI client families keep: every
// attribute of their instruments (instrument.ClientDescriptors) but
// model_name and engine.
var clientKeys = func() []string {
	var keys []string
	for _, f := range ClientFamilies() {
		for _, k := range f.Labels {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}()

// ClientFamilies returns the GenAI client families Semconv exports under
// their OpenTelemetry names (gen_ai.client.token.usage,
// gen_ai.client.operation.duration, ...), recorded per backend by a
// gateway or router (package openaihttp's transport), with the labels they
// keep.
func ClientFamilies() []Family { return genAIFamilies(instrument.ClientDescriptors()) }

// ServerFamilies returns the GenAI server families Semconv exports under
// their OpenTelemetry names (gen_ai.server.request.duration, ...), which a
// Recorder built with instrument.WithGenAISemconv records, with their labels.
func ServerFamilies() []Family { return genAIFamilies(instrument.ServerDescriptors()) }

// genAIFamilies returns the families of GenAI instruments, which keep their
// names and every attribute but model_name and engine.
func genAIFamilies(ds []instrument.Descriptor) []Family {
	var out []Family
	for _, d := range ds {
		var labels []string
		for _, k := range d.Attributes {
			if k != instrument.KeyModelName && k != instrument.KeyEngine {
				labels = append(labels, k)
			}
		}
		out = append(out, Family{Name: d.Name, Type: d.Kind.String(), Labels: labels, Buckets: d.Buckets,
			Instrument: d, Semconv: d.Name})
	}
	return out
}

// inferenceNames are the names of the GenAI client durations since the
// conventions moved to open-telemetry/semantic-conventions-genai: PR #521
// renamed the metrics of an inference (docs/gen-ai/non-normative/migration.md
// @ 32c328e8, "GenAI client inference duration metric" and "GenAI client
// streaming metrics"; docs/gen-ai/client-inference.md @ 024a4f94).
var inferenceNames = map[string]string{
	instrument.NameGenAIClientOperationDuration:  "gen_ai.client.inference.duration",
	instrument.NameGenAIClientTimeToFirstChunk:   "gen_ai.client.inference.time_to_first_chunk",
	instrument.NameGenAIClientTimePerOutputChunk: "gen_ai.client.inference.time_per_output_chunk",
}

// WithGenAIInferenceNames exports, with Semconv, the GenAI client durations
// under the names the conventions give them since their move to
// open-telemetry/semantic-conventions-genai: gen_ai.client.inference.duration,
// gen_ai.client.inference.time_to_first_chunk and
// gen_ai.client.inference.time_per_output_chunk, their attributes
// unchanged. The new conventions keep gen_ai.client.operation.duration for
// operations that are no inference: a view renames a whole instrument, so
// embeddings and pooling legs move too (gen_ai.operation.name tells them
// apart). gen_ai.client.token.usage keeps its name: its replacements are
// counters per token kind (gen_ai.client.inference.usage.input_tokens, ...),
// which no view derives from one histogram of both. Options still name the
// families by their default names.
func WithGenAIInferenceNames() Option {
	return optionFunc(func(c *config) { c.inference = true })
}
