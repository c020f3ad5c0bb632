package instrument_test

import (
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/infermetrics/infermetrics/instrument"
	"github.com/infermetrics/infermetrics/stats"
)

// resourceLabels is a provider whose exporter copies resource attributes
// onto every series, as labels service_name and job.
type resourceLabels struct{ metric.MeterProvider }

func (resourceLabels) ReservedLabels() []string { return []string{"service_name", "job"} }

// opaque wraps a provider with Unwrap only.
type opaque struct{ metric.MeterProvider }

func (o *opaque) Unwrap() metric.MeterProvider { return o.MeterProvider }

var _ instrument.ReservedLabelsProvider = resourceLabels{}

// Label names the Prometheus exporter adds itself would fail every scrape
// (HTTP 500) or forge the overflow series: constant attributes and cache
// configuration keys exported as one of them are refused at construction.
func TestExporterLabelsRefused(t *testing.T) {
	plain := noop.NewMeterProvider()
	withResource := &opaque{resourceLabels{noop.NewMeterProvider()}}
	attr := func(k string) instrument.Option { return instrument.WithAttributes(attribute.String(k, "x")) }
	cache := func(k string) instrument.Option { return instrument.WithCacheConfig(stats.CacheConfig{k: "x"}) }
	for _, c := range []struct {
		name string
		mp   metric.MeterProvider
		opt  instrument.Option
	}{
		{"scope name attribute", plain, attr("otel_scope_name")},
		{"scope version attribute", plain, attr("otel.scope.version")},
		{"scope schema URL attribute", plain, attr("otel_scope_schema_url")},
		{"other scope attribute", plain, attr("otel.scope.foo")},
		{"overflow attribute", plain, attr("otel.metric.overflow")},
		{"overflow label attribute", plain, attr("otel_metric_overflow")},
		{"scope cache config key", plain, cache("otel_scope_name")},
		{"overflow cache config key", plain, cache("otel.metric.overflow")},
		{"resource attribute", withResource, attr("service.name")},
		{"resource label attribute", withResource, attr("job")},
		{"resource cache config key", withResource, cache("service_name")},
	} {
		_, err := newOn(c.mp, "m", c.opt)
		if !errors.Is(err, instrument.ErrConfig) || !errors.Is(err, stats.ErrInvalidLabel) {
			t.Errorf("%s: %v, want ErrConfig and ErrInvalidLabel", c.name, err)
		}
	}
	// Without the resource labels, the same keys are fine, as are keys that
	// merely resemble the exporter's.
	for _, k := range []string{"service.name", "job", "otel_scope", "scope_name", "otel.metrics.overflow"} {
		if _, err := newOn(plain, "m", attr(k)); err != nil {
			t.Errorf("attribute %q on a provider without reserved labels: %v", k, err)
		}
	}
	if _, err := newOn(withResource, "m", attr("service.version")); err != nil {
		t.Errorf("an attribute the exporter does not add: %v", err)
	}
}
