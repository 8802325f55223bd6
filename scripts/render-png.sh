#!/usr/bin/env bash
# Regenerate the dashboard pictures in docs/: bring up the demo deployment
# (ts-fake engines, simulated GPUs) under tmux with scripts/screenshot.sh,
# send one test request, capture the overview, the rank inspector, the
# logs page, the split view and the describe view with colours, and paint
# each capture to a PNG with
# cmd/ansipng (pure Go; no browser, no terminal emulator).
#
# Usage: scripts/render-png.sh [-o DIR] [-s WIDTHxHEIGHT]
#   -o DIR   where the PNGs go (default docs/)
#   -s WxH   terminal size (default 140x32)
# Needs: go, tmux, the DejaVu fonts (Debian fonts-dejavu-core; without
# them ansipng falls back to Go Mono, which lacks a few symbols).
# Not part of `make test`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DEST=docs SIZE=140x32
while getopts "o:s:" opt; do
	case $opt in
	o) DEST=$OPTARG ;;
	s) SIZE=$OPTARG ;;
	*) sed -n '2,14p' "$0" >&2; exit 2 ;;
	esac
done
W=${SIZE%x*} H=${SIZE#*x}

command -v tmux >/dev/null || { echo "render-png: tmux not installed (apt-get install tmux)" >&2; exit 2; }
[[ -r /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf ]] ||
	echo "render-png: DejaVu fonts missing (apt-get install fonts-dejavu-core); using Go Mono" >&2

make -s build
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tsd-render.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
go build -o "$WORK/ansipng" ./cmd/ansipng

# A fixed, short run dir keeps the paths on screen the same on every run.
RUNDIR=/tmp/tsd-demo
if [[ -e $RUNDIR ]]; then
	echo "render-png: $RUNDIR exists (another run, or a leftover): remove it first" >&2
	exit 1
fi

# The overview is taken once the simulated GPUs show load and the gateway
# has counted the test request, so the picture is not of an idle screen.
scripts/screenshot.sh -o "$WORK/shots" -s "${W}x${H}" -d "$RUNDIR" -t \
	-w ' [1-9][0-9]*\.[0-9]/[0-9.]+ GiB' -w '· [1-9][0-9]* req ·' >/dev/null
mkdir -p "$DEST"
for page in overview inspector logs split describe; do
	"$WORK/ansipng" -cols "$W" -rows "$H" -o "$DEST/$page.png" "$WORK/shots/$page.ansi"
	echo "$DEST/$page.png"
done
