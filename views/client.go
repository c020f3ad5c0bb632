package views

import "github.com/infermetrics/infermetrics/instrument"

// clientKeys are the attributes the GenAI client families keep: the GenAI
// ones, the backend and its role.
var clientKeys = []string{instrument.KeyGenAIOperationName, instrument.KeyGenAIProviderName,
	instrument.KeyGenAIRequestModel, instrument.KeyErrorType, instrument.KeyGenAITokenType,
	instrument.KeyBackend, instrument.KeyBackendRole}

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
