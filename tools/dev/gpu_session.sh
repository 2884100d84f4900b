#!/usr/bin/env bash
# What runs on the GPU machine (device tool), from the repository root with
# gpu_carry/ carried (tools/dev/gpu_carry.sh). Results go to $OUT.
#   tools/dev/gpu_session.sh nccl     conformance + profiler events + NCCL correctness + bench suite
#   tools/dev/gpu_session.sh engines  transport_test engine scaling and latency
#   tools/dev/gpu_session.sh tune     UCCL knob variants of the all_reduce bench
#   tools/dev/gpu_session.sh engine1  one engine vs raw UDP, $ROUNDS interleaved
#                                 rounds of the env variants in $VARIANTS
#   tools/dev/gpu_session.sh lat      64 B one-way latency vs UDP ping-pong, the
#                                 same way ($ROUNDS, $VARIANTS, $MSIZE)
#   tools/dev/gpu_session.sh perf     nccl_perf (C++ all_reduce loop): UCCL vs
#                                 Socket / Socket 4x4, and the host-memory
#                                 floor (SHM), in $ROUNDS interleaved rounds,
#                                 then the loop's floor (P2P)
#                                 (COLL=sendrecv: the sendrecv ring instead;
#                                 COLL=all_to_all: grouped sends to all)
#   tools/dev/gpu_session.sh faults   NCCL correctness over UCCL with injected
#                                 drop, corruption, reordering and duplicates
#                                 (one fault each, $FAULTS), then nccl_perf
#                                 with 0.1% and 1% drop against no faults
#   tools/dev/gpu_session.sh profile  the profiler plugin under real NCCL
#                                 (tools/nccl_test.py profile, its traces to
#                                 $OUT/profile), then its overhead: nccl_perf
#                                 all_reduce with and without it, same rounds
#   tools/dev/gpu_session.sh shaped   nccl_perf with each rank in its own
#                                 network namespace over a veth pair shaped
#                                 to $RATES Gb/s (tbf, $QUEUE_KB KiB queue;
#                                 "none": no bottleneck)
#                                 with random loss $LOSSES (iptables): UCCL
#                                 with each CC and NCCL's Socket (its
#                                 defaults: Socket 4x4 hangs at setup
#                                 through a deep tbf bucket), same rounds
#                                 (needs gpu_netroot/ carried:
#                                 tools/dev/gpu_netroot.sh); ORDERS="keep
#                                 reorder" adds a testbed that lets the
#                                 veth reorder a flow (netns.sh --reorder);
#                                 TIMEOUT_S bounds each net (default 240);
#                                 BURST_KB sets the tbf bucket (netns.sh);
#                                 COLL=all_to_all times that instead
#   tools/dev/gpu_session.sh procs    nccl_perf one process per GPU against
#                                 one process driving every GPU, UCCL and
#                                 Socket 4x4, $ROUNDS interleaved rounds
#   tools/dev/gpu_session.sh crosscheck  the engine against the simulator
#                                 (tools/sim_crosscheck.py) at $RATES Gb/s,
#                                 $ROUNDS rounds, on a host with cores to
#                                 spare (needs gpu_netroot/ carried)
# GPUS=N runs N ranks (one GPU each) in the NCCL modes; default 2.
# SHARE_GPU=1 (the NCCL modes but procs): every rank on GPU 0 under CUDA MPS,
# each with an NCCL_HOSTID of its own (nccl_perf --share_gpu, nccl_test.py
# --share-gpu), for hosts with one GPU; the SHM and P2P floors are left out
# then (they need ranks of one host).
set -u
PART=${1:-nccl}
OUT=${OUT:-/tmp/uccl-out}
mkdir -p "$OUT"
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
# The carried build (C=other_carry to compare two), as an absolute path:
# nccl_perf finds the plugin next to its own binary.
C=${C:-gpu_carry}
case "$C" in /*) ;; *) C=$PWD/$C ;; esac
# The NCCL that PyTorch ships (the one the torch runs use), else the system's.
nccl_lib() {
  local lib=libnccl.so.2 d
  for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib; do
    [ -e "$d/libnccl.so.2" ] && lib="$d/libnccl.so.2"
  done
  echo "$lib"
}
# The server's received Gb/s from a --json run's output on stdin.
server_rx_gbps() {
  grep '"role":"server"' | sed 's/.*"rx_gbps":\([0-9.]*\).*/\1/'
}
echo "== $(hostname): $(nproc) cores, $(nvidia-smi -L 2>/dev/null | wc -l) GPUs"
SHARE_FLAG="" PY_SHARE=""
if [ "${SHARE_GPU:-0}" = 1 ]; then
  # shellcheck source=tools/dev/mps.sh
  source "$(dirname "$0")/mps.sh"
  mps_start
  SHARE_FLAG=--share_gpu PY_SHARE=--share-gpu
  echo "== every rank on GPU 0 under MPS (nccl_perf --share_gpu)"
