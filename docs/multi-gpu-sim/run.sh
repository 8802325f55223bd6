#!/usr/bin/env bash
# Reproduce the SIMULATED 4-GPU run of the 1E1P2D topology (README.md):
# for each profile here (GPUs by index, then by UUID) bring the deployment
# up headless on ts-fake engines and `--fake-gpus 4`, save `tsd status
# --json` once every role is ready and holds its GPU, restart decode-1 and
# show its memory leave and come back on the same GPU while the other roles
# keep their PIDs and memory, stop everything and check that no process of
# the run is left; then run the dashboard once under tmux (140x42) and save
# the screen. Every check that fails ends the script with status 1.
#
# Usage: docs/multi-gpu-sim/run.sh [indices] [uuids]   (default: both)
# Env: SIM_TIMEOUT (seconds per wait, default 90); SIM_FAKE_GPUS (default 4;
# 0 reads the host's real GPUs, for the run on a 4-GPU machine, where the
# UUID profile must name GPUs 0-3 in that order).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/docs/multi-gpu-sim
TIMEOUT=${SIM_TIMEOUT:-90}
FAKE=${SIM_FAKE_GPUS:-4}
FAKE_FLAG=()
((FAKE == 0)) || FAKE_FLAG=(--fake-gpus "$FAKE")
cd "$ROOT"
make -s build
export PATH=$ROOT/bin:$PATH
command -v jq >/dev/null || { echo "run.sh: jq not installed" >&2; exit 2; }
command -v tmux >/dev/null || { echo "run.sh: tmux not installed" >&2; exit 2; }

fail() { echo "run.sh: $*" >&2; exit 1; }

# poll DESC JQ: wait until `tsd status --json` satisfies the jq filter JQ;
# the matching status is left in $S.
poll() {
	local desc=$1 filter=$2 deadline=$((SECONDS + TIMEOUT))
	while :; do
		if S=$(tsd status --json "$P" 2>/dev/null) && jq -e "$filter" >/dev/null <<<"$S"; then
			return 0
		fi
		((SECONDS < deadline)) || fail "$VARIANT: timed out waiting for $desc"
		sleep 0.2
	done
}

# Every role ready and its (only) GPU showing a process of that role.
READY='(.roles|length)==4 and all(.roles[]; .state=="ready")
	and all(.gpus[]; any(.processes[]?; .role != null and .used_bytes > 0))'

# The pieces of a status the checks and the table use, one line per role.
summary() {
	jq -c '.gpus as $g | .roles[] | .name as $n | {role: .name, cvd: (.gpus|join(",")),
		uuid: (.gpu_uuids // [] | join(",")), pid,
		gpu_pids: [$g[] | .processes[]? | select(.role == $n) | .pid],
		gpu_mem_bytes, state}'
}

