package views

import (
	"cmp"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/infermetrics/infermetrics/instrument"
)

// OpenTelemetry GenAI semantic-convention server histograms (status
// Development), which a Recorder built with instrument.WithGenAISemconv
// records under these names.
const (
	GenAIServerRequestDuration    = instrument.NameGenAIServerRequestDuration
	GenAIServerTimeToFirstToken   = instrument.NameGenAIServerTimeToFirstToken
	GenAIServerTimePerOutputToken = instrument.NameGenAIServerTimePerOutputToken
)

// semconvFamilies are the GenAI server families with the vLLM instrument
// that measures the same (Family.Semconv).
var semconvFamilies = []struct{ family, vllm string }{
	{GenAIServerRequestDuration, instrument.NameE2ERequestLatency},
	{GenAIServerTimeToFirstToken, instrument.NameTimeToFirstToken},
	{GenAIServerTimePerOutputToken, instrument.NameRequestTimePerOutputToken},
}

// Semconv returns views that shape the GenAI server histograms
// gen_ai.server.request.duration, gen_ai.server.time_to_first_token and
// gen_ai.server.time_per_output_token, with the advised buckets and the
// gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model and
// error.type attributes. The Recorder records them only when built with
// instrument.WithGenAISemconv, on instruments of their own: without that
// option these streams stay empty. Use it beside VLLM: vLLM's families are
// unchanged. It also shapes the GenAI client families (ClientFamilies),
// which a gateway or router records per backend: they keep the GenAI,
// backend and backend.role attributes and drop model_name and engine.
//
// The server histograms follow the conventions where vLLM differs:
// gen_ai.server.time_per_output_token counts successful requests (not
// failed, so without error.type) with more than one output token, where
// vLLM's time per output token counts every finished request (0 with one
// token or none). Their streams drop no attribute, so a sampled exemplar
// costs no allocation.
func Semconv(opts ...Option) ([]sdkmetric.View, error) {
	c := newConfig(opts)
	if len(c.kindBuckets) > 0 {
		return nil, fmt.Errorf("%w: WithCustomHistogramBuckets: vLLM's bucket kinds are an option of views.VLLM; "+
			"give Semconv's families WithBuckets", ErrOption)
	}
	if err := c.check(semconvFamilySet(), vllmFamilies()); err != nil {
		return nil, err
	}
	views := make([]sdkmetric.View, 0, len(semconvFamilies))
	for _, f := range ServerFamilies() {
		_, explicit := c.familyBucketsOf(f.Name)
		if _, exponential := c.exponentialOf(f.Name, f.Instrument); !explicit && !exponential {
			c.buckets = append(c.buckets, bucketsOption{f.Name, f.Buckets})
		}
		views = append(views, c.stream(f.Instrument, f.Name, nil))
	}
	for _, f := range ClientFamilies() {
		name := f.Name
		if c.inference {
			name = cmp.Or(inferenceNames[f.Name], name)
		}
		views = append(views, c.streamAs(f.Instrument, f.Name, name, allow(clientKeys)))
	}
	return views, nil
}
