#!/usr/bin/env bash
# Packs what the GPU machine runs (it has no glog/gflags/gtest): the NCCL
# plugin and the CPU tools, stripped, into gpu_carry/ (listed in
# .git/info/exclude; name it in the device tool's `carry`).
set -euo pipefail
BUILD=${1:-build}
OUTDIR=gpu_carry
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR/bin"
strip --strip-debug -o "$OUTDIR/libnccl-net-uccl.so" "$BUILD/lib/libnccl-net-uccl.so"
# The profiler plugin (tools/nccl_test.py profile) sits beside the net plugin.
strip --strip-debug -o "$OUTDIR/libnccl-profiler-uccl.so" "$BUILD/lib/libnccl-profiler-uccl.so"
for b in transport_test ccsim socket_bench nccl_plugin_conformance nic_bench engine_bench crc_bench late_recv_bench uccl_devinfo nccl_perf wake_bench channel_bench profiler_harness; do
  [ -x "$BUILD/bin/$b" ] && strip --strip-debug -o "$OUTDIR/bin/$b" "$BUILD/bin/$b"
done
EXCL="$(git rev-parse --git-dir)/info/exclude"
mkdir -p "$(dirname "$EXCL")"
grep -qx "$OUTDIR" "$EXCL" 2>/dev/null || echo "$OUTDIR" >>"$EXCL"
du -sh "$OUTDIR"
