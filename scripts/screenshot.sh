#!/usr/bin/env bash
# Capture the dashboard's pages as text: bring up the demo deployment of
# ts-fake engines under tmux, wait until every role is ready, and save the
# overview, the rank inspector, the logs page, the help page, the split
# view and the describe view, each as
# NAME.txt (plain) and NAME.ansi (with colours; view with `cat`;
# scripts/render-png.sh turns them into PNGs).
#
# Usage: scripts/screenshot.sh [-o DIR] [-s WIDTHxHEIGHT] [-d RUNDIR] [-t] [PROFILE]
#   -o DIR     where to write (default: a new folder under $TMPDIR, printed)
#   -s WxH     terminal size (default 120x40)
#   -d RUNDIR  run the demo in RUNDIR (must not exist; removed afterwards),
#              so the paths on screen are the same on every run
#   -t         send a test request (t) before the overview shot
#   -w REGEX   also wait until the screen matches REGEX before that shot
#              (may be repeated)
# Env: TSD_BIN_DIR (default bin/), SHOT_TIMEOUT (seconds per wait, default 90).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TSD_BIN_DIR:-$ROOT/bin}
TIMEOUT=${SHOT_TIMEOUT:-90}
OUT="" SIZE=120x40 RUNDIR="" REQUEST=0 SETTLE=()
while getopts "o:s:d:tw:" opt; do
	case $opt in
	o) OUT=$OPTARG ;;
	s) SIZE=$OPTARG ;;
	d) RUNDIR=$OPTARG ;;
	t) REQUEST=1 ;;
	w) SETTLE+=("$OPTARG") ;;
	*) sed -n '2,18p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
PROFILE_SRC=${1:-$ROOT/profiles/examples/demo.yaml}
W=${SIZE%x*} H=${SIZE#*x}

command -v tmux >/dev/null || { echo "screenshot: tmux not installed" >&2; exit 2; }
if [[ ! -x $BIN/tsd || ! -x $BIN/ts-fake ]]; then
	mkdir -p "$BIN"
	(cd "$ROOT" && go build -o "$BIN/tsd" ./cmd/tsd && go build -o "$BIN/ts-fake" ./cmd/ts-fake)
fi
if [[ -n $RUNDIR ]]; then
	[[ ! -e $RUNDIR ]] || { echo "screenshot: $RUNDIR already exists" >&2; exit 2; }
	mkdir -p "$RUNDIR"
	TMP=$(cd "$RUNDIR" && pwd)
else
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/tsd-shot.XXXXXX")
fi
[[ -n $OUT ]] || OUT=$TMP/screens
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

SOCK="tsd-shot-$$" T=shot
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }
cleanup() {
	local rc=$?
	tm kill-server 2>/dev/null || true
	[[ $OUT == "$TMP"/* ]] || rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT

wait_for() {
	local re=$1 deadline=$((SECONDS + TIMEOUT))
	until tm capture-pane -p -t "$T" | grep -Eq -- "$re"; do
		if ((SECONDS >= deadline)); then
			echo "screenshot: timed out waiting for /$re/; screen:" >&2
			tm capture-pane -p -t "$T" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# shot NAME: save the screen once it has been still for a moment.
shot() {
	local prev="" cur
	for _ in $(seq 20); do
		cur=$(tm capture-pane -p -t "$T")
		[[ $cur == "$prev" ]] && break
		prev=$cur
		sleep 0.3
	done
	tm capture-pane -p -t "$T" >"$OUT/$1.txt"
	# -N keeps trailing blanks, so highlighted rows keep their full width.
	tm capture-pane -p -e -N -t "$T" >"$OUT/$1.ansi"
	echo "$OUT/$1.txt"
}

# The profile's relative paths resolve against its folder; ports move off
# the defaults so a running demo or test does not collide with this one.
PORT=$((30000 + RANDOM % 2700)) DIST=$((10000 + (RANDOM % 19) * 100))
# With a fixed run dir the checkout is reached through a link in it, so
# the paths on screen (the model's, in the describe view) name no folder
# of this machine.
SRC=$ROOT
if [[ -n $RUNDIR ]]; then
	ln -s "$ROOT" "$TMP/src"
	SRC=$TMP/src
fi
sed -e "s#\.\./\.\./#$SRC/#g" -e "s/^\(  port:\) 8000/\1 $PORT/" \
	-e "s/^\(    kind: prefill\)$/\1\n    bootstrap_port: $((DIST + 60))\n    dist_init_port: $DIST/" \
	-e "s/^\(    kind: decode\)$/\1\n    dist_init_port: $((DIST + 30))/" \
	"$PROFILE_SRC" >"$TMP/$(basename "$PROFILE_SRC")"

tm new-session -d -s "$T" -x "$W" -y "$H" \
	"cd '$TMP' && PATH='$BIN':\"\$PATH\" '$BIN/tsd' up --stop-on-quit '$TMP/$(basename "$PROFILE_SRC")' --fake-gpus 4; rc=\$?; echo; echo \"tsd exited with status \$rc\"; sleep 3600"
SID=$(tm display-message -p -t "$T" '#{pane_pid}')
wait_for '· ([1-9][0-9]*)/\1 roles ready'
if ((REQUEST)); then
	tm send-keys -t "$T" t
	wait_for 'test request ok'
fi
for re in ${SETTLE[@]+"${SETTLE[@]}"}; do wait_for "$re"; done
shot overview
tm send-keys -t "$T" Enter
wait_for '\[inspector\]'
shot inspector
tm send-keys -t "$T" l
wait_for 'logs: '
tm send-keys -t "$T" / "Load weight end" Enter
wait_for 'find "Load weight end"'
shot logs
tm send-keys -t "$T" '?'
wait_for '\[help\]'
shot help
# Back to the overview one page at a time (an escape with a key right
# after it reads as alt+key).
tm send-keys -t "$T" Escape
wait_for '\[logs\]'
tm send-keys -t "$T" Escape
wait_for '\[inspector\]'
tm send-keys -t "$T" Escape
wait_for '\[overview\]'
tm send-keys -t "$T" x
wait_for '^logs: '
shot split
tm send-keys -t "$T" x d
wait_for 'command line \(secrets masked\)'
shot describe
tm send-keys -t "$T" Escape
wait_for '\[overview\]'
tm send-keys -t "$T" q
wait_for 'quit: s stop all'
tm send-keys -t "$T" s
wait_for 'tsd exited with status 0'

# Nothing of the run may outlive it: the pane's shell (sleeping) is the
# only process left in its session.
deadline=$((SECONDS + 10))
while left=$(ps -e -o pid=,sid=,comm= | awk -v s="$SID" '$2==s && $3!="sleep" && $1!=s') && [[ -n $left ]]; do
	if ((SECONDS >= deadline)); then
		echo "screenshot: processes left after quit:" >&2
		echo "$left" >&2
		exit 1
	fi
	sleep 0.2
done
