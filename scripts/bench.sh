#!/usr/bin/env bash
# Benchmarks of docs/benchmarks.md: the hot path against its anchors
# (hand-written OpenTelemetry, naive and precomputed, and client_golang), the
# scrape against native client_golang, OTLP export, memory per engine and the
# narrowing prototypes, all in one run. Prints benchstat tables and the
# ratios the targets talk about.
#
# Usage: scripts/bench.sh [options]
#   -count N       samples per benchmark and round (default 6, or $COUNT)
#   -rounds R      repeat every go test R times, appending (default 1, or $ROUNDS);
#                  -count 1 -rounds 6 interleaves the variants, which is fairer on a
#                  machine shared with other work
#   -benchtime T   go test -benchtime of the timing benchmarks (default 1s)
#   -o DIR         where the raw results go (default: a new temporary directory)
#   -only LIST     comma list of parts to run: main, narrow, memory, vllm, exemplars,
#                  proxy, instructions, openaihttp, sdk (default all nine); sdk gives the hot path
#                  (BenchmarkIteration, BenchmarkFinished, BenchmarkScheduler: ours, hand-written
#                  precomputed OpenTelemetry, client_golang) at go.mod's OpenTelemetry SDK, the
#                  oldest an adopter may have, and at .ci/newest.mod's, what go get -u gives, side
#                  by side in one run: instructions per op under cachegrind (as instructions below)
#                  and wall time, both binaries in turn; proxy times cmd/infermetrics-proxy
#                  against a plain httputil.ReverseProxy, per request and per streamed chunk
#                  (wall and CPU time, allocations per chunk), against issue 27's goals,
#                  the two proxies in turn per request, over loopback and in process
#                  (BenchmarkProxyRequestPaired, BenchmarkProxyInProcess: mean and median of
#                  the pairs), and the OpenTelemetry records of one request alone
#                  (BenchmarkRequestRecords); instructions counts under valgrind's cachegrind
#                  (one P, no GC: counts that do not move with the machine's speed or load;
#                  apt-get installs valgrind when missing) the instructions of one request
#                  through each proxy in process and of its records alone (each with and
#                  without three attribution dimensions and a price table), and of a content
#                  chunk through openaihttp's handler and transport and of its Record alone,
#                  against issue 27's proposed goals;
#                  vllm times vLLM's own recording path (Python's prometheus_client,
#                  scripts/bench_vllm.py; apt-get installs python3-prometheus-client when
#                  missing) on the same decode step; openaihttp times a 256-chunk SSE stream
#                  through openaihttp, otelhttp and a plain handler and RoundTripper
#                  (openaihttp/internal/benchcmp), and the record of one inter-chunk time alone,
#                  the floor each side's own work per chunk is measured above
#   -rss           also run example/pd under load and report its peak RSS (VmHWM)
#   -rss-rate R    requests per second for -rss (default 40)
#   -rss-duration D  load duration for -rss (default 20s)
#   -ratios FILE   only print the ratios of an existing raw result file
#   -fleet N       only the fleet run: e2e TestFleet with N instances (64 and more: the
#                  issue 34 figures of docs/benchmarks.md; needs scripts/e2e-deps.sh), whose
#                  "fleet figures" line (collector CPU and RSS, the store's series, bytes
#                  pushed per minute) is printed with the machine's load before and after
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-6}
ROUNDS=${ROUNDS:-1}
BENCHTIME=${BENCHTIME:-1s}
OUT=""
ONLY="main,narrow,memory,vllm,exemplars,proxy,instructions,openaihttp,sdk"
# The Debian package installs prometheus_client for the system interpreter.
PYTHON=${PYTHON:-/usr/bin/python3}
RSS=0
RSS_RATE=40
RSS_DURATION=20s
RATIOS_ONLY=""
FLEET=""
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da

while [ $# -gt 0 ]; do
	case "$1" in
	-count) COUNT=$2; shift 2 ;;
	-rounds) ROUNDS=$2; shift 2 ;;
	-benchtime) BENCHTIME=$2; shift 2 ;;
	-o) OUT=$2; shift 2 ;;
	-only) ONLY=$2; shift 2 ;;
	-rss) RSS=1; shift ;;
	-rss-rate) RSS_RATE=$2; shift 2 ;;
	-rss-duration) RSS_DURATION=$2; shift 2 ;;
	-ratios) RATIOS_ONLY=$2; shift 2 ;;
	-fleet) FLEET=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench.sh: unknown option $1 (try -h)" >&2; exit 2 ;;
	esac
done

if [ -n "$FLEET" ]; then
	echo "== Fleet: $FLEET instances through one collector (e2e TestFleet)"
	echo "load before: $(cat /proc/loadavg)"
	log=$(mktemp)
	start=$SECONDS
	(cd e2e && E2E_FLEET=$FLEET E2E_REQUIRED=1 go test -run 'TestFleet$' -count=1 -v -timeout 30m .) >"$log" 2>&1 || {
		tail -n 60 "$log"
		echo "bench.sh: the fleet run failed (log: $log)" >&2
		exit 1
	}
	echo "load after: $(cat /proc/loadavg); wall $((SECONDS - start)) s"
	grep -o 'fleet figures: .*' "$log"
	echo "command: cd e2e && E2E_FLEET=$FLEET E2E_REQUIRED=1 go test -run 'TestFleet\$' -count=1 -v -timeout 30m . (log: $log)"
	exit 0
