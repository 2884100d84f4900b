#!/usr/bin/env bash
# GPU-initiated channels on the GPU machine (carry gpu_carry, built with
# tools/dev/gpu_carry.sh): the FIFO, the GPU -> host -> GPU round trip, the
# two-process kernel ping-pong and expert-parallel dispatch/combine among
# one process per GPU (2, and 4 where there are 4 GPUs). Every mode checks
# its data; the script exits non-zero if any check failed.
# With SHARE_GPU=1 the two-process modes run every rank on GPU 0 under
# CUDA MPS (started here in a private directory and stopped at the end), so
# kernels of several processes run at once instead of time-sliced; the NCCL
# baselines then run the same way (every rank on GPU 0, an NCCL_HOSTID each).
# ROUNDS repeats the dispatch/combine demo and its baselines, interleaved;
# NCCL_BASELINES=0 leaves the NCCL baselines out.
# Usage: [SHARE_GPU=1] [EP_ONLY=1 | PP_ONLY=1] [WORLDS="2 4"] [TOKENS="8 32 128"]
#        [ROUNDS=1]
#        [EP_ARGS=... | EP_VARIANTS="flags;flags"] [EP_CORE0=4 EP_CORE_STEP=2]
#        [NCCL_BASELINES=0] [PP_SIZES="256 65536"]
#        [PP_ARGS=...]
#        tools/dev/gpu_channels.sh [ITERATIONS]
set -uo pipefail
B=${BIN:-gpu_carry/bin/channel_bench}
ITERS=${1:-1000}
NGPU=$(nvidia-smi -L | wc -l)
SHARE=${SHARE_GPU:-0}
fail=0
gpu_of() { if [ "$SHARE" = 1 ]; then echo 0; else echo "$1"; fi; }
if [ "$SHARE" = 1 ]; then
  # shellcheck source=tools/dev/mps.sh
  source "$(dirname "$0")/mps.sh"
  mps_start
  NGPU=4  # every rank on GPU 0
fi
run() { echo "== $*"; timeout 300 "$@" 2>&1 | grep -v '^I20'; local rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || { echo "FAILED ($rc): $*"; fail=1; }; }

if [ -z "${EP_ONLY:-}" ] && [ -z "${PP_ONLY:-}" ]; then
run "$B" --mode fifo --pushes 1024 --core 4
run "$B" --mode fifo --pushes 1024 --slots 65536 --core 4
run "$B" --mode rtt --iterations 20000 --core 4
fi
if [ "$NGPU" -ge 2 ] && [ -z "${EP_ONLY:-}" ]; then
  for sz in ${PP_SIZES:-256 65536}; do
    out=$(mktemp)
    timeout 300 "$B" --mode pingpong --role server --gpu "$(gpu_of 1)" --core 6 --port 0 \
      --msg_bytes "$sz" --iterations 5000 ${PP_ARGS:-} >"$out" 2>&1 &
    spid=$! port=""
    for _ in $(seq 100); do
      port=$(sed -n 's/^listening on port //p' "$out"); [ -n "$port" ] && break
      sleep 0.1
    done
    run "$B" --mode pingpong --role client --gpu 0 --core 8 --port "$port" \
      --msg_bytes "$sz" --iterations 5000 ${PP_ARGS:-}
    wait "$spid" || { echo "FAILED: pingpong server"; cat "$out"; fail=1; }
    rm -f "$out"
  done