run_variant() {
	VARIANT=$1
	P=$HERE/1e1p2d-$VARIANT.yaml
	local out=$HERE/$VARIANT
	rm -rf "$HERE/.run/$VARIANT" "$out"
	mkdir -p "$out"
	echo "== $VARIANT: tsd up --headless ${FAKE_FLAG[*]} $P"

	tsd up --headless "${FAKE_FLAG[@]}" "$P" >"$out/headless.log" 2>&1 &
	local up=$!
	trap "kill -INT $up 2>/dev/null || true" EXIT
	poll "every role ready on its GPU" "$READY"
	jq . <<<"$S" >"$out/status-up.json"
	local before
	before=$(summary <<<"$S")
	echo "$before"

	# The mapping: each role's CUDA_VISIBLE_DEVICES resolved to the UUID
	# the profile names (or the index's GPU), and that GPU alone holds it.
	# The i-th role is planned on the GPU of NVML index i.
	if ((FAKE)); then
		jq -e '.gpu_info.simulated == true and .gpu_info.provider == "fake"' >/dev/null <<<"$S" ||
			fail "$VARIANT: telemetry is not the simulated provider"
	fi
	local i role want
	for i in 0 1 2 3; do
		role=$(jq -r ".roles[$i].name" <<<"$S")
		if ((FAKE)); then
			want=$(printf 'GPU-fa4e%04x-7e57-4c0d-9a11-%012x' "$i" $((0x5e0000000000 + i)))
		else
			want=$(jq -r --argjson i "$i" '.gpus[] | select(.index == $i) | .uuid' <<<"$S")
		fi
		jq -e --arg r "$role" --arg u "$want" --argjson i "$i" '
			(.roles[] | select(.name == $r) | .gpu_uuids) == [$u]
			and (.gpus[] | select(.uuid == $u) | .index == $i and .roles == [$r]
				and ([.processes[].role] | unique) == [$r])' >/dev/null <<<"$S" ||
			fail "$VARIANT: $role is not alone on GPU $i ($want)"
	done
	# Distinct amounts are the fake's (per role name); on real GPUs the two
	# decode replicas share their args and so their --fake-gpu-mem-mb.
	if ((FAKE)); then
		jq -e '[.roles[].gpu_mem_bytes] | unique | length == 4' >/dev/null <<<"$S" ||
			fail "$VARIANT: the roles' GPU memory is not distinct"
	fi

	# Restart decode-1: its memory must leave GPU 3 and come back there.
	local old_pid uuid3
	old_pid=$(jq '.roles[] | select(.name == "decode-1") | .pid' <<<"$S")
	uuid3=$(jq -r '.roles[] | select(.name == "decode-1") | .gpu_uuids[0]' <<<"$S")
	tsd restart decode-1 "$P"
	: >"$out/restart-timeline.jsonl"
	local deadline=$((SECONDS + TIMEOUT)) released=0
	while :; do
		S=$(tsd status --json "$P")
		jq -c --arg u "$uuid3" '{time, decode1: (.roles[] | select(.name == "decode-1")
			| {state, pid, gpu_mem_bytes}), gpu: (.gpus[] | select(.uuid == $u)
			| {index, uuid, mem_used_bytes, processes})}' <<<"$S" >>"$out/restart-timeline.jsonl"
		if ((!released)) && jq -e --arg u "$uuid3" '.gpus[] | select(.uuid == $u) | (.processes // []) == []' >/dev/null <<<"$S"; then
			released=1
			jq . <<<"$S" >"$out/status-released.json"
		fi
		if ((released)) && jq -e --argjson old "$old_pid" '(.roles[] | select(.name == "decode-1") | .pid != $old)' >/dev/null <<<"$S" &&
			jq -e "$READY" >/dev/null <<<"$S"; then
			break
		fi
		((SECONDS < deadline)) || fail "$VARIANT: decode-1 did not come back on $uuid3"
		sleep 0.2
	done
	jq . <<<"$S" >"$out/status-restarted.json"
	local after
	after=$(summary <<<"$S")
	echo "$after"
	# The others kept their PIDs, GPU processes and memory; decode-1 is on
	# the same UUID with a new PID and its (deterministic) amount again.
	local r
	for r in encode prefill decode-0; do
		[[ $(grep "\"role\":\"$r\"" <<<"$before") == "$(grep "\"role\":\"$r\"" <<<"$after")" ]] ||
			fail "$VARIANT: $r changed across the restart of decode-1"
	done
	jq -e --arg u "$uuid3" --argjson old "$old_pid" --argjson mem \
		"$(jq '.roles[] | select(.name == "decode-1") | .gpu_mem_bytes' "$out/status-up.json")" '
		.roles[] | select(.name == "decode-1") | .gpu_uuids == [$u] and .pid != $old
			and .restarts == 1 and .gpu_mem_bytes == $mem' >/dev/null <<<"$S" ||
		fail "$VARIANT: decode-1 did not come back as it was"

	mapping "$out" >"$out/mapping.md"

	# Stop: keep the last status tsd answers with, then check the leftovers.
	local pids
	pids=$(jq -r '[.roles[].proc.pids[]?, .gpus[].processes[]?.pid] | unique | join(" ")' <<<"$S")
	tsd stop "$P"
	local last=""
	while S=$(tsd status --json "$P" 2>/dev/null); do
		last=$S
		sleep 0.1
	done
	[[ -z $last ]] || jq . <<<"$last" >"$out/status-stopping.json"
	wait "$up" || fail "$VARIANT: tsd up exited with status $?"
	trap - EXIT
	local p left=()
	for p in $pids; do
		if kill -0 "$p" 2>/dev/null; then left+=("$p"); fi
	done
	((${#left[@]} == 0)) || fail "$VARIANT: still running after stop: ${left[*]}"
	# No ts-fake of this profile (its dist-init ports are its own) remains.
	local ports
	ports=$(grep -o 'dist-init-addr 127.0.0.1:[0-9]*' "$out/headless.log" | sort -u | sed 's/.*://' | paste -sd'|')
	if pgrep -af "ts-fake serve .*--dist-init-addr 127\.0\.0\.1:($ports) " >"$out/leftover.txt"; then
		fail "$VARIANT: ts-fake left: $(cat "$out/leftover.txt")"
	fi
	rm -f "$out/leftover.txt"
	# Telemetry's last word on each GPU before tsd exited: released.
	local freed
	freed=$(grep -c 'GPU memory released' "$out/headless.log" || true)
	((freed == 5)) || fail "$VARIANT: expected 5 'GPU memory released' lines (1 restart + 4 stops), got $freed"
	grep -E '\| \[tsd\]|^tsd ' "$out/headless.log" >"$out/tsd-events.log" || true
	echo "== $VARIANT: stopped; no process of the run left; telemetry saw all four GPUs released"

	dashboard "$out"
}

# mapping OUT: the role → GPU table (Markdown) from the two status files.
mapping() {
	local out=$1
	echo "| role | CUDA_VISIBLE_DEVICES | GPU UUID (telemetry) | NVML index | engine PID → GPU PID (up) | GPU mem (up) | util (up) | engine PID → GPU PID (after restart of decode-1) | GPU mem (after) |"
	echo "|---|---|---|---|---|---|---|---|---|"
	jq -rn --slurpfile up "$out/status-up.json" --slurpfile re "$out/status-restarted.json" '
		def gpu($s; $u): $s.gpus[] | select(.uuid == $u);
		def gpid($s; $r; $u): [gpu($s; $u) | .processes[]? | select(.role == $r) | .pid] | map(tostring) | join(",");
		def gib: . / 1073741824 * 100 | round / 100 | tostring + " GiB";
		$up[0] as $a | $re[0] as $b |
		$a.roles[] | .name as $r | (.gpu_uuids[0]) as $u |
		($b.roles[] | select(.name == $r)) as $r2 |
		"| \($r) | `\(.gpus | join(","))` | `\($u)` | \(gpu($a; $u).index) | \(.pid) → \(gpid($a; $r; $u)) | \(.gpu_mem_bytes | gib) | \(gpu($a; $u).util_pct)% | \($r2.pid) → \(gpid($b; $r; $u)) | \($r2.gpu_mem_bytes | gib) |"'
}

# dashboard OUT: the same deployment with the dashboard, at 140x42, until
# every role is ready and every GPU shows its memory; one plain-text shot.
dashboard() {
	local out=$1 sock="tsd-mgs-$$" t=mgs
	tm() { tmux -L "$sock" -f /dev/null "$@"; }
	rm -rf "$HERE/.run/$VARIANT"
	tm new-session -d -s "$t" -x 140 -y 42 \
		"cd '$ROOT' && PATH='$ROOT/bin':\"\$PATH\" tsd up '$P' ${FAKE_FLAG[*]}; echo; echo \"tsd exited with status \$?\"; sleep 3600"
	trap "tmux -L '$sock' kill-server 2>/dev/null || true" EXIT
	wait_screen() {
		local re=$1 deadline=$((SECONDS + TIMEOUT))
		until tm capture-pane -p -t "$t" | grep -Eq -- "$re"; do
			((SECONDS < deadline)) || { tm capture-pane -p -t "$t" >&2; fail "$VARIANT: dashboard: no /$re/"; }
			sleep 0.2
		done
	}
	wait_screen '4/4 roles ready'
	# The GPU panel fills on telemetry's next poll after the last rank.
	poll "the dashboard's deployment to hold its GPUs" "$READY"
	local prev="" cur
	for _ in $(seq 30); do
		sleep 0.5
		cur=$(tm capture-pane -p -t "$t")
		[[ $cur == "$prev" ]] && break
		prev=$cur
	done
	tm capture-pane -p -t "$t" >"$out/dashboard-140x42.txt"
	tm send-keys -t "$t" q
	wait_screen 'quit tsd\?'
	tm send-keys -t "$t" y
	wait_screen 'tsd exited with status 0'
	tm kill-server
	trap - EXIT
	echo "== $VARIANT: dashboard saved to $out/dashboard-140x42.txt"
}

VARIANTS=("$@")
((${#VARIANTS[@]})) || VARIANTS=(indices uuids)
for v in "${VARIANTS[@]}"; do
	run_variant "$v"
done
echo "== all done; captures under $HERE/{$(
	IFS=,
	echo "${VARIANTS[*]}"
)}"