fi

# values FILE NAME UNIT: UNIT of every line of benchmark NAME (without its
# -GOMAXPROCS suffix), sorted.
values() {
	awk -v name="$2" -v unit="$3" '
		$1 ~ /^Benchmark/ {
			n = $1; sub(/-[0-9]+$/, "", n)
			if (n != name) next
			for (i = 3; i <= NF; i++) if ($i == unit) print $(i-1)
		}' "$1" | sort -g
}

# median FILE NAME UNIT: the median of values; empty when there is none.
median() {
	values "$@" | awk '{ v[NR] = $1 } END {
			if (NR == 0) exit
			if (NR % 2) printf "%.6g\n", v[(NR+1)/2]; else printf "%.6g\n", (v[NR/2] + v[NR/2+1]) / 2
		}'
}

# spread FILE NAME UNIT: "min-max" of values.
spread() {
	values "$@" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%.6g-%.6g\n", lo, hi }'
}

# diff_of A B [DECIMALS]: A-B (0 decimals unless given), or "n/a".
diff_of() {
	if [ -z "$1" ] || [ -z "$2" ] || [ "$1" = n/a ] || [ "$2" = n/a ]; then echo n/a; return; fi
	awk -v a="$1" -v b="$2" -v d="${3:-0}" 'BEGIN { printf "%.*f\n", d, a - b }'
}

# ratio A B: A/B with 3 decimals, or "n/a".
ratio() {
	if [ -z "$1" ] || [ -z "$2" ]; then echo n/a; return; fi
	awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.3f\n", a / b }'
}

# verdict VALUE OP TARGET: "met" or "NOT met" for VALUE OP TARGET (OP is <= or >=).
verdict() {
	if [ "$1" = n/a ]; then echo "not measured"; return; fi
	awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN {
		ok = (op == "<=") ? (v <= t) : (v >= t)
		print ok ? "met" : "NOT met"
	}'
}

