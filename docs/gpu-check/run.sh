#!/bin/bash
# Runs on the GPU machine from the repo root (docs/gpu-check/README.md).
set -u
D=${D:-.device/h10}  # holds bin/{tsd,ts-fake}, gpu.yaml.in (= profile.yaml.in here), check.py
export PATH=$PWD/$D/bin:$PATH
O=${OUT:-/tmp/h10out}; mkdir -p $O
T=$O/timeline.txt
log() { echo "$(date +%T.%N | cut -c1-12) $*" | tee -a $T; }
U=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1)
[ -n "$U" ] || U=GPU-12345678-aaaa-bbbb-cccc-1234567890ab
sed "s/@UUID@/$U/" $D/gpu.yaml.in > $D/gpu.yaml
P=$D/gpu.yaml
{ echo '$ nvidia-smi -L'; nvidia-smi -L; echo; echo '$ python3 -c torch'; python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())'; } > $O/env.txt 2>&1
smi() { { echo "=== $1 ($(date +%T))"; nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,power.draw,temperature.gpu,clocks.sm --format=csv; nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv; echo; } >> $O/nvidia-smi.txt 2>&1; }
smi "before tsd up"
log "tsd up --headless $P (GPU $U)"
setsid tsd up --headless $P > $O/tsd-up.log 2>&1 &
TSD=$!
waitfor() { # EXPR SECONDS
  for i in $(seq 1 $(( $2 * 2 ))); do
    tsd status --json $P > /tmp/s.json 2>/dev/null && python3 $D/check.py "$1" /tmp/s.json && return 0; sleep 0.5
  done; log "TIMEOUT waiting for: $1"; return 1; }
HELD='all(x["state"]=="ready" for x in r.values()) and (not mem or (all(x["gpu_mem_bytes"]>0 for x in r.values()) and s["gpu_info"]["provider"]=="nvml"))'
waitfor "$HELD" 90 && log "both roles ready, holding GPU memory"
cp /tmp/s.json $O/status-1-held.json; smi "both roles holding"; ps -eo pid,ppid,pgid,rss,args | grep -v " ps \| grep" | grep "tsd\|ts-fake\|python3" | cut -c1-160 >> $O/nvidia-smi.txt
OLD=$(python3 -c 'import json;print([x["pid"] for x in json.load(open("/tmp/s.json"))["roles"] if x["name"]=="prefill"][0])')
log "tsd restart prefill (old pid $OLD)"; tsd restart prefill $P 2>&1 | tee -a $T
waitfor 'r["prefill"]["state"]!="ready"' 20 && cp /tmp/s.json $O/status-2-restarting.json
waitfor "r['prefill']['restarts']>=1 and r['prefill'].get('pid',0) not in (0,$OLD) and $HELD" 90 && log "prefill restarted and re-acquired"
cp /tmp/s.json $O/status-3-restarted.json; smi "after prefill restart"
log "tsd stop decode"; tsd stop decode $P 2>&1 | tee -a $T
waitfor 'r["decode"]["state"]=="stopped"' 40 && log "decode stopped"
cp /tmp/s.json $O/status-4-decode-stopped.json; smi "after tsd stop decode"
log "tsd stop (whole deployment)"; tsd stop $P 2>&1 | tee -a $T
for i in $(seq 1 120); do kill -0 $TSD 2>/dev/null || break; sleep 0.5; done
wait $TSD; log "tsd up exited rc=$?"
smi "after tsd stop"
grep -h "GPU memory\|verified empty\|→" $O/tsd-up.log | tee -a $T
