#!/usr/bin/env bash
# End-to-end test of the dashboard as a daily tool, in real terminals
# (tmux), on the demo deployment of ts-fake engines run as a daemon
# (`tsd up -d`) under steady traffic (`tsd bench`):
#
# 1. History that lasts: the daemon samples its trend rings every 100 ms
#    here (--trend-period; a second by default), so 120 samples, two
#    minutes at the real period, take 12 s. A first dashboard watches
#    them grow; a second one attached afterwards shows all of them in
#    its first frame: the heading's span and a sparkline 120 samples
#    long, with its range beside it.
# 2. 80x24 after a restart: r + y on the decode drains its in-flight
#    requests; the row's countdown reads whole ("· N infl · Ns"), and
#    UPTIME, INFL, REQ/S and ERR stay on screen during the drain and
#    once the decode is ready again with one restart.
# 3. The split view (x: the table over the selected role's live log) and
#    the describe view (d: the role's command line, env and restart
#    policy).
# 4. tsd attach --readonly: the help bar says read-only, r does nothing.
# 5. tsd stop leaves no process of the run.
#
# Exits non-zero and prints the captured screen on failure.
# Env: E2E_TIMEOUT (seconds per wait, default 90), E2E_KEEP=1 keeps the
# temp dir, TSD_BIN_DIR (default bin/), E2E_PORT/E2E_DIST/E2E_BOOT as in
# scripts/e2e-tmux.sh.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BIN=${TSD_BIN_DIR:-$ROOT/bin}
TIMEOUT=${E2E_TIMEOUT:-90}

command -v tmux >/dev/null || { echo "e2e-tmux-tui: tmux not installed" >&2; exit 2; }
if [[ ! -x $BIN/tsd || ! -x $BIN/ts-fake ]]; then
	mkdir -p "$BIN"
	go build -o "$BIN/tsd" ./cmd/tsd
	go build -o "$BIN/ts-fake" ./cmd/ts-fake
fi
TSD=$BIN/tsd

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tsd-tui-e2e.XXXXXX")
SOCK="tsd-tui-e2e-$$"
T=""
W=200 H=60
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }
DPID="" BENCH=""

