package views

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
)

// IDOnlyExemplars is the exemplar reservoir selector of every stream whose
// view drops attributes: the SDK's default reservoir for the aggregation,
// storing each exemplar without the dropped attributes, so that it carries
// the value, time, trace ID and span ID only. The SDK otherwise copies the
// dropped attributes into every exemplar (model_name and engine of a GenAI
// client family, or whatever an allow-list of WithAttributes drops), which
// can exceed OpenMetrics' 128-rune limit on exemplar labels: client_golang
// then drops the exemplar from the scrape. The SDK also allocates the
// dropped attributes of every sampled measurement: the Recorder's latency
// families drop none under VLLM and Semconv. Give it to a View's
// Stream.ExemplarReservoirProviderSelector to get the same on your own views.
func IDOnlyExemplars(agg sdkmetric.Aggregation) exemplar.ReservoirProvider {
	provider := sdkmetric.DefaultExemplarReservoirProviderSelector(agg)
	return func(kept attribute.Set) exemplar.Reservoir {
		switch r := provider(kept).(type) {
		case *exemplar.HistogramReservoir:
			return histogramIDs{r}
		case *exemplar.FixedSizeReservoir:
			return fixedSizeIDs{r}
		default:
			return idsOnly{r}
		}
	}
}

// histogramIDs and fixedSizeIDs embed the SDK's concurrency-safe reservoirs
// by their concrete type, which keeps them marked safe for concurrent use:
// the SDK then offers to them without taking a lock of its own. idsOnly
// wraps any other reservoir (the SDK serialises its calls).
type (
	histogramIDs struct{ *exemplar.HistogramReservoir }
	fixedSizeIDs struct{ *exemplar.FixedSizeReservoir }
	idsOnly      struct{ exemplar.Reservoir }
)

func (r histogramIDs) Offer(ctx context.Context, t time.Time, v exemplar.Value, _ []attribute.KeyValue) {
	r.HistogramReservoir.Offer(ctx, t, v, nil)
}

func (r fixedSizeIDs) Offer(ctx context.Context, t time.Time, v exemplar.Value, _ []attribute.KeyValue) {
	r.FixedSizeReservoir.Offer(ctx, t, v, nil)
}

func (r idsOnly) Offer(ctx context.Context, t time.Time, v exemplar.Value, _ []attribute.KeyValue) {
	r.Reservoir.Offer(ctx, t, v, nil)
}
