#!/usr/bin/env bash
# A real two-node Slurm cluster on this one machine, for tsd's multi-node
# tests: slurmctld plus two slurmd (n1, n2) on 127.0.0.1 with their own
# ports, each node with fake GPUs (character devices, major 195 like the
# NVIDIA driver's) in gres.conf, so `srun --gres=gpu:N` sets
# CUDA_VISIBLE_DEVICES the way a GPU cluster does. Debian's slurm-wlm and
# munge (installed by .ci/run, or: apt-get install slurm-wlm munge); root.
#
#   scripts/slurm/up.sh      # start; prints `export SLURM_CONF=…`
#   scripts/slurm/down.sh    # stop everything and remove the folder
#
# Env: TSD_SLURM_DIR (default /tmp/tsd-slurm), TSD_SLURM_GPUS per node
# (default 2), TSD_SLURM_PORT base (default 16817: slurmctld; slurmd on
# +1, +2).
set -euo pipefail
dir=${TSD_SLURM_DIR:-/tmp/tsd-slurm}
gpus=${TSD_SLURM_GPUS:-2}
port=${TSD_SLURM_PORT:-16817}
for c in slurmctld slurmd munged sinfo srun; do
	command -v $c >/dev/null || { echo "slurm/up: $c not found (apt-get install slurm-wlm munge)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "slurm/up: needs root (slurmd runs jobs as their users)" >&2; exit 2; }

mkdir -p "$dir"/{state,log,run/slurmd.n1,run/slurmd.n2,dev,munge}
chmod 711 "$dir/munge" # munged wants its socket's folder searchable by all

# munge: a private key and socket, so nothing of the host's is touched.
if [[ ! -s $dir/munge/munge.key ]]; then
	dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
	chmod 400 "$dir/munge/munge.key"
fi
msock=$dir/munge/munge.socket
if ! [[ -S $msock ]] || ! munge -n -S "$msock" >/dev/null 2>&1; then
	munged --force -S "$msock" --key-file="$dir/munge/munge.key" \
		--pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
fi

# Fake GPUs: plain files make a node INVAL; character devices pass.
total=$((gpus * 2))
for ((i = 0; i < total; i++)); do
	[[ -c $dir/dev/nvidia$i ]] || mknod "$dir/dev/nvidia$i" c 195 "$i"
done

cpus=$(nproc)
mem=$(($(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) / 4))
cat >"$dir/slurm.conf" <<CONF
ClusterName=tsdtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$msock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/run/slurmd.%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=n1 NodeAddr=127.0.0.1 NodeHostname=$(hostname) Port=$((port + 1)) CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 NodeHostname=$(hostname) Port=$((port + 2)) CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
{
	echo "NodeName=n1 Name=gpu File=$dir/dev/nvidia[0-$((gpus - 1))]"
	echo "NodeName=n2 Name=gpu File=$dir/dev/nvidia[$gpus-$((total - 1))]"
} >"$dir/gres.conf"
export SLURM_CONF=$dir/slurm.conf

pidof_file() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
pidof_file "$dir/run/slurmctld.pid" || slurmctld -f "$SLURM_CONF"
for n in n1 n2; do
	pidof_file "$dir/run/slurmd.$n.pid" || slurmd -f "$SLURM_CONF" -N "$n"
done

# Ready when both nodes are idle (or mixed/allocated from an earlier run).
deadline=$((SECONDS + 60))
until sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 ~ /^(idle|mix|alloc)/ {n++} END {exit n != 2}'; do
	if ((SECONDS > deadline)); then
		echo "slurm/up: nodes not ready after 60 s:" >&2
		sinfo -N -l >&2 || true
		tail -20 "$dir"/log/*.log >&2 || true
		exit 1
	fi
	sleep 0.5
done
echo "export SLURM_CONF=$SLURM_CONF"