cleanup() {
	local rc=$?
	[[ -n $BENCH ]] && kill "$BENCH" 2>/dev/null || true
	tm kill-server 2>/dev/null || true
	if [[ -n $DPID ]] && kill -0 "$DPID" 2>/dev/null; then
		kill -TERM "$DPID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$DPID" 2>/dev/null || true
	fi
	if [[ ${E2E_KEEP:-} == 1 || $rc != 0 ]]; then
		echo "e2e-tmux-tui: run dir kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT

screen() { tm capture-pane -p -t "$T" 2>/dev/null || true; }

fail() {
	echo "e2e-tmux-tui: FAIL: $*" >&2
	echo "----- screen of session $T (${W}x${H}) -----" >&2
	screen >&2
	echo "------------------------------" >&2
	for log in "$TMP"/.tsd/*/logs/tsd.log; do # each deployment's own state folder
		[[ -f $log ]] || continue
		echo "----- daemon log $log (last 20 lines) -----" >&2
		tail -20 "$log" >&2
	done
	exit 1
}

# wait_for REGEX WHAT: poll the screen until it matches, within TIMEOUT.
wait_for() {
	local re=$1 what=$2 deadline=$((SECONDS + TIMEOUT))
	while ((SECONDS < deadline)); do
		if screen | grep -Eq -- "$re"; then
			return 0
		fi
		sleep 0.1
	done
	fail "timed out after ${TIMEOUT}s waiting for $what (/$re/)"
}

keys() { tm send-keys -t "$T" "$@"; }

# session NAME W H CMD: a new tmux session of W×H running CMD, then a
# line with its exit status, then a long sleep so the screen stays.
session() {
	T=$1 W=$2 H=$3
	tm new-session -d -s "$T" -x "$W" -y "$H" \
		"cd '$TMP' && PATH='$BIN':\"\$PATH\" $4; rc=\$?; echo; echo \"tsd exited with status \$rc\"; sleep 3600"
}

# detach_dashboard: q, then d (detach; the deployment keeps running).
detach_dashboard() {
	keys q
	wait_for 'quit: d detach' "the quit prompt"
	keys d
	wait_for 'tsd exited with status 0' "the dashboard to detach"
}

# A private copy of the demo profile: its own run dir under $TMP and its
# own ports (see scripts/e2e-tmux.sh).
PORT=${E2E_PORT:-$((30000 + RANDOM % 2700))}
DIST=${E2E_DIST:-$((10000 + (RANDOM % 19) * 100))}
BOOT=${E2E_BOOT:-$((DIST + 20))}
PROFILE=$TMP/demo.yaml
NAME="e2e-tui-$$"
sed -e "s#\.\./\.\./#$ROOT/#g" -e "s/^\(  port:\) 8000/\1 $PORT/" -e "s/^name: demo$/name: $NAME/" \
	-e "s/^\(    kind: prefill\)$/\1\n    bootstrap_port: $BOOT\n    dist_init_port: $DIST/" \
	-e "s/^\(    kind: decode\)$/\1\n    dist_init_port: $((DIST + 30))/" \
	profiles/examples/demo.yaml >"$PROFILE"

# The daemon, its trend rings sampled every 100 ms; up -d returns once
# every role is ready.
(cd "$TMP" && PATH="$BIN:$PATH" "$TSD" up -d --trend-period 100ms --fake-gpus 4 "$PROFILE") >"$TMP/up.out" 2>&1 ||
	{ cat "$TMP/up.out" >&2; fail "tsd up -d failed"; }
DPID=$(sed -nE 's/.*daemon pid ([0-9]+).*/\1/p' "$TMP/up.out")
[[ -n $DPID ]] || { cat "$TMP/up.out" >&2; fail "no daemon pid in tsd up -d's output"; }
DSID=$(ps -o sid= -p "$DPID" | tr -d ' ')

# Steady traffic: requests of 150 tokens at the demo's 30 tokens/s (5 s
# each), six at a time, so a restart has requests to drain.
"$TSD" bench --base-url "http://127.0.0.1:$PORT" --num-prompts 5000 --request-rate 4 --max-concurrency 6 \
	--random-input-len 16 --random-output-len 150 --disable-tqdm >"$TMP/bench.out" 2>&1 &
BENCH=$!

# 1. A first dashboard watches the rings grow to 120 samples (12 s at
#    100 ms); it detaches. The second one, attached afterwards, shows
#    them all in its first frame.
session watch 200 60 "'$TSD' attach '$NAME'"
wait_for '· ([1-9][0-9]*)/\1 roles ready' "every role ready on the first dashboard"
SPAN='trends · last ((1[2-9]|[2-9][0-9])s|1m) · a sample each 100ms · kept by the daemon'
wait_for "$SPAN" "12 s of samples at 100 ms"
wait_for ' ([1-9][0-9]*\.[0-9]|0\.[1-9]) req/s ' "traffic on the gateway line"
# sparkcells: the samples on the req/s trend line (one cell each while
# they fit in its 163 cells at 200 columns).
sparkcells() { screen | grep -E '^  req/s ' | head -1 | grep -o '[▁▂▃▄▅▆▇█]' | wc -l; }
deadline=$((SECONDS + TIMEOUT))
until (($(sparkcells) >= 120)); do
	((SECONDS < deadline)) || fail "the daemon's rings did not reach 120 samples"
	sleep 0.2
done
detach_dashboard

session again 200 60 "'$TSD' attach '$NAME'"
wait_for 'trends · last' "the trends on the second dashboard's first frame"
first=$(screen)
echo "$first" | grep -Eq "$SPAN" ||
	fail "the attached dashboard does not start with the daemon's 12 s of trends"
spark=$(echo "$first" | grep -E '^  req/s ' | head -1)
# The first frame: a dashboard without the daemon's rings would start
# from one sample and gain ten a second.
cells=$(echo "$spark" | grep -o '[▁▂▃▄▅▆▇█]' | wc -l)
((cells >= 120)) || fail "the req/s sparkline of the first frame has $cells samples, want 120 (two minutes at the real period): $spark"
echo "$spark" | grep -Eq ' [0-9.]+–(0\.[0-9]*[1-9]|[1-9][0-9.]*)$' || fail "no range (with traffic) beside the req/s sparkline: $spark"
echo "e2e-tmux-tui: attached with $cells samples of req/s on the first frame"
detach_dashboard

# 2. 80x24: restart the decode while requests run; the drain countdown
#    reads whole, and UPTIME, INFL, REQ/S and ERR stay on screen.
session small 80 24 "'$TSD' attach '$NAME'"
wait_for '· ([1-9][0-9]*)/\1 roles ready' "the 80x24 dashboard"
header_ok() {
	local h
	h=$(screen | grep -E '^  ROLE' | head -1)
	for col in UPTIME INFL 'REQ/S' ERR; do
		[[ $h == *"$col"* ]] || fail "80x24 header lacks $col $1: $h"
	done
}
header_ok "before the restart"
wait_for '^  decode .*ready .* 0 +[0-9]+/[0-9]+ +[1-9]' "requests in flight on the decode"
keys j
wait_for '▸ decode ' "decode selected"
keys r
wait_for 'restart decode\? ' "the restart prompt"
keys y
# The countdown is whole: its seconds end in "s" and a space (or the
# line), never in a cut "…".
wait_for '▸ decode +.*(drain|draining) · [1-9][0-9]* (infl|in flight) · [0-9]+(m[0-9]+)?s( |$)' "the drain countdown on the decode's row"
echo "e2e-tmux-tui: draining at 80x24: $(screen | grep -E '▸ decode ' | head -1)"
header_ok "during the drain"
wait_for '▸ decode .*ready +[0-9hms]+ +1 +[0-9]+/[0-9]+' "the decode ready again with one restart"
header_ok "after the restart"

# 3. The split view and the describe view of the decode.
keys x
wait_for '^logs: decode ' "the split view's log pane"
screen | grep -Eq '^▸ decode ' || fail "the split view lost the table"
keys x
wait_for 'split view off' "the split view closed"
keys d
wait_for 'describe decode' "the describe view"
wait_for 'command line \(secrets masked\)' "the command line in the describe view"
keys Escape
wait_for '\[overview\]' "back on the overview"
# K opens the : line on the selected role and TERM; the signal is edited
# like any word, and enter asks before anything is sent (CONT is harmless
# to a running engine).
keys K
wait_for ':signal decode TERM' "the signal line"
keys C-w CONT Enter
wait_for 'send SIGCONT to decode \(process group [0-9]+\)\?' "the signal's question"
keys y
wait_for 'send SIGCONT to decode: done' "the signal sent"
detach_dashboard

# 4. A read-only dashboard: no restart key, and r does nothing.
session observer 120 40 "'$TSD' attach --readonly '$NAME'"
wait_for '· ([1-9][0-9]*)/\1 roles ready' "the read-only dashboard"
screen | tail -1 | grep -q 'read-only' || fail "the read-only help bar does not say so"
# r must do nothing but say why: a prompt it opened would swallow the ?
# after it, so the help page opening proves there was none.
keys j r
wait_for 'read-only dashboard \(tsd attach --readonly\): cannot restart' "r saying read-only"
keys '?'
wait_for '\[help\]' "the help page after r"
screen | grep -q 'restart decode?' && fail "r asked for a restart on a read-only dashboard"
keys Escape # alone: an escape with a key right after it reads as alt+key
wait_for '^  ROLE' "back on the overview"
keys q
wait_for 'tsd exited with status 0' "the read-only dashboard to quit"

# 5. Stop: nothing of the run is left.
kill "$BENCH" 2>/dev/null || true
wait "$BENCH" 2>/dev/null || true
BENCH=""
"$TSD" stop "$NAME" >/dev/null || fail "tsd stop $NAME failed"
deadline=$((SECONDS + 10))
while :; do
	left=$(ps -e -o pid=,sid=,stat=,comm= | awk -v d="$DSID" '$2==d && $3 !~ /^Z/')
	[[ -z $left ]] && break
	((SECONDS < deadline)) || fail "processes left after tsd stop:
$left"
	sleep 0.2
done
DPID=""
echo "e2e-tmux-tui: ok (daemon-kept trends on attach, a whole drain countdown at 80x24, split and describe views, a signal asked and sent, read-only says so, nothing left)"