print_ratios() {
	local f=$1
	echo
	echo "== Ratios (medians of ns/op in this run) vs the targets"
	for step in Iteration Finished Scheduler; do
		local ours naive pre cg allocs r1 r2 r3
		ours=$(median "$f" "Benchmark$step/infermetrics" ns/op)
		[ -n "$ours" ] || continue
		naive=$(median "$f" "Benchmark$step/otel_naive" ns/op)
		pre=$(median "$f" "Benchmark$step/otel_precomputed" ns/op)
		cg=$(median "$f" "Benchmark$step/client_golang" ns/op)
		allocs=$(median "$f" "Benchmark$step/infermetrics" allocs/op)
		r1=$(ratio "$ours" "$pre")
		r2=$(ratio "$naive" "$ours")
		r3=$(ratio "$ours" "$cg")
		printf '%-9s ours=%sns  otel_precomputed=%sns  otel_naive=%sns  client_golang=%sns\n' \
			"$step" "$ours" "$pre" "$naive" "$cg"
		printf '  ours / otel_precomputed = %-7s target <= 1.0x  %s\n' "$r1" "$(verdict "$r1" '<=' 1.0)"
		printf '  ours allocs/op          = %-7s target 0        %s\n' "${allocs:-n/a}" "$(verdict "${allocs:-n/a}" '<=' 0)"
		printf '  otel_naive / ours       = %-7s target >= 3x    %s\n' "$r2" "$(verdict "$r2" '>=' 3)"
		printf '  ours / client_golang    = %-7s (reported; no target)\n' "$r3"
	done
	local py pyobs
	py=$(median "$f" BenchmarkIteration/vllm_prometheus_client ns/op)
	if [ -n "$py" ]; then
		ours=$(median "$f" BenchmarkIteration/infermetrics ns/op)
		pyobs=$(median "$f" BenchmarkObserve/vllm_prometheus_client ns/op)
		printf "vLLM's path (Python prometheus_client, the same decode step) = %sns; ours = %sns\n" "$py" "${ours:-n/a}"
		printf '  vllm / ours             = %-7s (reported; no target)\n' "$(ratio "$py" "$ours")"
		printf '  one pre-bound Python histogram observe = %sns; ours per inter-token latency (step / %s values) = %sns\n' \
			"$pyobs" 256 "$(awk -v o="${ours:-0}" 'BEGIN { printf "%.0f", o / 256 }')"
	fi
	for v in exemplars_off exemplars_on_no_span exemplars_on_sampled_step exemplars_on_sampled_requests; do
		m=$(median "$f" "BenchmarkExemplars/$v" ns/op)
		[ -n "$m" ] || continue
		[ "$v" != exemplars_off ] || echo "Exemplars, decode step (ns/op, allocs/op, ratio to exemplars_off):"
		printf '  %-32s %10sns %5s allocs  %6sx\n' "$v" "$m" "$(median "$f" "BenchmarkExemplars/$v" allocs/op)" \
			"$(ratio "$m" "$(median "$f" BenchmarkExemplars/exemplars_off ns/op)")"
	done
	local p1 bench title
	for bench in Paired NarrowPaired; do
		if [ "$bench" = Paired ]; then
			title="Paired (the four variants timed inside each op, rotating order; medians of the per-run ratios):"
		else
			title="NarrowPaired (the same, every OpenTelemetry variant with exemplars off, as exporters.Setup configures by default):"
		fi
		for step in iteration finished scheduler; do
			p1=$(median "$f" "Benchmark$bench/$step" ours/precomputed)
			[ -n "$p1" ] || continue
			[ "$step" != iteration ] || echo "$title"
			printf '  %-9s ours / otel_precomputed = %-6s %-8s otel_naive / ours = %-6s %-8s ours / client_golang = %s\n' "$step" \
				"$p1" "$(verdict "$p1" '<=' 1.0)" \
				"$(median "$f" "Benchmark$bench/$step" naive/ours)" "$(verdict "$(median "$f" "Benchmark$bench/$step" naive/ours)" '>=' 3)" \
				"$(median "$f" "Benchmark$bench/$step" ours/client_golang)"
		done
	done
	local s_ours s_cg r
	s_ours=$(median "$f" BenchmarkScrape/infermetrics ns/op)
	if [ -n "$s_ours" ]; then
		s_cg=$(median "$f" BenchmarkScrape/client_golang ns/op)
		r=$(ratio "$s_ours" "$s_cg")
		printf 'Scrape    ours=%sns  client_golang=%sns\n' "$s_ours" "$s_cg"
		printf '  ours / client_golang    = %-7s target <= 3x    %s\n' "$r" "$(verdict "$r" '<=' 3)"
	fi
	local otlp
	otlp=$(median "$f" BenchmarkOTLPExport ns/op)
	[ -z "$otlp" ] || printf 'OTLPExport collect+export of 4 engines = %sns (%s data points)\n' \
		"$otlp" "$(median "$f" BenchmarkOTLPExport points/export)"
	local m
	for v in infermetrics infermetrics_exemplars_off client_golang; do
		m=$(median "$f" "BenchmarkMemoryPerEngine/$v" B/engine)
		[ -z "$m" ] || printf 'Memory    %-27s %s B/engine (first engine with set-up: %s B; %s series/engine)\n' "$v" "$m" \
			"$(median "$f" "BenchmarkMemoryPerEngine/$v" B/first_engine)" \
			"$(median "$f" "BenchmarkMemoryPerEngine/$v" series/engine)"
	done
	local base
	for step in iteration finished scheduler; do
		base=$(median "$f" "BenchmarkNarrow/$step/infermetrics" ns/op)
		[ -n "$base" ] || continue
		echo "Narrowing, $step step: each variant / infermetrics (views.VLLM), and / client_golang"
		cg=$(median "$f" "BenchmarkNarrow/$step/client_golang" ns/op)
		for v in infermetrics infermetrics_exemplars_off otel_naive otel_precomputed client_golang; do
			m=$(median "$f" "BenchmarkNarrow/$step/$v" ns/op)
			[ -z "$m" ] || printf '  %-42s %10sns  %6sx  %7sx\n' "$v" "$m" "$(ratio "$m" "$base")" "$(ratio "$m" "$cg")"
		done
	done
	local pr pp
	pr=$(median "$f" BenchmarkProxyRequest/infermetrics ns/op)
	if [ -n "$pr" ] || [ -n "$(median "$f" BenchmarkRequestRecords/instructions instr/op)" ]; then
		echo "Proxy (cmd/infermetrics-proxy vs a plain httputil.ReverseProxy, loopback, client and upstream included;"
		echo "  medians [min-max]; cpu: the process's CPU time, getrusage):"
		local over cpuover
		pp=$(median "$f" BenchmarkProxyRequest/plain ns/op)
		over=$(diff_of "$pr" "$pp")
		cpuover=$(diff_of "$(median "$f" BenchmarkProxyRequest/infermetrics cpu-ns/op)" "$(median "$f" BenchmarkProxyRequest/plain cpu-ns/op)")
		if [ -n "$pr" ]; then
			printf '  request (not streamed): plain=%sns [%s]  infermetrics=%sns [%s]  cpu plain=%sns infermetrics=%sns\n' \
				"$pp" "$(spread "$f" BenchmarkProxyRequest/plain ns/op)" "$pr" "$(spread "$f" BenchmarkProxyRequest/infermetrics ns/op)" \
				"$(median "$f" BenchmarkProxyRequest/plain cpu-ns/op)" "$(median "$f" BenchmarkProxyRequest/infermetrics cpu-ns/op)"
			printf '    overhead = %sns (cpu %sns)   target <= 10000ns  %s (cpu: %s)\n' "$over" "$cpuover" \
				"$(verdict "$over" '<=' 10000)" "$(verdict "$cpuover" '<=' 10000)"
			local paired inproc b
			paired=$(median "$f" BenchmarkProxyRequestPaired overhead-ns/op)
			inproc=$(median "$f" BenchmarkProxyInProcess/paired overhead-ns/op)
			for b in BenchmarkProxyRequestPaired BenchmarkProxyInProcess/paired; do
				[ -n "$(median "$f" $b overhead-ns/op)" ] || continue
				printf '    %s (the two proxies in turn, each request timed%s):\n' "$b" \
					"$([ $b = BenchmarkProxyInProcess/paired ] && echo '; in process: no socket, no scheduler wait')"
				printf '      overhead, mean of pairs = %sns [%s]   target <= 10000ns  %s\n' "$(median "$f" $b overhead-ns/op)" \
					"$(spread "$f" $b overhead-ns/op)" "$(verdict "$(median "$f" $b overhead-ns/op)" '<=' 10000)"
				printf '      overhead, median pair   = %sns [%s] (the typical request)\n' "$(median "$f" $b median-overhead-ns/op)" \
					"$(spread "$f" $b median-overhead-ns/op)"
			done
			local rr
			rr=$(median "$f" BenchmarkRequestRecords ns/op)
			if [ -n "$rr" ]; then
				printf '    the OpenTelemetry records alone (BenchmarkRequestRecords: client request, leg, HTTP families): %sns [%s] (cpu %s)\n' \
					"$rr" "$(spread "$f" BenchmarkRequestRecords ns/op)" "$(median "$f" BenchmarkRequestRecords cpu-ns/op)"
				printf '    ours per request = overhead - records = %sns (cpu %sns; paired %sns; in process %sns)\n' "$(diff_of "$over" "$rr")" \
					"$(diff_of "$cpuover" "$(median "$f" BenchmarkRequestRecords cpu-ns/op)")" "$(diff_of "${paired:-n/a}" "$rr")" \
					"$(diff_of "${inproc:-n/a}" "$rr")"
			fi
		fi
		local ip io ir iover ours side
		ip=$(median "$f" BenchmarkProxyInProcess/plain/instructions instr/op)
		io=$(median "$f" BenchmarkProxyInProcess/infermetrics/instructions instr/op)
		ir=$(median "$f" BenchmarkRequestRecords/instructions instr/op)
		if [ -n "$io" ]; then
			iover=$(diff_of "$io" "$ip")
			printf '    instructions per request (cachegrind, in process, one P, no GC): plain=%s infermetrics=%s overhead=%s\n' \
				"$ip" "$io" "$iover"
			ours=$(diff_of "$iover" "$ir")
			printf '      the records alone=%s   ours = overhead - records = %s (%s%% of the overhead is the records)\n' "$ir" \
				"$ours" "$(awk -v r="$ir" -v o="$iover" 'BEGIN { if (o > 0) printf "%.0f", 100 * r / o; else print "n/a" }')"
			printf '      ours   target <= 25000 (proposed, issue 27)  %s\n' "$(verdict "$ours" '<=' 25000)"
			local ipa ia ira iovera oursa
			ipa=$(median "$f" BenchmarkProxyInProcess/plain-attributed/instructions instr/op)
			ia=$(median "$f" BenchmarkProxyInProcess/attributed/instructions instr/op)
			ira=$(median "$f" BenchmarkRequestRecordsAttributed/instructions instr/op)
			if [ -n "$ia" ]; then
				iovera=$(diff_of "$ia" "$ipa")
				oursa=$(diff_of "$iovera" "$ira")
				printf '    with three attribution dimensions (a header, the body'"'"'s user, the API key) and a price table:\n'
				printf '      plain=%s attributed=%s overhead=%s, the records alone=%s, ours = overhead - records = %s\n' \
					"$ipa" "$ia" "$iovera" "$ira" "$oursa"
				printf '      attribution adds %s to the overhead (%s to the records, %s to ours)   ours target <= 25000  %s\n' \
					"$(diff_of "$iovera" "$iover")" "$(diff_of "$ira" "$ir")" \
					"$(diff_of "$oursa" "$ours")" "$(verdict "$oursa" '<=' 25000)"
			fi
			for side in Handler Transport; do
				local rec
				rec=$( [ $side = Handler ] && echo handler || echo transport )
				ours=$(awk -v a="$(median "$f" "Benchmark${side}Stream/infermetrics/instructions" instr/op)" \
					-v p="$(median "$f" "Benchmark${side}Stream/plain/instructions" instr/op)" \
					-v r="$(median "$f" "BenchmarkChunkGapRecord/$rec/instructions" instr/op)" \
					'BEGIN { if (a == "" || p == "" || r == "") print "n/a"; else printf "%.0f\n", (a - p) / 256 - r }')
				printf '    instructions per content chunk, %-9s ours = side - plain - Record = %s (Record %s)   target <= 1500 (proposed)  %s\n' \
					"$side:" "$ours" "$(median "$f" "BenchmarkChunkGapRecord/$rec/instructions" instr/op)" "$(verdict "$ours" '<=' 1500)"
			done
		fi
		local v sp
		sp=$(median "$f" BenchmarkProxyStream/plain ns/chunk)
		if [ -n "$sp" ]; then
			for v in plain infermetrics include-usage; do
				printf '  stream of 100 chunks, %-13s %sns/chunk [%s]  cpu %sns/chunk [%s]  allocs/chunk %s\n' "$v:" \
					"$(median "$f" "BenchmarkProxyStream/$v" ns/chunk)" "$(spread "$f" "BenchmarkProxyStream/$v" ns/chunk)" \
					"$(median "$f" "BenchmarkProxyStream/$v" cpu-ns/chunk)" "$(spread "$f" "BenchmarkProxyStream/$v" cpu-ns/chunk)" \
					"$(median "$f" "BenchmarkProxyStream/$v" allocs/chunk)"
			done
			for v in infermetrics include-usage; do
				over=$(diff_of "$(median "$f" "BenchmarkProxyStream/$v" ns/chunk)" "$sp")
				cpuover=$(diff_of "$(median "$f" "BenchmarkProxyStream/$v" cpu-ns/chunk)" "$(median "$f" BenchmarkProxyStream/plain cpu-ns/chunk)")
				printf '    %-13s overhead per chunk = %sns (cpu %sns)   target <= 1000ns  %s (cpu: %s)\n' "$v" "$over" "$cpuover" \
					"$(verdict "$over" '<=' 1000)" "$(verdict "$cpuover" '<=' 1000)"
			done
			# allocs/chunk is the whole process's (client, upstream, the
			# runtime): a fraction is background, as plain shows.
			over=$(diff_of "$(median "$f" BenchmarkProxyStream/infermetrics allocs/chunk)" "$(median "$f" BenchmarkProxyStream/plain allocs/chunk)" 2)
			printf '    infermetrics allocs/chunk - plain = %s   target 0 (< 0.5: none per chunk)  %s\n' "$over" "$(verdict "$over" '<=' 0.5)"
		fi
	fi
	local side ours_c plain_c otel_c lower floor cfloor ours
	for side in Handler Transport; do
		ours_c=$(median "$f" "Benchmark${side}Stream/infermetrics" ns/chunk)
		[ -n "$ours_c" ] || continue
		[ "$side" != Handler ] || echo "openaihttp, 256-chunk SSE stream, per content chunk (medians [min-max]; wall ns, cpu ns from getrusage):"
		plain_c=$(median "$f" "Benchmark${side}Stream/plain" ns/chunk)
		otel_c=$(median "$f" "Benchmark${side}Stream/otelhttp" ns/chunk)
		printf '  %-9s infermetrics=%sns [%s] (cpu %s)  otelhttp=%sns (cpu %s)  plain=%sns (cpu %s)  allocs/chunk=%s\n' "$side" \
			"$ours_c" "$(spread "$f" "Benchmark${side}Stream/infermetrics" ns/chunk)" \
			"$(median "$f" "Benchmark${side}Stream/infermetrics" cpu-ns/chunk)" \
			"$otel_c" "$(median "$f" "Benchmark${side}Stream/otelhttp" cpu-ns/chunk)" \
			"$plain_c" "$(median "$f" "Benchmark${side}Stream/plain" cpu-ns/chunk)" \
			"$(median "$f" "Benchmark${side}Stream/infermetrics" allocs/chunk)"
		lower=$(echo "$side" | tr 'A-Z' 'a-z')
		floor=$(median "$f" "BenchmarkChunkGapRecord/$lower" ns/op)
		[ -n "$floor" ] || continue
		cfloor=$(median "$f" "BenchmarkChunkGapRecord/$lower" cpu-ns/op)
		printf '    the OpenTelemetry Record alone (BenchmarkChunkGapRecord/%s, %s attributes): %sns [%s] (cpu %s)\n' "$lower" \
			"$([ "$side" = Handler ] && echo 2 || echo 7)" "$floor" "$(spread "$f" "BenchmarkChunkGapRecord/$lower" ns/op)" "$cfloor"
		ours=$(diff_of "$(diff_of "$ours_c" "$plain_c" 1)" "$floor" 1)
		printf '    ours = infermetrics - plain - Record = %sns (cpu %sns)   target <= 150ns  %s (cpu: %s)\n' "$ours" \
			"$(diff_of "$(diff_of "$(median "$f" "Benchmark${side}Stream/infermetrics" cpu-ns/chunk)" "$(median "$f" "Benchmark${side}Stream/plain" cpu-ns/chunk)" 1)" "$cfloor" 1)" \
			"$(verdict "$ours" '<=' 150)" \
			"$(verdict "$(diff_of "$(diff_of "$(median "$f" "Benchmark${side}Stream/infermetrics" cpu-ns/chunk)" "$(median "$f" "Benchmark${side}Stream/plain" cpu-ns/chunk)" 1)" "$cfloor" 1)" '<=' 150)"
	done
	local c1 c2
	c1=$(median "$f" BenchmarkNarrowCollect/otel_precomputed ns/op)
	c2=$(median "$f" BenchmarkNarrowCollect/infermetrics ns/op)
	[ -z "$c1" ] || printf 'Collect of 4 engines: otel_precomputed=%sns  infermetrics=%sns  (infermetrics/precomputed = %s)\n' \
		"$c1" "$c2" "$(ratio "$c2" "$c1")"
}

