#!/usr/bin/env bash
# `make bench`: every CPU benchmark with its same-run baseline, as markdown
# (the format of BENCHMARKS.md). Usage: tools/run_benchmarks.sh [build-dir]
#   0. crc_bench: the receiving NIC's CRC-then-place work per implementation
#      vs memcpy alone
#   1. nic_bench: software NIC RC writes vs raw UDP on two cores
#   2. engine_bench: engine CPU cost per chunk, null NIC vs software NIC;
#      late_recv_bench: a late receive's completion, eager vs rendezvous
#   3. engine goodput under 1% injected loss vs lossless (transport_test tpt)
#   4. tools/bench_transport.sh: loopback tpt/lat vs TCP/UDP, netns CC runs
#   5. wake_bench: waking a thread asleep on a condition variable vs one
#      that spins (what NCCL's host thread pays when its proxy slept)
# Each run is bounded in time; the whole script takes about 3 minutes.
set -uo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
for b in crc_bench nic_bench engine_bench late_recv_bench transport_test socket_bench wake_bench; do
  [ -x "$BIN/$b" ] || { echo "run_benchmarks: $BIN/$b not built" >&2; exit 2; }
done

echo "## CRC32C per implementation (crc_bench, memcpy alone as baseline)"
echo
timeout 30 "$BIN/crc_bench" 2>&1
echo

echo "## nic_bench (software NIC RC writes vs raw UDP, same run)"
echo
timeout 120 "$BIN/nic_bench" 2>&1 | grep -v "^[IWE][0-9]"
echo

echo "## Engine CPU cost per chunk (engine_bench: null NIC, software NIC as baseline)"
echo
timeout 60 "$BIN/engine_bench" --duration_s=3 2>&1 | grep -v "^[IWE][0-9]"
echo

echo "## A late receive (late_recv_bench: eager sends, rendezvous as baseline)"
echo
timeout 60 "$BIN/late_recv_bench" --iters=1000 2>&1 | grep -v "^[IWE][0-9]"
echo

# goodput <extra flags...>: received Gb/s of a 4 s tpt run (1 engine, 1 MiB).
goodput() {
  timeout 60 tools/transport_pair.sh "$BUILD" --perftype=tpt \
    --msize=1048576 --duration_s=4 --json "$@" 2>/dev/null |
    grep '"role":"server"' | tail -1 | sed 's/.*"rx_gbps":\([0-9.]*\).*/\1/'
}
echo "## Engine goodput under 1% injected loss (1 engine, UC, 1 MiB messages)"
echo
clean=$(goodput)
lossy=$(goodput --fault_tx=drop=0.01)
rc=$(goodput --rc_mode --fault_tx=drop=0.01)
echo "| run | Gb/s | vs lossless |"
echo "|---|---:|---:|"
echo "| lossless | ${clean:-?} | |"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }'; }
echo "| 1% loss (UC, SACK + TLP + RTO) | ${lossy:-?} | $(ratio "${lossy:-0}" "${clean:-0}") |"
echo "| 1% loss (RC mode, NIC go-back-N) | ${rc:-?} | $(ratio "${rc:-0}" "${clean:-0}") |"
echo

tools/bench_transport.sh "$BUILD"
rc=$?

echo "## Waking a sleeping thread (wake_bench, a spinning one as baseline)"
echo
timeout 30 "$BIN/wake_bench" 2>&1
wrc=$?
[ $rc -ne 0 ] && exit $rc
exit $wrc
