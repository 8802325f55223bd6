#!/usr/bin/env bash
# make fuzz: Go fuzz targets for FUZZTIME each — every target of the given
# packages, or (FUZZ_LIST=FILE) the "package target" lines of FILE.
# New interesting inputs stay in the Go build cache's fuzz corpus; a
# failing input lands in the package's testdata/fuzz, which the ordinary
# `go test` then replays.
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
n=0
for tf in "${targets[@]}"; do
	read -r pkg f <<<"$tf"
	echo "fuzz: $pkg $f for $t"
	# -parallel: FUZZ_WORKERS workers (default: one per CPU).
	go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" ${FUZZ_WORKERS:+-parallel "$FUZZ_WORKERS"} "$pkg" | grep -v '^fuzz: elapsed' || { echo "fuzz: $pkg $f FAILED"; exit 1; }
	n=$((n + 1))
done
echo "fuzz: $n target(s), $t each"