# sdk_benchmarks are the sdk part's benchmarks and the ops each is counted
# over under cachegrind.
sdk_benchmarks="BenchmarkIteration/infermetrics:400 BenchmarkIteration/otel_precomputed:400 BenchmarkIteration/client_golang:400
BenchmarkFinished/infermetrics:4000 BenchmarkFinished/otel_precomputed:4000 BenchmarkFinished/client_golang:4000
BenchmarkScheduler/infermetrics:2000 BenchmarkScheduler/otel_precomputed:2000 BenchmarkScheduler/client_golang:2000"

# print_sdk FILE: the sdk part's figures side by side, newest / min.
print_sdk() {
	local f=$1 bench a b
	grep -q '/sdk=' "$f" 2>/dev/null || return 0
	echo
	echo "== The hot path at go.mod's OpenTelemetry SDK (min) and at .ci/newest.mod's (newest)"
	grep '^# sdk=' "$f" | sed 's/^# /  /'
	printf '  %-36s %14s %14s %8s   %12s %12s %8s\n' benchmark "instr min" "instr newest" ratio "ns min" "ns newest" ratio
	for spec in $sdk_benchmarks; do
		bench=${spec%:*}
		a=$(median "$f" "$bench/sdk=min/instructions" instr/op)
		b=$(median "$f" "$bench/sdk=newest/instructions" instr/op)
		printf '  %-36s %14s %14s %8s   %12s %12s %8s\n' "$bench" "${a:-n/a}" "${b:-n/a}" "$(ratio "$b" "$a")" \
			"$(median "$f" "$bench/sdk=min" ns/op)" "$(median "$f" "$bench/sdk=newest" ns/op)" \
			"$(ratio "$(median "$f" "$bench/sdk=newest" ns/op)" "$(median "$f" "$bench/sdk=min" ns/op)")"
	done
	a=$(median "$f" BenchmarkIteration/infermetrics/sdk=min/instructions instr/op)
	b=$(median "$f" BenchmarkIteration/infermetrics/sdk=newest/instructions instr/op)
	printf '  decode step, newest / min (instructions) = %-7s goal <= 1.1x  %s\n' "$(ratio "$b" "$a")" "$(verdict "$(ratio "$b" "$a")" '<=' 1.1)"
}

