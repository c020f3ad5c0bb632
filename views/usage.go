package views

import "github.com/infermetrics/infermetrics/instrument"

// UsageFamilies returns the usage families VLLM exports under their
// OpenTelemetry names (infermetrics.usage.tokens, ...: a Prometheus scrape
// shows infermetrics_usage_tokens_total), which a Recorder built with
// instrument.WithAttribution or instrument.WithPriceTable records, with
// their labels: model_name, engine and each family's own. Each but
// infermetrics.attribution.overflow also carries one label per attribution
// dimension, which, like the Recorder's constant attributes, Labels does not
// list.
func UsageFamilies() []Family {
	var out []Family
	for _, d := range instrument.UsageDescriptors() {
		out = append(out, Family{Name: exposedName(d.Name, d.Kind), Type: d.Kind.String(),
			Labels: labels(d), Buckets: d.Buckets, Instrument: d})
	}
	return out
}
