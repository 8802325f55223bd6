#!/usr/bin/env bash
# End-to-end test of the CLI's daily verbs in real terminals (tmux):
#  1. `tsd up -d` of the demo deployment draws each role's phase and the
#     engines' progress bars in place (every role on screen once, a bar
#     while weights load), then says it is up;
#  2. a bare `tsd stop` from an unrelated directory refuses (exit 2) and
#     lists the deployment with the command to type; the deployment keeps
#     running;
#  3. kill -9 of the daemon and all its guardians in one command (as
#     pkill -9 tsd does); `tsd ls` shows the deployment dead with the count
#     of processes it left; `tsd stop NAME` ends them, and within 5 s no
#     process of the run is left.
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
W=120 H=40

command -v tmux >/dev/null || { echo "e2e-tmux-cli: tmux not installed" >&2; exit 2; }
if [[ ! -x $BIN/tsd || ! -x $BIN/ts-fake ]]; then
	mkdir -p "$BIN"
	go build -o "$BIN/tsd" ./cmd/tsd
	go build -o "$BIN/ts-fake" ./cmd/ts-fake
fi
TSD=$BIN/tsd

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tsd-cli-e2e.XXXXXX")
SOCK="tsd-cli-e2e-$$"
T="e2e"
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }
DPID=
PIDS=

