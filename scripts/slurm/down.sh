#!/usr/bin/env bash
# Stops what scripts/slurm/up.sh started and removes its folder.
set -uo pipefail
dir=${TSD_SLURM_DIR:-/tmp/tsd-slurm}
[[ -d $dir ]] || exit 0
export SLURM_CONF=$dir/slurm.conf
scancel --quiet --full --user=root 2>/dev/null || true
for f in "$dir"/run/slurmd.*.pid "$dir/run/slurmctld.pid" "$dir/munge/munged.pid"; do
	[[ -s $f ]] && kill "$(cat "$f")" 2>/dev/null
done
for _ in $(seq 50); do
	alive=0
	for f in "$dir"/run/*.pid "$dir/munge/munged.pid"; do
		[[ -s $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
	done
	((alive)) || break
	sleep 0.1
done
rm -rf "$dir"
