#!/usr/bin/env bash
# The whole test suite: staticcheck and vet, race-enabled tests of the
# library, a brief run of openaihttp's fuzz targets, the rules and
# dashboards of mixin/ (its own module) against promtool 2 and 3, then the
# end-to-end suite (e2e/, its own module) against a real Prometheus and a
# real OpenTelemetry Collector, which scripts/e2e-deps.sh installs and
# builds when missing or stale.
#
# A passing run prints the phases' names and times and go test's own "ok"
# lines; anything else is a failure's report. Every go test has an explicit
# -timeout far above its run time on an idle machine (README, Test), so a
# loaded machine makes the run slower, not red.
set -euo pipefail
cd "$(dirname "$0")/.."

# staticcheck at a pinned version, built through the Go module proxy like
# every other dependency (go run caches the build).
staticcheck_version=v0.8.2
staticcheck() { go run "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version" "$@"; }

phase() { printf 'test.sh: %s\n' "$*"; }
start=$SECONDS
elapsed() { phase "$1 done in $((SECONDS - start)) s"; start=$SECONDS; }

phase "vet and staticcheck"
go vet ./...
staticcheck ./...
(cd e2e && go vet ./... && staticcheck ./...)
(cd openaihttp/internal/benchcmp && go vet ./... && staticcheck ./...) # benchmarks only: compiled, not run
(cd mixin && go vet ./... && staticcheck ./...)
elapsed "vet and staticcheck"

phase "unit tests (-race -count=2)"
# -count=2: a test that leaves global state behind (a claim on the global
# MeterProvider, an error handler) fails its second run.
go test -race -count=2 -timeout 20m ./...
# A module of its own (gin, echo): net/http, ReverseProxy, gin, echo, HTTP/2.
(cd openaihttp/internal/stacktest && go vet ./... && staticcheck ./... && go test -race -count=2 -timeout 10m ./...)
elapsed "unit tests"

phase "newest dependencies"
# go.mod requires the oldest versions the library builds and passes its tests
# with (README, Install), so that an adopter is forced into no upgrade: every
# other stage runs at them. This one builds, vets and tests the root module
# at the newest releases, kept in .ci/newest.mod and .ci/newest.sum (refresh:
# go get -modfile=.ci/newest.mod -u ./... && go mod tidy -modfile=.ci/newest.mod).
go build -modfile=.ci/newest.mod ./...
go vet -modfile=.ci/newest.mod ./...
go test -modfile=.ci/newest.mod -count=1 -timeout 20m ./...
elapsed "newest dependencies"

phase "fuzz (briefly)"
# What clients and servers send, against encoding/json with Python's rules
# (openaihttp/pyjson_test.go), from the seeds of every fixture and the replay
# corpus; a finding is written to openaihttp/testdata/fuzz and fails the run.
# The count of inputs run varies with the machine's load, and the first
# seconds go to re-running the seeds and the inputs cached from earlier runs;
# the time does not vary.
for target in FuzzRequestScan FuzzOpenAIResponse FuzzResponsesAPIResponse FuzzAnthropicResponse FuzzOllamaResponse FuzzRouteOf FuzzHandlerTakesLegReads FuzzSameEvent; do
	go test -run='^$' -fuzz="^${target}\$" -fuzztime=15s -timeout 10m ./openaihttp/
done
elapsed "fuzz"

phase "end-to-end dependencies"
./scripts/e2e-deps.sh
elapsed "end-to-end dependencies"

phase "rules and dashboards"
# The committed rule files, dashboards and runbook are what the generator
# writes; promtool 2 and 3 check the rules and pass their unit tests.
(cd mixin && E2E_REQUIRED=1 go test -race -count=1 -timeout 10m ./...)
elapsed "rules and dashboards"

phase "end-to-end suite"
(cd e2e && E2E_REQUIRED=1 go test -count=1 -timeout 40m ./...)
elapsed "end-to-end suite"
