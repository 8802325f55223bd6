#!/usr/bin/env bash
# make flake: run packages' tests FLAKE_COUNT times (-race) while two busy
# loops keep the CPUs loaded, the way a shared CI box or a laptop with a
# build running does. A failure here is a flake to fix at its root cause.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${FLAKE_COUNT:-20}
(($# > 0)) || set -- ./cmd/tsd ./cmd/ts-fake ./supervisor ./supervisor/telemetry ./gateway
busy=()
for _ in 1 2; do
	bash -c 'while :; do :; done' &
	busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
mkdir -p bin
# Its own events file: two hunts run side by side must not write into
# one (the summary then reads a torn file and fails a run that passed).
events=$(mktemp bin/flake-events.XXXXXX.json)
echo "flake: $* × $count with -race, two busy loops (pids ${busy[*]})"
start=$SECONDS
rc=0
go tool gotestsum --format pkgname --hide-summary=skipped --jsonfile "$events" -- \
	-race -count="$count" -timeout 90m "$@" || rc=$?
go run ./cmd/testsummary "$events" || rc=1
rm -f "$events"
echo "flake: $((SECONDS - start)) s"
exit $rc