fi
PY=${PY:-/opt/torch/.venv/bin/python3}
# Rank r's proxy on core C0 + CS * r, and its endpoint's engines on cores of
# their own (UCCL_ENGINE_CORES): from the top down, skipping every proxy's
# core and cores 0-3 (the ranks' launching threads, MPS). Left to claim
# cores themselves, 4 ranks of 4 engines on 16 cores took every core and
# the proxies shared theirs with spinning engines (dispatch+combine 5-10x
# slower). Engines per rank: --num_cpus in the flags, else as many as the
# free cores give each rank, at most 4.
C0=${EP_CORE0:-4} CS=${EP_CORE_STEP:-2}
NCORES=$(nproc)
free_cores() {  # $1: world
  local c k
  for ((c = NCORES - 1; c >= 4; c--)); do
    for ((k = 0; k < $1; k++)); do [ "$c" = $((C0 + CS * k)) ] && continue 2; done
    echo "$c"
  done
}
engines_per_rank() {  # $1: world, $2: flags
  local n
  n=$(sed -n 's/.*--num_cpus[= ]\([0-9]*\).*/\1/p' <<<"$2")
  [ -n "$n" ] && { echo "$n"; return; }
  n=$(($(free_cores "$1" | wc -l) / $1))
  ((n > 4)) && n=4
  ((n < 1)) && n=1
  echo "$n"
}
rank_cores() {  # $1: rank, $2: world, $3: engines per rank ("": too few)
  (($(free_cores "$2" | wc -l) >= $2 * $3)) || return 0
  free_cores "$2" | sed -n "$(($1 * $3 + 1)),$((($1 + 1) * $3))p" | paste -sd,
}
# One dispatch/combine run of every token count: ranks 1.. in the
# background, rank 0 here; $1: extra channel_bench flags.
ep_run() {
  local port=$((29600 + world * 16)) pids=() tokens r i n
  n=$(engines_per_rank "$world" "$1")
  local ncpus="--num_cpus $n"
  grep -q -- --num_cpus <<<"$1" && ncpus=""
  local c0
  c0=$(rank_cores 0 "$world" "$n")
  echo "== $world ranks: $n engines each, rank 0's on cores" \
    "${c0:-(none given: too few cores free of the proxies; they claim their own)}"
  for tokens in ${TOKENS:-8 32 128}; do
    pids=()
    for r in $(seq 1 $((world - 1))); do
      UCCL_ENGINE_CORES=$(rank_cores "$r" "$world" "$n") \
        timeout 300 "$B" --mode ep --world "$world" --rank "$r" \
        --gpu "$(gpu_of "$r")" --core $((C0 + CS * r)) --base_port "$port" \
        --iterations "$ITERS" --tokens "$tokens" $ncpus $1 >"/tmp/ep_$r.txt" 2>&1 &
      pids+=($!)
    done
    UCCL_ENGINE_CORES=$(rank_cores 0 "$world" "$n") \
      run "$B" --mode ep --world "$world" --rank 0 --gpu 0 --core "$C0" \
      --base_port "$port" --iterations "$ITERS" --tokens "$tokens" $ncpus $1
    for i in "${!pids[@]}"; do
      r=$((i + 1))
      wait "${pids[$i]}" || { echo "FAILED: ep rank $r"; fail=1; }
      grep -v '^I20' "/tmp/ep_$r.txt" | tail -1
    done
  done
}
# EP_VARIANTS: channel_bench flag sets separated by ';', each run in turn in
# every round (default: EP_ARGS alone).
IFS=';' read -r -a variants <<<"${EP_VARIANTS:-${EP_ARGS:-}}"
[ "${#variants[@]}" = 0 ] && variants=("")
for round in $(seq "${ROUNDS:-1}"); do
  for world in ${WORLDS:-2 4}; do
    [ -n "${PP_ONLY:-}" ] && break
    [ "$NGPU" -ge "$world" ] || continue
    for v in "${variants[@]}"; do
      echo "== round $round, $world ranks, channel_bench flags: ${v:-none}"
      ep_run "$v"
    done
    # The same exchange as torch.distributed all_to_all_single over NCCL.
    [ "${NCCL_BASELINES:-1}" = 0 ] && continue
    share_flag=""
    [ "$SHARE" = 1 ] && share_flag=--share_gpu
    for net in Socket UCCL; do
      run "$PY" tools/ep_nccl_baseline.py --world "$world" --net "$net" \
        --plugin gpu_carry/libnccl-net-uccl.so --iterations "$ITERS" \
        --tokens "$(echo ${TOKENS:-8 32 128} | tr ' ' ,)" $share_flag
    done
  done
done
exit $fail
