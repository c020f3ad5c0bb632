#!/usr/bin/env bash
# Installs and builds what the end-to-end suite (e2e/) runs:
#  - prometheus and promtool, from Debian packages, when either is missing;
#  - the OpenTelemetry Collector of e2e/collector (its own module) into
#    e2e/bin/otelcol, when the binary is missing or stale: the stamp next to
#    it holds a hash of the collector's go.mod, go.sum, Go sources and the Go
#    version, so a change to any of them rebuilds it, and an unchanged tree
#    reuses the binary cached from an earlier run on the same machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	echo "e2e-deps: installing prometheus and promtool (Debian package prometheus)"
	start=$SECONDS
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	echo "e2e-deps: prometheus installed in $((SECONDS - start))s"
fi
prometheus --version 2>&1 | head -n 1

collector=e2e/collector
bin=e2e/bin/otelcol
stamp=$bin.stamp
hash=$(
	cd "$collector"
	{
		go version
		go env GOOS GOARCH CGO_ENABLED
		cat go.mod go.sum
		find . -name '*.go' -type f | LC_ALL=C sort | xargs cat
	} | sha256sum | cut -d' ' -f1
)
if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
	echo "e2e-deps: $bin is up to date"
	exit 0
fi
echo "e2e-deps: building $bin from $collector (cold Go caches: minutes; see README, Test)"
start=$SECONDS
mkdir -p "$(dirname "$bin")"
rm -f "$stamp"
(cd "$collector" && go build -trimpath -o ../bin/otelcol.tmp .)
mv -f "$bin.tmp" "$bin"
echo "$hash" >"$stamp"
echo "e2e-deps: $bin built in $((SECONDS - start))s"
