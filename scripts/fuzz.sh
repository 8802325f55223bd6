#!/usr/bin/env bash
# make fuzz: Go fuzz targets for FUZZTIME each — every target of the given
# packages, or (FUZZ_LIST=FILE) the "package target" lines of FILE.
# New interesting inputs stay in the Go build cache's fuzz corpus; a
# failing input lands in the package's testdata/fuzz, which the ordinary
# `go test` then replays.
#
# For a machine without Go (a many-core box for the long run):
#   FUZZ_BUILD=DIR  builds one coverage-instrumented test binary per
#                   package into DIR and exits;
#   FUZZ_PREBUILT=DIR runs those binaries instead of `go test`, FUZZ_JOBS
#                   targets at once (one fuzz worker each), keeping each
#                   target's new corpus under FUZZ_CACHE (default
#                   /tmp/tsd-fuzz-cache).
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-30s}
targets=()
if [[ -n "${FUZZ_LIST:-}" ]]; then
	while read -r pkg f; do
		[[ -z "$pkg" || "$pkg" == \#* ]] && continue
		targets+=("$pkg $f")
	done <"$FUZZ_LIST"
else
	(($# > 0)) || set -- ./...
	for pkg in $(go list "$@"); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
			targets+=("$pkg $f")
		done
	done
fi
module=github.com/tsd-project/tsd
# lastprogress drops the fuzzer's progress lines but its last (the totals).
lastprogress() { awk '/^fuzz: elapsed/ {last = $0; next} {print} END {if (last != "") print last}'; }
binname() { local p=${1#./}; p=${p#"$module"/}; echo "${p//\//_}.test"; }
pkgdir() { local p=${1#./}; p=${p#"$module"}; p=${p#/}; echo "${p:-.}"; }

if [[ -n "${FUZZ_BUILD:-}" ]]; then
	mkdir -p "$FUZZ_BUILD"
	declare -A seen=()
	for tf in "${targets[@]}"; do
		read -r pkg _ <<<"$tf"
		[[ -n "${seen[$pkg]:-}" ]] && continue
		seen[$pkg]=1
		# -d=libfuzzer: the coverage counters `go test -fuzz` would add.
		go test -c -o "$FUZZ_BUILD/$(binname "$pkg")" -gcflags="$module/...=-d=libfuzzer" "$pkg"
	done
	echo "fuzz: binaries in $FUZZ_BUILD"
	exit 0
fi

if [[ -n "${FUZZ_PREBUILT:-}" ]]; then
	bin=$(cd "$FUZZ_PREBUILT" && pwd)
	cache=${FUZZ_CACHE:-/tmp/tsd-fuzz-cache}
	jobs=${FUZZ_JOBS:-4}
	pids=()
	for tf in "${targets[@]}"; do
		read -r pkg f <<<"$tf"
		while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
		(cd "$(pkgdir "$pkg")" && "$bin/$(binname "$pkg")" -test.run '^$' -test.fuzz "^$f\$" -test.fuzztime "$t" \
			-test.parallel 1 -test.fuzzcachedir "$cache/$(pkgdir "$pkg")" 2>&1 | lastprogress |
			sed "s|^|$pkg $f: |") &
		pids+=($!)
	done
	rc=0
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	echo "fuzz: ${#targets[@]} target(s), $t each, $jobs at once (prebuilt)"
	exit $rc
fi

n=0
for tf in "${targets[@]}"; do
	read -r pkg f <<<"$tf"
	echo "fuzz: $pkg $f for $t"
	go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg" | lastprogress || { echo "fuzz: $pkg $f FAILED"; exit 1; }
	n=$((n + 1))
done
echo "fuzz: $n target(s), $t each"