if [ -n "$RATIOS_ONLY" ]; then
	print_ratios "$RATIOS_ONLY"
	print_sdk "$RATIOS_ONLY"
	exit 0
fi

[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/infermetrics-bench.XXXXXX")
mkdir -p "$OUT"
RAW=$OUT/bench.txt
: >"$RAW"

# benchstat from the module proxy (a pinned version known to be served).
BENCHSTAT=$OUT/benchstat
if ! [ -x "$BENCHSTAT" ]; then
	GOBIN=$(cd "$OUT" && pwd) go install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION"
fi

{
	echo "# date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
	echo "# $(go version)"
	echo "# nproc: $(nproc); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# go test -count=$COUNT, $ROUNDS round(s), -benchtime=$BENCHTIME"
} | tee "$OUT/env.txt"

has() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# need_valgrind installs valgrind (Debian package) when missing.
need_valgrind() {
	command -v valgrind >/dev/null && return
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	echo "bench: installing valgrind (Debian package)" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends valgrind >/dev/null
}

# instructions BIN PATTERN N: the instructions executed per op of benchmark
# PATTERN of test binary BIN under cachegrind, one P and no garbage
# collection (GOMAXPROCS=1 GOGC=off: no spinning scheduler, no GC cycle
# falling on one run): those of 2N ops less those of N, over N. They do not
# move with the machine's speed or load; the GC's share is in B/op and
# allocs/op instead. N is large enough that what the runtime does besides (a
# few hundred thousand instructions a run) moves a figure by less than 1%.
instructions() {
	local irs=() n
	for n in "$3" "$(($3 * 2))"; do
		irs+=("$(GOMAXPROCS=1 GOGC=off valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
			"$1" -test.run='^$' -test.bench="$2" -test.benchtime="${n}x" 2>&1 |
			awk '/I *refs:/ { gsub(",", "", $4); print $4 }')")
	done
	echo "$(((irs[1] - irs[0]) / $3))"
}

# sdk_part builds instrument's benchmarks at go.mod's OpenTelemetry SDK and
# at .ci/newest.mod's, and writes to $OUT/sdk.txt, named
# BenchmarkX/variant/sdk=min or sdk=newest: instructions per op of each, then
# $COUNT wall-time samples of each binary in turn.
sdk_part() {
	need_valgrind
	local sdk bin spec bench n pattern
	go test -c -o "$OUT/instrument-min.test" ./instrument
	go test -c -modfile=.ci/newest.mod -o "$OUT/instrument-newest.test" ./instrument
	{
		echo "# sdk=min: go.opentelemetry.io/otel/sdk/metric $(go list -m -f '{{.Version}}' go.opentelemetry.io/otel/sdk/metric) (go.mod)"
		echo "# sdk=newest: go.opentelemetry.io/otel/sdk/metric $(go list -modfile=.ci/newest.mod -m -f '{{.Version}}' go.opentelemetry.io/otel/sdk/metric) (.ci/newest.mod)"
	} | tee -a "$OUT/sdk.txt" "$OUT/env.txt"
	for spec in $sdk_benchmarks; do
		bench=${spec%:*} n=${spec#*:}
		pattern="^${bench%%/*}\$/^${bench#*/}\$"
		for sdk in min newest; do
			printf '%s/sdk=%s/instructions 1 %d instr/op\n' "$bench" "$sdk" \
				"$(instructions "$OUT/instrument-$sdk.test" "$pattern" "$n")" | tee -a "$OUT/sdk.txt"
		done
	done
	for _ in $(seq 1 "$COUNT"); do
		for sdk in min newest; do
			"$OUT/instrument-$sdk.test" -test.run='^$' -test.bench='^Benchmark(Iteration|Finished|Scheduler)$/^(infermetrics|otel_precomputed|client_golang)$' \
				-test.benchmem -test.benchtime="$BENCHTIME" -test.count=1 |
				sed -nE "s#^(Benchmark[^[:space:]]*)(-[0-9]+)([[:space:]])#\1/sdk=$sdk\2\3#p" | tee -a "$OUT/sdk.txt"
		done
	done
}

# One go test per package and part: packages never benchmark concurrently.
for round in $(seq 1 "$ROUNDS"); do
	echo "== round $round/$ROUNDS" >&2
	if has main; then
		go test -run='^$' -bench='^Benchmark(Iteration|Finished|Scheduler|Paired)$' -benchmem \
			-count="$COUNT" -benchtime="$BENCHTIME" ./instrument | tee -a "$RAW"
		go test -run='^$' -bench='^Benchmark(Scrape|OTLPExport)$' -benchmem \
			-count="$COUNT" -benchtime="$BENCHTIME" ./exporters | tee -a "$RAW"
	fi
	if has narrow; then
		go test -run='^$' -bench='^BenchmarkNarrow' -benchmem \
			-count="$COUNT" -benchtime="$BENCHTIME" ./instrument | tee -a "$RAW"
	fi
	if has exemplars; then
		go test -run='^$' -bench='^BenchmarkExemplars$' -benchmem \
			-count="$COUNT" -benchtime="$BENCHTIME" ./instrument | tee -a "$RAW"
	fi
	if has vllm; then
		if ! "$PYTHON" -c 'import prometheus_client' 2>/dev/null; then
			sudo=""
			if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
			echo "bench: installing python3-prometheus-client (Debian package) for $PYTHON" >&2
			$sudo apt-get update -qq
			DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-prometheus-client >/dev/null
		fi
		pysec=1
		case "$BENCHTIME" in *[0-9]s) pysec=${BENCHTIME%s} ;; esac
		"$PYTHON" scripts/bench_vllm.py -count "$COUNT" -seconds "$pysec" | tee -a "$RAW"
		# Ours on the same step, in the same run (main times it already).
		has main || go test -run='^$' -bench='^BenchmarkIteration$/^infermetrics$' -benchmem \
			-count="$COUNT" -benchtime="$BENCHTIME" ./instrument | tee -a "$RAW"
	fi
	if has proxy; then
		go test -run='^$' -bench='^Benchmark(Proxy(Request|RequestPaired|InProcess|Stream)|RequestRecords)$' -benchmem \
			-count="$COUNT" -benchtime="$BENCHTIME" ./cmd/infermetrics-proxy | tee -a "$RAW"
	fi
	if has instructions; then
		need_valgrind
		go test -c -o "$OUT/proxy.test" ./cmd/infermetrics-proxy
		(cd openaihttp/internal/benchcmp && go test -c -o "$OUT/benchcmp.test" .)
		# Instructions per op (see instructions); stream ops are 256 content
		# chunks.
		for spec in proxy:BenchmarkProxyInProcess/plain:2000 proxy:BenchmarkProxyInProcess/infermetrics:2000 \
			proxy:BenchmarkRequestRecords:20000 proxy:BenchmarkProxyInProcess/plain-attributed:2000 \
			proxy:BenchmarkProxyInProcess/attributed:2000 proxy:BenchmarkRequestRecordsAttributed:20000 \
			benchcmp:BenchmarkHandlerStream/plain:2000 \
			benchcmp:BenchmarkHandlerStream/infermetrics:2000 benchcmp:BenchmarkTransportStream/plain:2000 \
			benchcmp:BenchmarkTransportStream/infermetrics:2000 benchcmp:BenchmarkChunkGapRecord/handler:100000 \
			benchcmp:BenchmarkChunkGapRecord/transport:100000; do
			bin=${spec%%:*} rest=${spec#*:}
			bench=${rest%:*} local_n=${rest#*:}
			pattern="^$bench\$"
			case "$bench" in */*) pattern="^${bench%%/*}\$/^${bench#*/}\$" ;; esac
			printf '%s/instructions 1 %d instr/op\n' "$bench" "$(instructions "$OUT/$bin.test" "$pattern" "$local_n")" | tee -a "$RAW"
		done
	fi
	if has sdk; then
		sdk_part
	fi
	if has openaihttp; then
		# Per content chunk beside otelhttp: a module of its own, otelhttp is a
		# benchmark-only dependency.
		(cd openaihttp/internal/benchcmp && go test -run='^$' -bench='^Benchmark((Handler|Transport)Stream|ChunkGapRecord)$' \
			-benchmem -count="$COUNT" -benchtime="$BENCHTIME" .) | tee -a "$RAW"
	fi
	if has memory; then
		# Each op builds two complete set-ups: a few ops are enough.
		go test -run='^$' -bench='^BenchmarkMemoryPerEngine$' -benchtime=3x \
			-count="$COUNT" ./exporters | tee -a "$RAW"
	fi
	echo "# load average after round $round: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

# The variant is the last part of a sub-benchmark's name; benchstat compares
# across a name key, so rename BenchmarkX/a/b-2 to BenchmarkX/a/variant=b-2.
sed -E 's#^(Benchmark[^[:space:]]*)/([A-Za-z_]+)(-[0-9]+)?([[:space:]])#\1/variant=\2\3\4#' "$RAW" >"$OUT/variants.txt"

echo
echo "== benchstat: every benchmark"
"$BENCHSTAT" "$RAW"
if has main; then
	echo
	echo "== benchstat: variants side by side (vs base = infermetrics)"
	"$BENCHSTAT" -col /variant -filter '.name:(Iteration OR Finished OR Scheduler OR Scrape)' "$OUT/variants.txt"
	echo
	echo "== benchstat: paired ratios (the four variants timed inside each op)"
	"$BENCHSTAT" -filter '.name:Paired .unit:(ours/precomputed OR naive/ours OR ours/client_golang)' "$RAW"
fi
if has narrow; then
	echo
	echo "== benchstat: narrowing prototypes (vs base = infermetrics on views.VLLM)"
	"$BENCHSTAT" -col /variant -filter '.name:Narrow' "$OUT/variants.txt"
	echo
	echo "== benchstat: paired ratios with exemplars off"
	"$BENCHSTAT" -filter '.name:NarrowPaired .unit:(ours/precomputed OR naive/ours OR ours/client_golang)' "$RAW"
fi

print_ratios "$RAW" | tee "$OUT/ratios.txt"
if has sdk; then
	echo
	echo "== benchstat: the hot path at the minimum and the newest SDK (wall time; columns by sdk)"
	"$BENCHSTAT" -col /sdk -filter '-.unit:instr/op' "$OUT/sdk.txt"
	print_sdk "$OUT/sdk.txt" | tee -a "$OUT/ratios.txt"
fi

if [ "$RSS" = 1 ]; then
	echo
	echo "== Peak RSS of example/pd under load (-rate $RSS_RATE -duration $RSS_DURATION)"
	go build -o "$OUT/pd" ./example/pd
	"$OUT/pd" -rate "$RSS_RATE" -duration "$RSS_DURATION" -log-interval 5s \
		-prefill-listen 127.0.0.1:0 -decode-listen 127.0.0.1:0 >"$OUT/pd.out" 2>"$OUT/pd.err" &
	PD=$!
	trap 'kill -INT $PD 2>/dev/null || true' EXIT
	for _ in $(seq 50); do
		[ "$(grep -c 'metrics: http' "$OUT/pd.out" || true)" -ge 2 ] && break
		sleep 0.1
	done
	URLS=$(grep -o 'http://[^ ]*' "$OUT/pd.out" || true)
	# Scrape both instances every second while the load runs, as Prometheus would.
	SCRAPES=0
	while kill -0 "$PD" 2>/dev/null && ! grep -q 'load finished' "$OUT/pd.err"; do
		for u in $URLS; do
			curl -fsS -o /dev/null "$u" && SCRAPES=$((SCRAPES + 1)) || true
		done
		sleep 1
	done
	HWM=$(awk '/^VmHWM/ { print $2, $3 }' "/proc/$PD/status")
	RSSNOW=$(awk '/^VmRSS/ { print $2, $3 }' "/proc/$PD/status")
	kill -INT "$PD"
	wait "$PD" || true
	trap - EXIT
	echo "pd peak RSS (VmHWM) = $HWM; RSS at the end of the load = $RSSNOW; $SCRAPES scrapes during the load" | tee -a "$OUT/ratios.txt"
	echo "command: $OUT/pd -rate $RSS_RATE -duration $RSS_DURATION -log-interval 5s -prefill-listen 127.0.0.1:0 -decode-listen 127.0.0.1:0"
fi

echo
echo "raw results: $RAW (ratios: $OUT/ratios.txt)"
