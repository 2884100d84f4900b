#!/usr/bin/env bash
# The p2p engine on the GPU machine: `pack` (here) carries the static
# libraries into gpu_p2p_carry/; there, `build` compiles the Python module
# against that machine's Python 3.12 and pybind11, `test` runs the p2p
# Python tests (the CUDA ones included), `bench` the figures of
# BENCHMARKS.md (results under $OUT), `latency` the 256 B ping-pong (C++
# and Python) against raw UDP ping-pongs, $ROUNDS rounds interleaved.
# Usage: tools/dev/gpu_p2p.sh MODE
set -euo pipefail
MODE=${1:?pack|build|test|bench|latency}
CARRY=gpu_p2p_carry
PY=${PY:-/opt/torch/.venv/bin/python3}
LIBS="channels channels_knobs p2p p2p_knobs engine transport cc util unwind_shim"

pack() {
  local b=${BUILD:-build}
  rm -rf "$CARRY" && mkdir -p "$CARRY"
  for l in $LIBS; do
    strip --strip-debug -o "$CARRY/libuccl_$l.a" "$b/lib/libuccl_$l.a"
  done
  cp /usr/lib/x86_64-linux-gnu/libglog.a "$CARRY/"
  cp "$b/util/CMakeFiles/uccl_gflags_shim.dir/gflags_shim.cc.o" "$CARRY/"
  for t in socket_bench p2p_pingpong; do
    strip --strip-debug -o "$CARRY/$t" "$b/bin/$t"
  done
  local excl
  excl="$(git rev-parse --git-dir)/info/exclude"
  grep -qx "$CARRY" "$excl" 2>/dev/null || echo "$CARRY" >>"$excl"
  du -sh "$CARRY"
}

build() {
  local ext out=build_gpu/python/uccl
  ext=$($PY -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  mkdir -p "$out"
  local archives=()
  for l in $LIBS; do archives+=("$CARRY/libuccl_$l.a"); done
  # The same definitions as the libraries were built with (here: CUDA and
  # verbs headers present), so the headers agree on every layout.
  g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden \
    -DGLOG_CUSTOM_PREFIX_SUPPORT -DUCCL_HAVE_CUDA=1 -DUCCL_HAVE_VERBS=1 \
    $($PY -m pybind11 --includes) \
    "-I$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")" \
    -I. -Iinclude -I/usr/local/cuda/include \
    p2p/python/p2p_module.cc p2p/python/channels_binding.cc \
    "$CARRY/gflags_shim.cc.o" \
    "${archives[@]:0:8}" "$CARRY/libglog.a" "${archives[8]}" \
    /usr/local/cuda/lib64/libcudart_static.a -ldl -lrt -lpthread \
    -o "$out/_p2p$ext"
  cp p2p/python/uccl/*.py "$out/"
  PYTHONPATH=$PWD/build_gpu/python $PY -c \
    "import uccl.p2p, sys; print('uccl.p2p imports in Python', sys.version.split()[0])"
}

bench() {
  local out=${OUT:-/tmp/p2p_bench} sizes=${SIZES:-256,4K,64K,1M,10M,100M}
  mkdir -p "$out"
  export PYTHONPATH=$PWD/build_gpu/python
  echo "== host memory copy (one core, numpy, 100 MB)"
  $PY - <<'PYEOF' | tee "$out/memcpy.txt"
import time, numpy as np
a = np.ones(100 << 20, np.uint8); b = np.empty_like(a); best = 0
for _ in range(10):
    t = time.perf_counter(); np.copyto(b, a); s = time.perf_counter() - t
    best = max(best, a.nbytes / s / 1e9)
print(f"memcpy_GBps {best:.2f}")
PYEOF
  echo "== raw sockets (4 streams) and UDP ping-pong"
  for p in tcp udp; do
    "$CARRY/socket_bench" --proto=$p --streams=4 --duration_s=3 --json \
      2>/dev/null | tail -2 | tee "$out/socket_$p.txt"
  done
  "$CARRY/socket_bench" --lat --lat_poll --msize=256 --json 2>/dev/null |
    tail -3 | tee "$out/udp_pingpong.txt"
  "$CARRY/socket_bench" --lat --msize=256 --json 2>/dev/null |
    tail -1 | tee "$out/udp_pingpong_blocking.txt"
  local common="--num-cpus 4 --sizes $sizes --async-depth 4 --nic udp:lo"
  echo "== uccl.p2p, host memory"
  run_pair p2p_send "$common --mode send"
  run_pair p2p_write "$common --mode write"
  echo "== torch.distributed gloo (host memory)"
  $PY p2p/torch_baseline.py --backend gloo --sizes "$sizes" --async-depth 4 \
    --json "$out/gloo.json"
  if [ "$($PY -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    echo "== uccl.p2p, GPU 0 -> GPU 1"
    run_pair p2p_gpu "$common --mode send --device gpu --local-gpu-idx 0" \
      "--local-gpu-idx 1"
    echo "== uccl.p2p write, GPU 0 -> GPU 1's region (its host shadow)"
    run_pair p2p_gpu_write \
      "$common --mode write --device gpu --local-gpu-idx 0" "--local-gpu-idx 1"
    echo "== torch.distributed NCCL over its Socket transport, GPU 0 -> GPU 1"
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_NVLS_ENABLE=0 \
      $PY p2p/torch_baseline.py --backend nccl --sizes "$sizes" \
      --async-depth 4 --json "$out/nccl_socket.json"
  fi
}

# server + client of p2p/benchmark.py; name, flags for both, server-only flags.
run_pair() {
  local name=$1 flags=$2 sflags=${3:-} out=${OUT:-/tmp/p2p_bench}
  $PY p2p/benchmark.py --role server --port 0 $flags $sflags \
    >"$out/$name.server.txt" 2>&1 &
  local spid=$! port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/^listening on port //p' "$out/$name.server.txt")
    [ -n "$port" ] && break
    sleep 0.2
  done
  $PY p2p/benchmark.py --role client --port "$port" $flags \
    --json "$out/$name.json" 2>&1 | tee "$out/$name.txt"
  wait $spid
}

latency() {
  local out=${OUT:-/tmp/p2p_bench} rounds=${ROUNDS:-3} r
  mkdir -p "$out"
  export PYTHONPATH=$PWD/build_gpu/python
  for r in $(seq "$rounds"); do
    echo "== round $r: raw UDP ping-pong, 256 B (busy-polled, blocking)"
    "$CARRY/socket_bench" --lat --lat_poll --msize=256 2>/dev/null | tail -1
    "$CARRY/socket_bench" --lat --msize=256 2>/dev/null | tail -1
    echo "== round $r: p2p_pingpong (C++), benchmark.py (Python)"
    "$CARRY/p2p_pingpong" --iterations 20000 2>/dev/null | tail -2
    run_pair "pingpong_r$r" "--num-cpus 4 --sizes 256 --mode send --nic udp:lo" |
      grep -E '256 B'
  done
}

case $MODE in
  pack) pack ;;
  build) build ;;
  test)
    build
    PYTHONPATH=$PWD/build_gpu/python $PY -m pytest -q -p no:cacheprovider \
      tests/p2p/test_p2p_gpu.py tests/p2p/test_p2p.py tests/p2p/test_benchmark.py \
      tests/p2p/test_channels.py
    ;;
  bench) bench ;;
  latency) latency ;;
  *) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
