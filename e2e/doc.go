// Package e2e holds the end-to-end tests of infermetrics: the example P/D
// deployment (example/pd) scraped by a real Prometheus server and pushing
// OTLP through a real OpenTelemetry Collector into the same Prometheus.
//
// It is a module of its own so that the library's go.mod stays small; the
// collector it runs is a third module (e2e/collector), built into
// e2e/bin/otelcol by scripts/e2e-deps.sh, which also installs Prometheus.
//
//	../scripts/e2e-deps.sh && E2E_REQUIRED=1 go test -count=1 -v ./...
//
// Without E2E_REQUIRED=1 the tests skip when prometheus, promtool or the
// collector binary is missing; with it, a missing binary fails the run.
package e2e
