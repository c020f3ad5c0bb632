#!/usr/bin/env bash
# The whole test suite: vet and race-enabled tests of the library, then the
# end-to-end suite (e2e/, its own module) against a real Prometheus and a
# real OpenTelemetry Collector, which scripts/e2e-deps.sh installs and builds
# when missing or stale.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet ./...
# -count=2: a test that leaves global state behind (a claim on the global
# MeterProvider, an error handler) fails its second run.
go test -race -count=2 ./...
(cd openaihttp/internal/stacktest && go vet ./... && go test -race -count=2 -timeout 5m ./...) # net/http, ReverseProxy, gin, echo, HTTP/2

./scripts/e2e-deps.sh
cd e2e
go vet ./...
E2E_REQUIRED=1 go test -count=1 -v -timeout 20m ./...
