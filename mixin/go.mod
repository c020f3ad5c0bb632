module github.com/infermetrics/infermetrics/mixin

go 1.26.0

require (
	github.com/google/go-jsonnet v0.22.0
	github.com/grafana/grafana-foundation-sdk/go v0.0.22
	github.com/infermetrics/infermetrics v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/crypto v0.45.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	sigs.k8s.io/yaml v1.4.0 // indirect
)

// The library, from this repository: the rules and dashboards name its
// families (views.Families and the others), never retyped.
replace github.com/infermetrics/infermetrics => ../
