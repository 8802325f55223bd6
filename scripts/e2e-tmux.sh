#!/usr/bin/env bash
# End-to-end test of the dashboard in a real terminal (tmux): bring up the
# demo deployment of ts-fake engines, wait until every role is ready on
# screen, restart the decode role with r + y and watch it go stopping →
# starting → ready with one restart, kill its engine and watch the backoff
# countdown move ("next try in 8s", then fewer) until it is ready again,
# find a startup milestone in its log, quit with q + y, and check that no
# process of the run is left. `tsd up`
# runs the supervisor as a daemon in its own session and attaches the
# dashboard; --stop-on-quit (what make demo passes) makes stop the quit
# prompt's default (s stops, d detaches, in either mode).
#
# Exits non-zero and prints the captured screen on failure.
# Env: E2E_TIMEOUT (seconds per wait, default 90), E2E_KEEP=1 keeps the
# temp dir, TSD_BIN_DIR (default bin/).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BIN=${TSD_BIN_DIR:-$ROOT/bin}
TIMEOUT=${E2E_TIMEOUT:-90}
W=120 H=40

command -v tmux >/dev/null || { echo "e2e-tmux: tmux not installed" >&2; exit 2; }
if [[ ! -x $BIN/tsd || ! -x $BIN/ts-fake ]]; then
	mkdir -p "$BIN"
	go build -o "$BIN/tsd" ./cmd/tsd
	go build -o "$BIN/ts-fake" ./cmd/ts-fake
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tsd-tui-e2e.XXXXXX")
SOCK="tsd-tui-e2e-$$"
T="e2e"
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }

cleanup() {
	local rc=$?
	tm kill-server 2>/dev/null || true
	# The daemon outlives tmux by design: end it (and, through the
	# guardians' lifelines, its engines) if the test did not.
	if [[ -n ${DPID:-} ]] && kill -0 "$DPID" 2>/dev/null; then
		kill -TERM "$DPID" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$DPID" 2>/dev/null || true
	fi
	if [[ ${E2E_KEEP:-} == 1 || $rc != 0 ]]; then
		echo "e2e-tmux: run dir kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit $rc
}
trap cleanup EXIT

screen() { tm capture-pane -p -t "$T" 2>/dev/null || true; }

fail() {
	echo "e2e-tmux: FAIL: $*" >&2
	echo "----- screen (${W}x${H}) -----" >&2
	screen >&2
	echo "------------------------------" >&2
	exit 1
}

# wait_for REGEX WHAT: poll the screen until it matches, within TIMEOUT.
wait_for() {
	local re=$1 what=$2 deadline=$((SECONDS + TIMEOUT))
	while ((SECONDS < deadline)); do
		if screen | grep -Eq -- "$re"; then
			return 0
		fi
		if tm list-panes -t "$T" -F '#{pane_dead}' 2>/dev/null | grep -q 1 && ! screen | grep -Eq -- "$re"; then
			fail "tsd exited while waiting for $what"
		fi
		sleep 0.2
	done
	fail "timed out after ${TIMEOUT}s waiting for $what (/$re/)"
}

keys() { tm send-keys -t "$T" "$@"; }

# A private copy of the demo profile: its own run dir under $TMP and its
# own ports (gateway between the handshake band and the ephemeral range,
# bootstrap and dist-init bases in the planner's lower band), so parallel
# runs and other tests do not collide. Relative paths in the profile are
# made absolute (they resolve against its folder).
# The Go test that runs this script (cmd/tsd/tmux_e2e_test.go) passes
# ports reserved against every other test in E2E_PORT, E2E_BOOT and
# E2E_DIST (a base with 40 free ports above it); run by hand, random ones.
PORT=${E2E_PORT:-$((30000 + RANDOM % 2700))}
DIST=${E2E_DIST:-$((10000 + (RANDOM % 19) * 100))}
BOOT=${E2E_BOOT:-$((DIST + 20))}
PROFILE=$TMP/demo.yaml
NAME="e2e-tmux-$$"
sed -e "s#\.\./\.\./#$ROOT/#g" -e "s/^\(  port:\) 8000/\1 $PORT/" -e "s/^name: demo$/name: $NAME/" \
	-e "s/^\(    kind: prefill\)$/\1\n    bootstrap_port: $BOOT\n    dist_init_port: $DIST/" \
	-e "s/^\(    kind: decode\)$/\1\n    dist_init_port: $((DIST + 30))/" \
	-e "s/^\(  backoff:\) .*/\1 8s/" -e "s/^\(  max_backoff:\) .*/\1 16s/" \
	profiles/examples/demo.yaml >"$PROFILE"

tm new-session -d -s "$T" -x "$W" -y "$H" \
	"cd '$TMP' && PATH='$BIN':\"\$PATH\" '$BIN/tsd' up --stop-on-quit '$PROFILE' --fake-gpus 4; rc=\$?; echo; echo \"tsd exited with status \$rc\"; sleep 3600"
SID=$(tm display-message -p -t "$T" '#{pane_pid}')

