#!/usr/bin/env bash
# The whole test suite: staticcheck and vet, race-enabled tests of the
# library, a brief run of openaihttp's fuzz targets, the rules and
# dashboards of mixin/ (its own module) against promtool 2 and 3, the Helm
# chart of deploy/ (its own module) rendered, linted and decoded, then the
# end-to-end suite (e2e/, its own module) against a real Prometheus and a
# real OpenTelemetry Collector, which scripts/e2e-deps.sh installs and
# builds when missing or stale.
#
# A passing run prints the phases' names and times and go test's own "ok"
# lines; anything else is a failure's report (gotest below fails a run whose
# tests print anything else). Every go test has an explicit -timeout far
# above its run time on an idle machine (README, Test), so a loaded machine
# makes the run slower, not red.
set -euo pipefail
cd "$(dirname "$0")/.."

# Go's build cache and staticcheck's cache key what they keep of a package
# by its directory, so a clone at a new path compiles, vets and analyses
# every package of its own again, however warm the caches (a run on this
# project's 2-core machine: 1,330 CPU-seconds at a path never seen, 1,003 at
# one seen with the same files; docs/testing.md). The run therefore goes on
# through a fixed path, a symbolic link to this checkout
# ($INFERMETRICS_CHECKOUT_LINK, by default ~/.cache/infermetrics/checkout;
# empty: none), held under a lock for the whole run: a clone then reuses
# what an earlier run at that path kept of every package it did not change.
# A run that finds the lock taken (another run at once), something else
# than a link at that path, or no flock or cache directory, goes on at its
# own path.
checkout_link=${INFERMETRICS_CHECKOUT_LINK-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/infermetrics/checkout}
if [ -n "$checkout_link" ] && command -v flock >/dev/null && mkdir -p "$(dirname "$checkout_link")" 2>/dev/null &&
	exec 9>"$checkout_link.lock" 2>/dev/null; then
	if flock -n 9 && { [ -L "$checkout_link" ] || [ ! -e "$checkout_link" ]; } && ln -sfn "$(pwd -P)" "$checkout_link"; then
		cd "$checkout_link"
	else
		exec 9>&-
	fi
fi
printf 'test.sh: at %s\n' "$PWD"

# staticcheck at a pinned version, built through the Go module proxy like
# every other dependency (go run caches the build).
staticcheck_version=v0.8.2
staticcheck() { go run "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version" "$@"; }

phase() { printf 'test.sh: %s\n' "$*"; }
start=$SECONDS
elapsed() { phase "$1 done in $((SECONDS - start)) s"; start=$SECONDS; }

# gotest is go test with its arguments, printing what go test prints (each
# package's ok line, a failed test's output), and failing the run when a
# test printed a stray line besides go test's and t.Log's: a log line on
# stderr, a print, which a reader of a green run takes for an error. A test
# writes through t.Log, and routes what a server or OpenTelemetry logs
# there too (http.Server.ErrorLog, the standard logger: internal/testlog);
# internal/testoutput tells the lines apart in go test -json's output.
testoutput_dir=$(mktemp -d)
testoutput=$testoutput_dir/testoutput
go build -o "$testoutput" ./internal/testoutput
gotest() { go test -json "$@" | "$testoutput"; }

# A stage run beside the next ones (bg_start NAME FUNCTION): its output is
# kept and shown, with its time, when bg_wait NAME waits for it; its failure
# fails the run. A run that stops early waits for it still, and shows it.
declare -A bg_pid bg_log
bg_start() {
	local name=$1
	shift
	bg_log[$name]=$(mktemp)
	phase "$name (beside the next stages)"
	# The stage runs in a subshell of its own with errexit on, as the
	# foreground does: a command in a || list runs with errexit ignored, so
	# a failed step there would go on to the next and the stage end green.
	(
		s=$SECONDS
		set +e
		(
			set -e
			"$@"
		)
		rc=$?
		phase "$name done in $((SECONDS - s)) s"
		exit "$rc"
	) >"${bg_log[$name]}" 2>&1 &
	bg_pid[$name]=$!
}
bg_wait() {
	local name=$1 rc=0
	wait "${bg_pid[$name]}" || rc=$?
	cat "${bg_log[$name]}"
	rm -f "${bg_log[$name]}"
	unset "bg_pid[$name]"
	if [ "$rc" != 0 ]; then
		phase "$name failed"
		return "$rc"
	fi
}
bg_wait_all() {
	local name
	for name in "${!bg_pid[@]}"; do
		bg_wait "$name" || true
	done
}
trap 'bg_wait_all; rm -rf "$testoutput_dir"' EXIT

