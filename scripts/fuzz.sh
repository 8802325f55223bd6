#!/usr/bin/env bash
# make fuzz: every Go fuzz target in the given packages for FUZZTIME each.
# New interesting inputs land in the package's testdata/fuzz corpus, which
# the ordinary `go test` then replays.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-30s}
(($# > 0)) || set -- ./...
n=0
for pkg in $(go list "$@"); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		echo "fuzz: $pkg $f for $t"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
		n=$((n + 1))
	done
done
echo "fuzz: $n target(s), $t each"