# 1. Every role ready: the title line says N/N roles ready.
wait_for '· ([1-9][0-9]*)/\1 roles ready' "every role ready"

# The daemon leads its own session (setsid); its engines are in it.
DPID=$(ps -e -o pid=,args= | awk -v n="--name=$NAME" '/--status-fd=3/ && index($0, n) {print $1; exit}')
[[ -n $DPID ]] || fail "no daemon process for $NAME"
DSID=$(ps -o sid= -p "$DPID" | tr -d ' ')
[[ $DSID == "$DPID" ]] || fail "the daemon ($DPID) does not lead its own session (sid $DSID)"

# 2. Find the decode role's row (KIND column) and select it.
row=$(screen | awk '/ROLE +KIND/ {t=1; next} t && NF==0 {exit} t {print}' | sed 's/^[▸ ]*//' |
	awk '$2=="decode" {print NR-1, $1; exit}')
[[ -n $row ]] || fail "no decode role in the table"
idx=${row%% *} role=${row#* }
for ((i = 0; i < idx; i++)); do keys j; done
wait_for "▸ $role +decode" "$role selected"

engines=$(ps -e -o sid=,comm= | awk -v s="$DSID" '$1==s && $2=="ts-fake"' | wc -l)
((engines > 0)) || fail "no ts-fake process found in the daemon's session ($DSID)"

# 3. r asks, y restarts; the events panel shows stopping → starting → ready
#    and the row counts one restart.
keys r
wait_for "restart $role\\? " "the restart prompt"
keys y
wait_for "$role +.*ready +→ stopping" "$role stopping"
wait_for "$role +.*→ starting" "$role starting again"
wait_for "▸ $role +decode +[^ ]+ +ready +[^ ]+ +1 " "$role ready with 1 restart"
events=$(screen | awk '/^events/ {e=1; next} e' | grep -E " $role +" || true)
echo "$events" | awk '/→ stopping/ {s=NR} /→ starting/ && s {t=NR} /→ ready/ && t {r=NR} END {exit !(s && t && r)}' ||
	fail "events for $role are not stopping → starting → ready"

# 3b. Kill its engine: it crashes into a backoff whose countdown moves on
#     screen (two captures, the second shows fewer seconds), then it is
#     ready again with a second restart, and the events give the startup
#     its duration.
pids=$(ps -e -o pid=,sid=,comm=,args= | awk -v s="$DSID" '$2==s && $3=="ts-fake" && /--disaggregation-mode decode/ {print $1}')
[[ -n $pids ]] || fail "no ts-fake process of $role"
kill -KILL $pids
# STATE reads "next try in", or its first short form "retry in" when the
# columns chosen for the width leave it less room (architecture.md §12.1).
wait_for "▸ $role +decode +[^ ]+ +backoff · (next try|retry) in [0-9]+s" "$role in backoff with a countdown"
countdown() { screen | grep -E "▸ $role +decode" | sed -nE 's/.*backoff · (next try|retry) in ([0-9]+)s.*/\2/p' | head -1; }
first=$(countdown)
[[ -n $first ]] || fail "no countdown on $role's row"
deadline=$((SECONDS + 5))
while :; do
	now=$(countdown)
	[[ -n $now && $now -lt $first ]] && break
	# The backoff may end before a second capture: then it has moved too.
	[[ -z $now ]] && ! screen | grep -Eq "▸ $role +decode +[^ ]+ +backoff · (next|retry)" && [[ $first -le 2 ]] && break
	((SECONDS < deadline)) || fail "the countdown did not move from ${first}s"
	sleep 0.2
done
echo "e2e-tmux: countdown moved from ${first}s to ${now:-done}s"
wait_for "▸ $role +decode +[^ ]+ +ready +[^ ]+ +2 " "$role ready again after the crash"
wait_for " $role +ready after [0-9.]+m?[0-9]*s" "the startup duration in the events"

# 4. Its log page: find a startup milestone with /.
keys l
wait_for "logs: $role" "the $role log page"
keys / "Load weight end" Enter
wait_for 'find "Load weight end" [0-9]+/[0-9]+' "the milestone found in the log"
screen | grep -q "» .*Load weight end" || fail "the current match is not marked"

# 5. Quit: q asks while roles run, s stops everything and tsd exits.
keys Escape
wait_for '\[overview\]' "back on the overview"
keys q
wait_for 'quit: s stop all [0-9]+ running role' "the quit prompt"
keys s
wait_for 'tsd exited with status 0' "tsd to exit cleanly"

# 6. Nothing of the run is left: the pane's shell (sleeping) is the only
#    process in its session, and the daemon's session is empty.
deadline=$((SECONDS + 10))
while :; do
	left=$(ps -e -o pid=,sid=,comm= | awk -v s="$SID" -v d="$DSID" '($2==s && $3!="sleep" && $1!=s) || $2==d')
	[[ -z $left ]] && break
	((SECONDS < deadline)) || fail "processes left after quit:
$left"
	sleep 0.2
done

echo "e2e-tmux: ok (restarted $role, saw its backoff count down, found the milestone, quit with nothing left)"
