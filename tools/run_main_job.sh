#!/usr/bin/env bash
# The README's main job: a transport_test server and client over the software
# NIC on loopback, printing throughput. Usage: tools/run_main_job.sh [build-dir]
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
if [ -x "$BIN/transport_test" ]; then
  exec tools/transport_pair.sh "$BUILD" --perftype=tpt --duration_s=5
elif [ -x "$BIN/nic_bench" ]; then
  echo "transport_test not built yet; running the NIC-level benchmark instead"
  exec "$BIN/nic_bench"
else
  echo "No end-to-end program is built yet (see README.md)."
  exit 1
fi
