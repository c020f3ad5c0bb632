package views

import (
	"slices"
	"strings"

	"github.com/infermetrics/infermetrics/instrument"
)

// Family describes one family as a Prometheus scrape shows it with VLLM's views.
type Family struct {
	// Name is the exposition name: counters carry "_total". Options
	// (WithBuckets, WithAttributes) and package testutil take this name.
	// A family vLLM does not define (the P/D router families) keeps its
	// OpenTelemetry name, which a Prometheus scrape shows translated
	// (router.pd.handoff.duration as router_pd_handoff_duration_seconds).
	Name string
	// Type is "counter", "gauge" or "histogram".
	Type string
	// Labels are the label names besides the Recorder's constant attributes.
	Labels []string
	// Buckets are the histogram boundaries; nil with LengthBuckets set in
	// Instrument, for the token-count histograms (1-2-5 up to max_model_len).
	Buckets []float64
	// Instrument is the Recorder's instrument the family is exported from.
	Instrument instrument.Descriptor
	// Semconv is the GenAI semantic-convention histogram that measures the
	// same, if any: Semconv exports it from an instrument of its own, which
	// a Recorder built with instrument.WithGenAISemconv records.
	Semconv string
}

// Families returns every family VLLM exports, in the order of
// instrument.Descriptors, with vllm:prompt_tokens_by_source after
// vllm:prompt_tokens and vllm:prompt_tokens_cached_by_source after
// vllm:prompt_tokens_cached.
func Families() []Family {
	semconv := map[string]string{}
	for _, f := range semconvFamilies {
		semconv[f.vllm] = f.family
	}
	var out []Family
	for _, d := range instrument.Descriptors() {
		f := Family{Name: exposedName(VLLMName(d), d.Kind), Type: d.Kind.String(), Buckets: d.Buckets, Instrument: d, Semconv: semconv[d.Name]}
		f.Labels = labels(d)
		if family, desc, ok := splitBySource(d.Name); ok {
			total := f
			total.Labels = slices.DeleteFunc(slices.Clone(f.Labels), func(k string) bool { return k == instrument.KeySource })
			total.Instrument.Description = desc
			out = append(out, total)
			f.Name = exposedName(family, d.Kind)
		}
		out = append(out, f)
	}
	return out
}

// labels returns the label names of an instrument's vLLM family: model_name
// and engine plus its own attributes; the front end's families
// (Descriptor.FrontEnd) have no engine; the info gauges and the API
// server's operation histograms carry only their own.
func labels(d instrument.Descriptor) []string {
	var keys []string
	switch {
	case d.FrontEnd:
		keys = append(keys, instrument.KeyModelName)
	case d.Name != instrument.NameLoRARequestsInfo && d.Name != instrument.NameCacheConfigInfo &&
		d.Feature != instrument.ServerOperations:
		keys = append(keys, instrument.KeyModelName, instrument.KeyEngine)
	}
	return append(keys, d.Attributes...)
}

// ScrapeName is the family's name in a Prometheus scrape: vLLM's and the
// HTTP families' names as they are, an OpenTelemetry name as the Prometheus
// exporter translates it (router.pd.handoff.duration in seconds is
// router_pd_handoff_duration_seconds, infermetrics.invalid_events_total is
// infermetrics_invalid_events_total).
func (f Family) ScrapeName() string {
	if !strings.Contains(f.Name, ".") {
		return f.Name
	}
	n := ScrapeLabel(f.Name)
	if f.Instrument.Unit == "s" {
		n += "_seconds"
	}
	return n
}

// ScrapeLabel is the name of an attribute key as a label of a Prometheus
// scrape: its dots become underscores (backend.role is backend_role).
func ScrapeLabel(key string) string { return strings.ReplaceAll(key, ".", "_") }