cleanup() {
	local rc=$?
	tm kill-server 2>/dev/null || true
	if [[ -n $DPID ]] && kill -0 "$DPID" 2>/dev/null; then
		kill -TERM "$DPID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$DPID" 2>/dev/null || true
	fi
	for p in $PIDS; do kill -KILL "$p" 2>/dev/null || true; done
	if [[ ${E2E_KEEP:-} == 1 || $rc != 0 ]]; then
		echo "e2e-tmux-cli: run dir kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT

screen() { tm capture-pane -p -t "$T" 2>/dev/null || true; }

fail() {
	echo "e2e-tmux-cli: FAIL: $*" >&2
	echo "----- screen of session $T (${W}x${H}) -----" >&2
	screen >&2
	echo "------------------------------" >&2
	for log in "$TMP"/.tsd/*/logs/tsd.log; do # each deployment's own state folder
		[[ -f $log ]] || continue
		echo "----- daemon log $log (last 30 lines) -----" >&2
		tail -30 "$log" >&2
	done
	exit 1
}

wait_for() {
	local re=$1 what=$2 deadline=$((SECONDS + TIMEOUT))
	while ((SECONDS < deadline)); do
		if screen | grep -Eq -- "$re"; then
			return 0
		fi
		sleep 0.2
	done
	fail "timed out after ${TIMEOUT}s waiting for $what (/$re/)"
}

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $st && $st != Z && $st != X ]]
}

# session NAME DIR CMD: a new tmux session running CMD in DIR, then a line
# with its exit status, then a long sleep so the screen stays readable.
session() {
	T=$1
	tm new-session -d -s "$T" -x "$W" -y "$H" \
		"cd '$2' && PATH='$BIN':\"\$PATH\" $3; rc=\$?; echo; echo \"tsd exited with status \$rc\"; sleep 3600"
}

PORT=${E2E_PORT:-$((30000 + RANDOM % 2700))}
DIST=${E2E_DIST:-$((10000 + (RANDOM % 19) * 100))}
BOOT=${E2E_BOOT:-$((DIST + 20))}
PROFILE=$TMP/demo.yaml
NAME="e2e-cli-$$"
sed -e "s#\.\./\.\./#$ROOT/#g" -e "s/^\(  port:\) 8000/\1 $PORT/" -e "s/^name: demo$/name: $NAME/" \
	-e "s/^\(    kind: prefill\)$/\1\n    bootstrap_port: $BOOT\n    dist_init_port: $DIST/" \
	-e "s/^\(    kind: decode\)$/\1\n    dist_init_port: $((DIST + 30))/" \
	profiles/examples/demo.yaml >"$PROFILE"

# 1. tsd up -d on a terminal: the block redrawn in place, a progress bar
#    while weights load, then "is up".
session up "$TMP" "'$TSD' up -d '$PROFILE' --fake-gpus 4 --wait 120s"
wait_for '[█░]{8}' "a progress bar while the engines start"
wait_for "tsd: $NAME is up" "tsd up -d to return"
wait_for 'tsd exited with status 0' "tsd up -d to exit 0"
for role in prefill decode; do
	n=$(screen | grep -Ec "^. $role +ready") || true
	((n == 1)) || fail "$role is on screen $n times after up -d (the block must be redrawn in place)"
done
screen | grep -q "✔ prefill" || fail "no ✔ for the ready prefill"
DPID=$("$TSD" ls --json | tr -d ' \n' | grep -o "\"name\":\"$NAME\"[^}]*\"pid\":[0-9]*" | grep -o '[0-9]*$')
[[ -n $DPID ]] || fail "no registry entry for $NAME"

# 2. A bare tsd stop elsewhere refuses and names the deployment.
mkdir -p "$TMP/elsewhere"
session other "$TMP/elsewhere" "'$TSD' stop"
wait_for 'tsd exited with status 2' "the bare stop to be refused"
screen | grep -q "acts only on the deployment of this directory" || fail "the refusal does not say why"
screen | grep -q "tsd stop $NAME" || fail "the refusal does not list tsd stop $NAME"
"$TSD" status "$NAME" >/dev/null || fail "the deployment is not running after a refused bare stop"

# 3. kill -9 of the daemon and its guardians at once.
for pg in $("$TSD" status "$NAME" --json | tr -d ' \n' | grep -o '"state":"ready"[^{]*"pid":[0-9]*' | grep -o '[0-9]*$'); do
	PIDS="$PIDS $(ps -e -o pid=,pgid= | awk -v g="$pg" '$2==g {print $1}')"
done
GUARDS=$(ps -o pid= --ppid "$DPID" | tr '\n' ' ')
[[ -n ${PIDS// /} && -n ${GUARDS// /} ]] || fail "no engine processes ($PIDS) or guardians ($GUARDS) of $NAME"
# The daemon is stopped first: between two kills a running daemon would
# see its guardians die and stop the engines itself, which is not the
# case under test (everything killed at once).
kill -STOP "$DPID"
# shellcheck disable=SC2086
kill -KILL $GUARDS "$DPID"
deadline=$((SECONDS + 10))
while alive "$DPID"; do
	((SECONDS < deadline)) || fail "the daemon survived kill -9"
	sleep 0.1
done
DPID=
left=0
for p in $PIDS; do alive "$p" && left=$((left + 1)); done
session ls "$TMP/elsewhere" "'$TSD' ls"
wait_for 'tsd exited with status 0' "tsd ls"
if ((left > 0)); then
	screen | grep -Eq "^$NAME .*dead, [0-9]+ process(es)? left" || fail "tsd ls does not show $NAME dead with what it left ($left engine processes alive)"
	screen | grep -q "tsd stop $NAME" || fail "tsd ls does not say how to stop what $NAME left"
else
	echo "e2e-tmux-cli: nothing of $NAME survived the kill here; checking that tsd ls forgets it" >&2
	screen | grep -Eq "^$NAME " && fail "tsd ls lists $NAME though nothing of it is left"
fi
start=$SECONDS
session stop "$TMP/elsewhere" "'$TSD' stop '$NAME'"
if ((left > 0)); then
	wait_for 'tsd exited with status 0' "tsd stop $NAME"
	screen | grep -q "$NAME was dead" || fail "tsd stop does not say what it did"
fi
deadline=$((start + 5))
while :; do
	still=
	for p in $PIDS; do alive "$p" && still="$still $p"; done
	[[ -z $still ]] && break
	((SECONDS <= deadline)) || fail "processes left 5 s after tsd stop $NAME:$still"
	sleep 0.1
done
for g in $GUARDS; do alive "$g" && fail "guardian $g still runs"; done
PIDS=
session ls2 "$TMP/elsewhere" "'$TSD' ls"
wait_for 'tsd exited with status 0' "tsd ls after the reap"
screen | grep -Eq "^$NAME " && fail "$NAME still listed after the reap"
echo "e2e-tmux-cli: ok (progress drawn in place, bare stop refused elsewhere, a killed daemon's leftovers listed and reaped; $left were left)"