fi
DEFAULT_NETS=UCCL,Socket,Socket4x4,SHM
[ -n "$SHARE_FLAG" ] && DEFAULT_NETS=UCCL,Socket,Socket4x4
nvidia-smi -L 2>/dev/null
case "$PART" in
  nccl)
    echo "== plugin conformance (dlopen on this machine)"
    timeout 300 "$C/bin/nccl_plugin_conformance" --plugin="$C/libnccl-net-uccl.so" \
      >"$OUT/conformance.txt" 2>&1
    echo "rc=$?"
    tail -18 "$OUT/conformance.txt"
    echo "== UCCL's profiler plugin loaded by NCCL (NetPlugin events under proxy steps)"
    timeout 200 "$PY" tools/nccl_test.py $PY_SHARE profile --world "${GPUS:-2}" --plugin "$C/libnccl-net-uccl.so" \
      2>&1 | tee "$OUT/profile.md" | grep -v "^\[" | tail -12
    echo "== NCCL suite"
    timeout 540 "$PY" tools/nccl_test.py $PY_SHARE suite --world "${GPUS:-2}" --iters "${ITERS:-100}" --plugin "$C/libnccl-net-uccl.so" \
      --json "$OUT/suite.json" 2>&1 | tee "$OUT/suite.md" | grep -v "^\[" | tail -120
    cp -r /tmp/uccl-nccl-* "$OUT/" 2>/dev/null
    ;;
  engines)
    echo "== loopback baselines and engine scaling (transport_test tpt, 8 flows)"
    for e in 1 2 4 8; do
      udp=$("$C/bin/socket_bench" --proto=udp --streams=$e --duration_s=3 --json | server_rx_gbps)
      tcp=$("$C/bin/socket_bench" --proto=tcp --streams=$e --duration_s=3 --json | server_rx_gbps)
      tools/transport_pair.sh "$C" \
        --perftype=tpt --engines=$e --nflow=8 --nreq=4 --duration_s=4 --json \
        >"$OUT/tpt_e$e.txt" 2>&1
      uc=$(server_rx_gbps <"$OUT/tpt_e$e.txt")
      echo "engines $e: UCCL $uc Gb/s, raw UDP ($e streams) $udp Gb/s, TCP $tcp Gb/s"
    done
    echo "== NCCL-like: both directions, 512 KiB messages, 8 in flight per flow"
    for e in 4 8; do
      tools/transport_pair.sh "$C" --perftype=bi --engines=$e --nflow=8 --nreq=8 \
        --msize=524288 --duration_s=4 --json >"$OUT/bi_e$e.txt" 2>&1
      echo "engines $e: $(grep '"role":"client"' "$OUT/bi_e$e.txt" |
        sed 's/.*"tx_gbps":\([0-9.]*\),"rx_gbps":\([0-9.]*\).*/tx \1 rx \2 Gb\/s/')"
      grep "retransmits" "$OUT/bi_e$e.txt" | head -1
    done
    echo "== latency"
    "$C/bin/socket_bench" --lat --json | tail -2
    "$C/bin/socket_bench" --lat --lat_poll --json | tail -2
    tools/transport_pair.sh "$C" --flagfile=configs/transport_test/loopback_lat.flags \
      --json >"$OUT/lat.txt" 2>&1
    grep -A1 "one-way" "$OUT/lat.txt" | head -4
    ;;
  engine1)
    # Each round: raw UDP (1 stream), then every variant with 1 and 8 flows;
    # the ratio is against that round's UDP figure.
    IFS=';' read -r -a vars <<<"${VARIANTS:-UCCL_CRC32C=auto}"
    for r in $(seq "${ROUNDS:-3}"); do
      udp=$("$C/bin/socket_bench" --proto=udp --streams=1 --duration_s=3 --json | server_rx_gbps)
      echo "round $r: raw UDP $udp Gb/s"
      for v in "${vars[@]}"; do
        for f in "--nflow=1 --nreq=16" "--nflow=8 --nreq=4"; do
          env $v tools/transport_pair.sh "$C" --perftype=tpt --engines=1 \
            --msize=1048576 --duration_s=3 $f --json >"$OUT/e1.txt" 2>&1
          uc=$(server_rx_gbps <"$OUT/e1.txt")
          echo "  $v $f: UCCL $uc Gb/s ratio $(awk -v a="$uc" -v b="$udp" 'BEGIN{if (b > 0) printf "%.3f", a / b}')"
        done
      done
    done
    ;;
  lat)
    IFS=';' read -r -a vars <<<"${VARIANTS:-UCCL_ENGINE_DRIVES_NIC=1}"
    for r in $(seq "${ROUNDS:-3}"); do
      echo "round $r: raw UDP, blocking recv $("$C/bin/socket_bench" --lat --msize="${MSIZE:-64}" | tail -1)"
      echo "  raw UDP, busy-polled recv $("$C/bin/socket_bench" --lat --lat_poll --msize="${MSIZE:-64}" | tail -1)"
      for v in "${vars[@]}"; do
        env $v tools/transport_pair.sh "$C" \
          --flagfile=configs/transport_test/loopback_lat.flags \
          --msize="${MSIZE:-64}" >"$OUT/lat.txt" 2>&1
        echo "  $v: $(grep -A1 "one-way" "$OUT/lat.txt" | tail -1)"
      done
    done
    ;;
  perf)
    NCCL_LIB=$(nccl_lib)
    echo "== nccl_perf, $NCCL_LIB"
    timeout 560 "$C/bin/nccl_perf" --nccl_lib="$NCCL_LIB" --plugin="$C/libnccl-net-uccl.so" \
      --rounds="${ROUNDS:-3}" --nets="${NETS:-$DEFAULT_NETS}" --gpus="${GPUS:-2}" $SHARE_FLAG \
      ${SIZES:+--sizes=$SIZES} ${ITERS:+--iters=$ITERS} ${COLL:+--coll=$COLL} --json="$OUT/perf.json" 2>&1 |
      tee "$OUT/perf.md"
    if [ -z "${NO_FLOOR:-}" ] && [ -z "$SHARE_FLAG" ]; then
      echo "== the C loop's floor: NCCL over NVLink (no network)"
      timeout 120 "$C/bin/nccl_perf" --nccl_lib="$NCCL_LIB" --nets=P2P --rounds=1 \
        --sizes="${FLOOR_SIZES:-4,64,1K,16K,64K}" 2>&1 | tee "$OUT/perf_floor.md"
    fi
    ;;
  faults)
    # Each fault alone, from the sender's side of every engine (seeded);
    # the check compares every element, as without faults.
    fails=0
    for spec in ${FAULTS:-drop=0.01 corrupt=0.001 reorder=0.01:4 dup=0.01}; do
      echo "== check, UCCL_FAULT_TX=$spec"
      t0=$(date +%s)
      UCCL_FAULT_TX=$spec UCCL_FAULT_SEED=${SEED:-5} timeout 300 "$PY" tools/nccl_test.py $PY_SHARE \
        check --world "${GPUS:-2}" --plugin "$C/libnccl-net-uccl.so" >"$OUT/faults_${spec%%=*}.txt" 2>&1
      rc=$?
      echo "rc=$rc, $(($(date +%s) - t0)) s"
      [ $rc -eq 0 ] || fails=$((fails + 1))
      grep -E "CHECK|plugin loaded" "$OUT/faults_${spec%%=*}.txt" | head -4
    done
    NCCL_LIB=$(nccl_lib)
    echo "== nccl_perf under loss"
    timeout 400 "$C/bin/nccl_perf" --nccl_lib="$NCCL_LIB" --plugin="$C/libnccl-net-uccl.so" \
      --rounds="${ROUNDS:-2}" --sizes="${SIZES:-64K,1M,256M}" --gpus="${GPUS:-2}" $SHARE_FLAG \
      --nets="UCCL,UCCL+UCCL_FAULT_TX=drop=0.001,UCCL+UCCL_FAULT_TX=drop=0.01,Socket4x4" \
      --json="$OUT/faults_perf.json" 2>&1 | tee "$OUT/faults_perf.md"
    echo "fault checks failed: $fails"
    [ $fails -eq 0 ]
    ;;
  profile)
    echo "== UCCL's profiler plugin under NCCL"
    timeout 300 "$PY" tools/nccl_test.py $PY_SHARE profile \
      --world "${GPUS:-2}" --plugin "$C/libnccl-net-uccl.so" 2>&1 |
      tee "$OUT/profile.md" | grep -v "^\[" | tail -60
    d=$(ls -td /tmp/uccl-nccl-* | head -1)
    mkdir -p "$OUT/profile" && cp "$d"/profile/*.summary.txt "$OUT/profile/" 2>/dev/null
    # One rank's trace, compressed, as an example to open in Perfetto.
    t=$(ls "$d"/profile/*-r0.trace.json 2>/dev/null | head -1)
    [ -n "$t" ] && gzip -c "$t" >"$OUT/profile/rank0.trace.json.gz"
    NCCL_LIB=$(nccl_lib)
    echo "== profiler overhead: nccl_perf all_reduce with and without it"
    rm -rf /tmp/uccl-prof-perf
    timeout 500 "$C/bin/nccl_perf" --nccl_lib="$NCCL_LIB" --plugin="$C/libnccl-net-uccl.so" \
      --rounds="${ROUNDS:-3}" --sizes="${SIZES:-4,64K,1M,16M,256M}" --iters="${ITERS:-200}" $SHARE_FLAG \
      --nets="UCCL,UCCL+NCCL_PROFILER_PLUGIN=$C/libnccl-profiler-uccl.so+UCCL_PROFILER_DIR=/tmp/uccl-prof-perf+UCCL_PROFILER_EVENTS=8388608" \
      --json="$OUT/profile_perf.json" 2>&1 | tee "$OUT/profile_perf.md"
    grep -h "events\|dropped" /tmp/uccl-prof-perf/*.summary.txt 2>/dev/null | sort | uniq -c | head -6
    ;;
  shaped)
    # shellcheck disable=SC1091
    source gpu_netroot/env.sh
    NCCL_LIB=$(nccl_lib)
    TB=tools/testbed/netns.sh
    for rate in ${RATES:-25}; do
      for loss in ${LOSSES:-0 0.001 0.01}; do
        for order in ${ORDERS:-keep}; do
          echo "== ${rate} Gb/s, ${QUEUE_KB:-1024} KiB queue, loss $loss, flow order: $order"
          oflag=""
          [ "$order" = reorder ] && oflag=--reorder
          # RATES=none: the same namespaces and veth with no bottleneck (the
          # host's own ceiling for the figures at a rate).
          rflag="--rate=${rate}gbit --queue_kb=${QUEUE_KB:-1024} --burst_kb=${BURST_KB:-auto}"
          link=$rate
          [ "$rate" = none ] && rflag="" && link=0
          # shellcheck disable=SC2086
          $TB up --name=nt $rflag --mtu=9000 --loss="$loss" $oflag || exit 1
          NCCL_SOCKET_IFNAME=nt-v UCCL_LINK_GBPS=$link timeout 500 "$C/bin/nccl_perf" \
            --nccl_lib="$NCCL_LIB" --plugin="$C/libnccl-net-uccl.so" --netns=nt-a,nt-b $SHARE_FLAG \
            --rounds="${ROUNDS:-1}" --sizes="${SIZES:-1M,16M,64M}" --coll="${COLL:-all_reduce}" \
            --lat_calls=0 --per_round=false --timeout_s="${TIMEOUT_S:-240}" \
            --nets="${NETS:-UCCL,UCCL+UCCL_CC=swift,UCCL+UCCL_CC=timely_patched,UCCL+UCCL_CC=credit,Socket}" \
            --json="$OUT/shaped_${rate}_${loss}_${order}_${COLL:-all_reduce}.json" 2>&1 |
            tee "$OUT/shaped_${rate}_${loss}_${order}_${COLL:-all_reduce}.log" |
            grep -E "^\||FAIL|round"
          echo "dropped by the link: a $($TB drops --name=nt a), b $($TB drops --name=nt b);" \
            "by the bottleneck's queue: a $($TB qdrops --name=nt a), b $($TB qdrops --name=nt b)"
          $TB down --name=nt >/dev/null
        done
      done
    done
    ;;
  crosscheck)
    # shellcheck disable=SC1091
    source gpu_netroot/env.sh
    for rate in ${RATES:-1}; do
      for r in $(seq "${ROUNDS:-2}"); do
        echo "== ${rate} Gb/s, round $r"
        timeout 280 "$PY" tools/sim_crosscheck.py --build="$C" --rate_gbps="$rate" \
          --out="$OUT/crosscheck_${rate}g_$r" 2>&1 | grep -E "^\||Bottleneck"
      done
    done
    ;;
  procs)
    NCCL_LIB=$(nccl_lib)
    for r in $(seq "${ROUNDS:-3}"); do
      for mode in per_gpu one; do
        echo "== round $r, --procs=$mode"
        timeout 300 "$C/bin/nccl_perf" --nccl_lib="$NCCL_LIB" --plugin="$C/libnccl-net-uccl.so" \
          --procs=$mode --rounds=1 --nets="${NETS:-UCCL,Socket4x4}" --gpus="${GPUS:-2}" \
          --sizes="${SIZES:-8,1K,32K,64K,16M,64M,256M}" ${ITERS:+--iters=$ITERS} \
          --json="$OUT/procs_${mode}_$r.json" 2>&1 | tee "$OUT/procs_${mode}_$r.md" | grep -E "^\||round"
      done
    done
    ;;
  tune)
    # Configurations separated by ';' in $TUNE (default: a few knobs); one
    # that sets NCCL_NET=Socket runs NCCL's Socket transport instead.
    IFS=';' read -r -a cfgs <<<"${TUNE:-UCCL_NCCL_ENGINES=8;UCCL_PATHS=1;UCCL_CHUNK_KB=256}"
    for cfg in "${cfgs[@]}"; do
      echo "== $cfg"
      net=${NET:-UCCL}
      case "$cfg" in *NCCL_NET=Socket*) net=Socket ;; esac
      env UCCL_STATS_INTERVAL_S=1 $cfg timeout 200 "$PY" tools/nccl_test.py $PY_SHARE \
        bench --world "${GPUS:-2}" --net "$net" --plugin "$C/libnccl-net-uccl.so" --iters "${ITERS:-20}" --reps "${REPS:-1}" \
        --sizes "${SIZES:-4,65536,1048576,16777216,67108864,268435456}" 2>&1 |
        grep -E "^\| [0-9]+ \|"
      # The engines' periodic health lines (throughput, retransmits, drops).
      d=$(ls -td /tmp/uccl-nccl-* | head -1)
      grep -h "Channel [0-9]*/[0-9]* :" "$d"/*.log | tail -1
      grep -h "engine [0-9]: conns [1-9]" "$d"/*.log | grep -v " tx 0 Gb/s rx 0 Gb/s" |
        tail -4 | sed 's/.*NET\/UCCL //'
      rm -rf "$d"
    done
    ;;
esac
