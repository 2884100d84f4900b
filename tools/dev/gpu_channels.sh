#!/usr/bin/env bash
# GPU-initiated channels on the GPU machine (carry gpu_carry, built with
# tools/dev/gpu_carry.sh): the FIFO, the GPU -> host -> GPU round trip, the
# two-process kernel ping-pong and expert-parallel dispatch/combine among
# one process per GPU (2, and 4 where there are 4 GPUs). Every mode checks
# its data; the script exits non-zero on the first failure.
# Usage: tools/dev/gpu_channels.sh [ITERATIONS]
set -uo pipefail
B=${BIN:-gpu_carry/bin/channel_bench}
ITERS=${1:-1000}
NGPU=$(nvidia-smi -L | wc -l)
fail=0
run() { echo "== $*"; timeout 300 "$@" 2>&1 | grep -v '^I20'; local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || { echo "FAILED ($rc): $*"; fail=1; }; }

run "$B" --mode fifo --pushes 1024 --core 4
run "$B" --mode fifo --pushes 1024 --slots 65536 --core 4
run "$B" --mode rtt --iterations 20000 --core 4
if [ "$NGPU" -ge 2 ]; then
  for sz in 256 65536; do
    out=$(mktemp)
    timeout 300 "$B" --mode pingpong --role server --gpu 1 --core 6 --port 0 \
      --msg_bytes "$sz" --iterations 5000 >"$out" 2>&1 &
    spid=$! port=""
    for _ in $(seq 100); do
      port=$(sed -n 's/^listening on port //p' "$out"); [ -n "$port" ] && break
      sleep 0.1
    done
    run "$B" --mode pingpong --role client --gpu 0 --core 8 --port "$port" \
      --msg_bytes "$sz" --iterations 5000
    wait "$spid" || { echo "FAILED: pingpong server"; cat "$out"; fail=1; }
    rm -f "$out"
  done
fi
PY=${PY:-/opt/torch/.venv/bin/python3}
for world in 2 4; do
  [ "$NGPU" -ge "$world" ] || continue
  for tokens in ${TOKENS:-8 32 128}; do
    port=$((29600 + world * 16))
    pids=()
    for r in $(seq 1 $((world - 1))); do
      timeout 300 "$B" --mode ep --world "$world" --rank "$r" --gpu "$r" \
        --core $((4 + 2 * r)) --base_port "$port" --iterations "$ITERS" \
        --tokens "$tokens" >"/tmp/ep_$r.txt" 2>&1 &
      pids+=($!)
    done
    run "$B" --mode ep --world "$world" --rank 0 --gpu 0 --core 4 \
      --base_port "$port" --iterations "$ITERS" --tokens "$tokens"
    for i in "${!pids[@]}"; do
      r=$((i + 1))
      wait "${pids[$i]}" || { echo "FAILED: ep rank $r"; fail=1; }
      grep -v '^I20' "/tmp/ep_$r.txt" | tail -1
    done
  done
  # The same exchange as torch.distributed all_to_all_single over NCCL.
  for net in Socket UCCL; do
    run "$PY" tools/ep_nccl_baseline.py --world "$world" --net "$net" \
      --plugin gpu_carry/libnccl-net-uccl.so --iterations "$ITERS" \
      --tokens "$(echo ${TOKENS:-8 32 128} | tr ' ' ,)"
  done
done
exit $fail
