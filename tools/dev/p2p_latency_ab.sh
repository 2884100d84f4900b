#!/usr/bin/env bash
# 256 B latency A/B on the GPU machine, interleaved rounds: `cpp` runs
# p2p_pingpong (C++, raw UDP in the same run) per setting; `py` runs
# p2p/benchmark.py's send mode (depth-1 latency and ping-pong) per setting.
# Usage: tools/dev/p2p_latency_ab.sh cpp|py
#   BASE=path/to/older/p2p_pingpong (cpp: adds a "before" row), NEW=the
#   current one (default gpu_p2p_carry/p2p_pingpong), ROUNDS="1 2 3",
#   SIZE=256, ITERS=20000 (cpp), SETTINGS="label=ENV=V[,ENV=V] ..." (default: inline on, off,
#   and the control ACK held 10 us). `py` needs `gpu_p2p.sh build` first
#   (or P2P_PYTHONPATH=build/python PY=python3 here).
set -u
MODE=${1:?cpp|py}
NEW=${NEW:-gpu_p2p_carry/p2p_pingpong}
ROUNDS=${ROUNDS:-1 2 3}
SIZE=${SIZE:-256}
SETTINGS=${SETTINGS:-"inline=X=1 inline-off=UCCL_INLINE_BYTES=0 held-10us=UCCL_CTRL_ACK_DELAY_US=10"}
PY=${PY:-/opt/torch/.venv/bin/python3}

# p50 and p99 of each row p2p_pingpong prints (UDP, then p2p).
cpp_row() {  # label env binary
  local envs=${2//,/ }
  echo "$1: $(timeout 60 env $envs "$3" --iterations "${ITERS:-20000}" --size "$SIZE" \
    2>/dev/null | awk '/p50/ && !/ratio/ {for (i = 1; i <= NF; i++)
      if ($i == "p50" || $i == "p99") printf "%s %s ", $i, $(i + 1);
      printf "| "}')"
}

# benchmark.py server + client, one engine each; the client's size row.
py_row() {  # label env
  local envs=${2//,/ } out port="" sp
  out=$(mktemp)
  env $envs $PY p2p/benchmark.py --role server --port 0 --num-cpus 1 \
    --sizes "$SIZE" --mode send --nic udp:lo --iters 2000 >"$out" 2>&1 &
  sp=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/^listening on port //p' "$out")
    [ -n "$port" ] && break
    sleep 0.2
  done
  echo "$1: $(env $envs $PY p2p/benchmark.py --role client --port "$port" \
    --num-cpus 1 --sizes "$SIZE" --mode send --nic udp:lo --iters 2000 \
    2>&1 | grep -E "^\[Client\] +[0-9]" | head -1)"
  wait "$sp"
  rm -f "$out"
}

for r in $ROUNDS; do
  echo "== round $r"
  if [ "$MODE" = cpp ] && [ -n "${BASE:-}" ]; then cpp_row before X=1 "$BASE"; fi
  for s in $SETTINGS; do
    label=${s%%=*}
    envs=${s#*=}
    if [ "$MODE" = cpp ]; then
      cpp_row "$label" "$envs" "$NEW"
    else
      PYTHONPATH=${P2P_PYTHONPATH:-$PWD/build_gpu/python} py_row "$label" "$envs"
    fi
  done
done