# The end-to-end stages mostly wait on their processes (Prometheus, the
# collector, the examples, which the tests drive at fixed rates and poll with
# generous deadlines), so they run beside the library's CPU-bound stages,
# from the start: scripts/e2e-deps.sh installs or builds the binaries when
# missing or stale; then, side by side, the end-to-end suite, the rules and
# dashboards (the committed rule files, dashboards and runbook are what the
# generator writes; promtool 2 and 3 check the rules and pass their unit
# tests) and the Helm chart.
rules_stage() { (cd mixin && E2E_REQUIRED=1 gotest -count=1 -timeout 10m ./...); }
# The Helm chart (deploy/, its own module): rendered by Helm's install action
# for each shape, linted by Helm's linter, every object decoded strictly into
# its Kubernetes or Prometheus Operator type, checked against the proxy's
# source, its guide and the generated rules, and the collector configuration
# validated by the suite's collector; and the proxy's image built twice
# without a container daemon (the same digest), checked and pushed to a
# registry on the loopback (docs/kubernetes.md). No -race: its tests start
# no goroutines of their own but the loopback registry's. Its first build
# (Helm's and Kubernetes's packages) is the heavy part (README, Test).
deploy_stage() { (cd deploy && E2E_REQUIRED=1 gotest -count=1 -timeout 15m ./...); }
e2e_stages() {
	local s=$SECONDS rc=0
	./scripts/e2e-deps.sh
	phase "end-to-end dependencies done in $((SECONDS - s)) s"
	bg_start "rules and dashboards" rules_stage
	bg_start "Kubernetes manifests" deploy_stage
	s=$SECONDS
	(cd e2e && E2E_REQUIRED=1 gotest -count=1 -timeout 40m ./...) || rc=$?
	phase "end-to-end suite done in $((SECONDS - s)) s"
	bg_wait "rules and dashboards" || rc=$?
	bg_wait "Kubernetes manifests" || rc=$?
	return "$rc"
}
bg_start "end-to-end" e2e_stages

phase "vet and staticcheck"
go vet ./...
staticcheck ./...
(cd e2e && go vet ./... && staticcheck ./...)
(cd openaihttp/internal/benchcmp && go vet ./... && staticcheck ./...) # benchmarks only: compiled, not run
(cd mixin && go vet ./... && staticcheck ./...)
(cd deploy && go vet ./... && staticcheck ./...) # the Helm chart's tests: a module of its own (Helm, k8s.io/api)
elapsed "vet and staticcheck"

phase "unit tests (-race -count=2)"
# -count=2: a test that leaves global state behind (a claim on the global
# MeterProvider, an error handler) fails its second run.
gotest -race -count=2 -timeout 20m ./...
# A module of its own (gin, echo): net/http, ReverseProxy, gin, echo, HTTP/2.
(cd openaihttp/internal/stacktest && go vet ./... && staticcheck ./... && gotest -race -count=2 -timeout 10m ./...)
elapsed "unit tests"

phase "newest dependencies, whole replays (without -race)"
# go.mod requires the oldest versions the library builds and passes its tests
# with (README, Install), so that an adopter is forced into no upgrade: every
# other stage runs at them. This one builds, vets and tests the root module
# at the newest releases, kept in .ci/newest.mod and .ci/newest.sum (refresh:
# go get -modfile=.ci/newest.mod -u ./... && go mod tidy -modfile=.ci/newest.mod).
# Without -race it is also where the long replays of one goroutine (the
# corpus, the scanner's documents, the bad inputs), which run a fixed part of
# their inputs under -race (internal/sample), run every input.
go build -modfile=.ci/newest.mod ./...
go vet -modfile=.ci/newest.mod ./...
gotest -modfile=.ci/newest.mod -count=1 -timeout 20m ./...
elapsed "newest dependencies, whole replays"

# What clients and servers send, against encoding/json with Python's rules
# (openaihttp/pyjson_test.go), from the seeds of every fixture and a part of
# the replay corpus (fuzzSeeds); a finding is written to
# openaihttp/testdata/fuzz and fails the run. Each target runs a fixed count
# of new inputs (TARGET:COUNT below, about 5 to 10 s of an idle machine
# each), not a duration: a loaded machine makes the stage slower, never
# shorter or red, and a count has no deadline to race (with -fuzztime a
# duration, Go 1.26's fuzzing coordinator can report the end of the time as
# a failure, "context deadline exceeded": golang/go#75804, fixed in Go 1.27;
# CI failed on it once). Minimizing a new input is bounded by a count too.
# The first seconds of each go to running the seeds (the baseline
# coverage); the inputs found are cached in a directory of this run's, not
# in Go's cache, where they would pile up from run to run until the baseline
# took the whole time.
fuzz_targets=(
	FuzzRequestScan:2000
	FuzzOpenAIResponse:8000
	FuzzResponsesAPIResponse:5000
	FuzzAnthropicResponse:20000
	FuzzOllamaResponse:20000
	FuzzRouteOf:100000
	FuzzHandlerTakesLegReads:1500
	FuzzSameEvent:100000
	FuzzOllamaEmbedResponse:15000
)
# The package's test binary is built once, instrumented for fuzzing, and run
# for each target in the package's directory (where a finding is written):
# go test -fuzz would build, link and vet it again for each (13 s of an idle
# machine each, against 4 to 14 s of fuzzing).
fuzz() {
	local entry target count cache bin rc=0
	cache=$(mktemp -d)
	bin=$cache/openaihttp.fuzz.test
	go test -c -fuzz=. -o "$bin" ./openaihttp/
	for entry in "${fuzz_targets[@]}"; do
		target=${entry%%:*} count=${entry#*:}
		(cd openaihttp && "$bin" -test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime="${count}x" \
			-test.fuzzminimizetime=500x -test.timeout=10m -test.fuzzcachedir="$cache/$target") || {
			rc=$?
			break
		}
	done
	rm -rf "$cache"
	return "$rc"
}
phase "fuzz (briefly)"
fuzz
elapsed "fuzz (briefly)"

bg_wait "end-to-end"
