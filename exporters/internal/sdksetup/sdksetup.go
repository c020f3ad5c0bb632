// Package sdksetup is what exporters.Setup and prometheus.NewProvider share:
// the resource they build from the environment and the MeterProvider they
// build with it. It imports no exporter.
package sdksetup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0" // the newest of OpenTelemetry Go 1.44, go.mod's minimum
)

// EnvExemplarFilter chooses the SDK's exemplar filter; set, it turns
// exemplars on (see Provider.Exemplars).
const EnvExemplarFilter = "OTEL_METRICS_EXEMPLAR_FILTER"

// Resource is what the caller sets of the resource; see NewResource.
type Resource struct {
	ServiceName       string
	ServiceInstanceID string
	Attributes        []attribute.KeyValue
}

// NewResource builds the resource in the documented precedence: the SDK
// defaults and OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, then
// r.Attributes, r.ServiceName and r.ServiceInstanceID (later wins);
// service.instance.id is a random UUID when nothing sets it. It reads the
// environment on every call (resource.Default caches it once per process).
// A partial resource (a malformed OTEL_RESOURCE_ATTRIBUTES) is reported to
// report and kept.
func NewResource(ctx context.Context, r Resource, report func(error)) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(defaultServiceName())),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(r.Attributes...),
	)
	if errors.Is(err, resource.ErrPartialResource) {
		report(fmt.Errorf("exporters: resource: %w", err)) // keep what was understood
	} else if err != nil {
		return nil, fmt.Errorf("exporters: resource: %w", err)
	}
	var own []attribute.KeyValue
	if r.ServiceName != "" {
		own = append(own, semconv.ServiceName(r.ServiceName))
	}
	id := r.ServiceInstanceID
	if _, ok := res.Set().Value(semconv.ServiceInstanceIDKey); !ok && id == "" {
		if id, err = randomUUID(); err != nil {
			return nil, fmt.Errorf("exporters: service.instance.id: %w", err)
		}
	}
	if id != "" {
		own = append(own, semconv.ServiceInstanceID(id))
	}
	if res, err = resource.Merge(res, resource.NewSchemaless(own...)); err != nil {
		return nil, fmt.Errorf("exporters: resource: %w", err)
	}
	return res, nil
}

// defaultServiceName is the specification's default service.name.
func defaultServiceName() string {
	if exe, err := os.Executable(); err == nil {
		return "unknown_service:" + filepath.Base(exe)
	}
	return "unknown_service"
}

// randomUUID returns a random (version 4) UUID in its text form.
func randomUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}

// Provider is what a MeterProvider is built with.
type Provider struct {
	Resource         *resource.Resource
	Views            []sdkmetric.View
	Readers          []sdkmetric.Reader
	CardinalityLimit *int // nil: the SDK's default
	// Exemplars keeps exemplars (the caller asked, or its scrape shows
	// them). Without it, and without OTEL_METRICS_EXEMPLAR_FILTER, the SDK
	// keeps no exemplar reservoirs, which saves memory and time.
	Exemplars bool
	// Options are the caller's own, applied after the ones above.
	Options []sdkmetric.Option
}

// NewMeterProvider builds the SDK MeterProvider of p.
func NewMeterProvider(p Provider) *sdkmetric.MeterProvider {
	opts := []sdkmetric.Option{sdkmetric.WithResource(p.Resource), sdkmetric.WithView(p.Views...)}
	for _, r := range p.Readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	if p.CardinalityLimit != nil {
		opts = append(opts, sdkmetric.WithCardinalityLimit(*p.CardinalityLimit))
	}
	if !p.Exemplars && os.Getenv(EnvExemplarFilter) == "" {
		opts = append(opts, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
	}
	return sdkmetric.NewMeterProvider(append(opts, p.Options...)...)
}
