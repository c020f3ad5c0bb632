package views

import (
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
)

// OpenTelemetry GenAI semantic-convention server histograms (status
// Development), with their advised bucket boundaries.
const (
	GenAIServerRequestDuration    = "gen_ai.server.request.duration"
	GenAIServerTimeToFirstToken   = "gen_ai.server.time_to_first_token"
	GenAIServerTimePerOutputToken = "gen_ai.server.time_per_output_token"
)

var semconvFamilies = []struct {
	family, instrument string
	buckets            []float64
}{
	{GenAIServerRequestDuration, instrument.NameE2ERequestLatency,
		[]float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}},
	{GenAIServerTimeToFirstToken, instrument.NameTimeToFirstToken,
		[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}},
	{GenAIServerTimePerOutputToken, instrument.NameRequestTimePerOutputToken,
		[]float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}},
}

// Semconv returns views that export the GenAI server histograms
// gen_ai.server.request.duration, gen_ai.server.time_to_first_token and
// gen_ai.server.time_per_output_token from the Recorder's latency
// instruments, with the advised buckets and the gen_ai.operation.name,
// gen_ai.provider.name, gen_ai.request.model and error.type attributes. Use
// it beside VLLM: each view adds its own stream. It also shapes the GenAI
// client families (ClientFamilies), which a gateway or router records per
// backend: they keep the GenAI, backend and backend.role attributes and
// drop model_name and engine.
//
// The streams come from the same measurements as vLLM's families, so they
// follow vLLM's definitions where the conventions differ:
// gen_ai.server.time_per_output_token is decode time / (tokens - 1) of every
// finished request (0 with one token or none), including failed ones, which
// carry error.type; the conventions count successful responses only.
func Semconv(opts ...Option) ([]sdkmetric.View, error) {
	c := newConfig(opts)
	if err := c.check(semconvFamilySet(), vllmFamilies()); err != nil {
		return nil, err
	}
	views := make([]sdkmetric.View, 0, len(semconvFamilies))
	for _, f := range semconvFamilies {
		d, _ := describe(f.instrument)
		_, explicit := c.bucketsOf(f.family)
		if _, exponential := c.exponentialOf(f.family, d); !explicit && !exponential {
			c.buckets = append(c.buckets, bucketsOption{f.family, f.buckets})
		}
		views = append(views, c.stream(d, f.family, allow(semconvOnly)))
	}
	for _, f := range ClientFamilies() {
		views = append(views, c.stream(f.Instrument, f.Name, allow(clientKeys)))
	}
	return views, nil
}

// describe returns the descriptor of an instrument name.
func describe(name string) (instrument.Descriptor, bool) {
	for _, d := range instrument.Descriptors() {
		if d.Name == name {
			return d, true
		}
	}
	return instrument.Descriptor{}, false
}
