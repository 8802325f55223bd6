#!/usr/bin/env bash
# The flake hunt on a many-core machine without Go: run test binaries built
# beforehand (scripts/flake-pinned.sh build, here) each pinned to its own
# pair of cores with two busy loops on the same pair, so every package sees
# the 2 loaded cores of a CI box, and several packages run at once.
#
#   scripts/flake-pinned.sh build            # here: bin/flake/{*.test,plain/,race/}
#                                            # (FLAKE_PKGS="a b" picks the packages)
#   scripts/flake-pinned.sh run COUNT [PKG…] # there: one core pair per job
#
# A job is PKG or PKG:N (the package's COUNT split over N pairs), with an
# optional @C for a count of its own (e.g. gateway@20).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bin/flake
case ${1:-} in
build)
	rm -rf "$out" && mkdir -p "$out/plain" "$out/race"
	go build -ldflags "-s -w" -o "$out/plain/tsd" ./cmd/tsd
	go build -ldflags "-s -w" -o "$out/plain/ts-fake" ./cmd/ts-fake
	go build -race -ldflags "-s -w" -o "$out/race/ts-fake" ./cmd/ts-fake
	for p in ${FLAKE_PKGS:-cmd/tsd cmd/ts-fake supervisor supervisor/telemetry gateway}; do
		go test -c -race -ldflags "-s -w" -o "$out/$(echo $p | tr / _).test" ./$p
	done
	ls -la "$out"
	;;
run)
	count=${2:?count}
	shift 2
	(($# > 0)) || set -- cmd/tsd:3 cmd/ts-fake supervisor:2 supervisor/telemetry gateway
	cores=$(nproc)
	pair=0
	pids=()
	logs=()
	for job in "$@"; do
		c=$count
		[[ $job == *@* ]] && c=${job#*@} && job=${job%@*}
		p=${job%%:*} n=1
		[[ $job == *:* ]] && n=${job#*:}
		per=$(((c + n - 1) / n))
		for ((i = 0; i < n; i++)); do
			a=$((pair * 2)) b=$((pair * 2 + 1))
			((b < cores)) || { echo "not enough cores for $job" >&2; exit 2; }
			pair=$((pair + 1))
			pre=$PWD/$out/plain
			[[ $p == cmd/ts-fake ]] && pre=$PWD/$out/race
			log=$PWD/$out/$(echo "$p" | tr / _).$i.log
			bin=$PWD/$out/$(echo "$p" | tr / _).test
			logs+=("$log")
			(
				taskset -c "$a,$b" bash -c 'while :; do :; done' &
				l1=$!
				taskset -c "$a,$b" bash -c 'while :; do :; done' &
				l2=$!
				cd "$p"
				rc=0
				TSD_TEST_PREBUILT=$pre TSD_BIN_DIR=$pre taskset -c "$a,$b" "$bin" \
					-test.count="$per" -test.timeout 30m >"$log" 2>&1 || rc=$?
				kill $l1 $l2 2>/dev/null || true
				echo "$p[$i] cores $a,$b count $per: exit $rc" >>"$log"
				exit $rc
			) &
			pids+=($!)
		done
	done
	rc=0
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || rc=1
		tail -1 "${logs[$i]}"
	done
	exit $rc
	;;
*)
	echo "usage: $0 build | run COUNT [PKG[:N]…]" >&2
	exit 2
	;;
esac
