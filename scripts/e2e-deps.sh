#!/usr/bin/env bash
# Installs and builds what the end-to-end suite (e2e/) runs:
#  - prometheus and promtool, from Debian packages, when either is missing;
#  - the OpenTelemetry Collector of e2e/collector (its own module) into
#    e2e/bin/otelcol, when the binary is missing or stale: the stamp next to
#    it holds a hash of the collector's go.mod, go.sum, Go sources and the Go
#    version, so a change to any of them rebuilds it, and an unchanged tree
#    reuses the binary cached from an earlier run on the same machine;
#  - Prometheus 3 and its promtool into e2e/bin/prometheus3 and
#    e2e/bin/promtool3, built from the Go module proxy at the pinned module
#    version below and cached the same way (their stamps hold the module
#    version and the Go version), so the suite runs both Debian's 2.x and a
#    current 3.x.
# Each built binary is kept in a cache outside the tree too (cache_dir
# below), from which a fresh clone copies it.
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

# current BIN HASH: whether BIN exists and its stamp (BIN.stamp) holds HASH.
current() {
	[ -x "$1" ] && [ -f "$1.stamp" ] && [ "$(cat "$1.stamp")" = "$2" ]
}

# A built binary is also kept outside the tree, by name and hash, so that a
# fresh clone on the same machine (as CI runs) copies it instead of building
# and linking it again (about 70 s for the three): $INFERMETRICS_E2E_CACHE,
# by default ~/.cache/infermetrics/e2e-bin; a new hash replaces the old.
cache_dir=${INFERMETRICS_E2E_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/infermetrics/e2e-bin}
# cached BIN HASH: BIN made current from the cache, when it holds it.
cached() {
	local c
	c="$cache_dir/$(basename "$1")-$2"
	[ -x "$c" ] || return 1
	mkdir -p "$(dirname "$1")"
	cp -f "$c" "$1.tmp"
	mv -f "$1.tmp" "$1"
	echo "$2" >"$1.stamp"
	echo "e2e-deps: $1 copied from $c"
}
# keep BIN HASH: BIN into the cache, in place of its other versions,
# unless the cache holds it.
keep() {
	local name
	name=$(basename "$1")
	[ -x "$cache_dir/$name-$2" ] && return
	mkdir -p "$cache_dir"
	rm -f "$cache_dir/$name"-*
	cp -f "$1" "$cache_dir/$name-$2.tmp"
	mv -f "$cache_dir/$name-$2.tmp" "$cache_dir/$name-$2"
}

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
if current "$bin" "$hash"; then
	echo "e2e-deps: $bin is up to date"
	keep "$bin" "$hash"
elif cached "$bin" "$hash"; then
	:
else
	echo "e2e-deps: building $bin from $collector (cold Go caches: minutes; see README, Test)"
	start=$SECONDS
	mkdir -p "$(dirname "$bin")"
	rm -f "$stamp"
	(cd "$collector" && go build -trimpath -o ../bin/otelcol.tmp .)
	mv -f "$bin.tmp" "$bin"
	echo "$hash" >"$stamp"
	keep "$bin" "$hash"
	echo "e2e-deps: $bin built in $((SECONDS - start))s"
fi

# Prometheus 3: module github.com/prometheus/prometheus v0.3MM.P is
# Prometheus 3.MM.P; the version is set through ldflags so that --version
# reports it (a plain go install leaves it empty). promtool 3 runs the
# rules' unit tests (mixin/) beside Debian's promtool 2.
prom_module=v0.316.0
minor=${prom_module#v0.3}
minor=${minor%%.*}
prom_version=3.$((10#$minor)).${prom_module##*.}
prom3_hash=$(
	{
		echo "github.com/prometheus/prometheus $prom_module"
		go version
		go env GOOS GOARCH CGO_ENABLED
	} | sha256sum | cut -d' ' -f1
)
# prom3 COMMAND BIN: builds cmd/COMMAND of the module into BIN unless BIN
# is current.
prom3() {
	if current "$2" "$prom3_hash"; then
		echo "e2e-deps: $2 is up to date"
		keep "$2" "$prom3_hash"
		return
	fi
	if cached "$2" "$prom3_hash"; then
		return
	fi
	echo "e2e-deps: building $2 ($1 $prom_version) from the Go module proxy (cold Go caches: minutes; see README, Test)"
	local start=$SECONDS
	mkdir -p "$(dirname "$2")"
	rm -f "$2.stamp"
	local tmp
	tmp=$(mktemp -d "$(dirname "$2")/$1.XXXXXX")
	local v=github.com/prometheus/common/version
	GOBIN="$PWD/$tmp" go install -trimpath \
		-ldflags "-X $v.Version=$prom_version -X $v.Revision=$prom_module -X $v.Branch=module-proxy -X $v.BuildUser=e2e-deps" \
		"github.com/prometheus/prometheus/cmd/$1@$prom_module"
	mv -f "$tmp/$1" "$2"
	rmdir "$tmp"
	echo "$prom3_hash" >"$2.stamp"
	keep "$2" "$prom3_hash"
	echo "e2e-deps: $2 built in $((SECONDS - start))s"
}
prom3 prometheus e2e/bin/prometheus3
prom3 promtool e2e/bin/promtool3
e2e/bin/prometheus3 --version 2>&1 | head -n 1
e2e/bin/promtool3 --version 2>&1 | head -n 1
