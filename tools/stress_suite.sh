#!/usr/bin/env bash
# Runs the whole test suite N times in a row while busy loops compete for
# every CPU (a loaded CI machine), stopping at the first failing round.
# Usage: tools/stress_suite.sh [build-dir] [rounds] [busy-loops]
# Defaults: build, 10 rounds, one busy loop per CPU. Exit 0 when every
# round passed; the failing round's log is kept in <build>/stress-<n>.log.
set -u
BUILD=${1:-build}
ROUNDS=${2:-10}
LOOPS=${3:-$(nproc)}
if [ ! -f "$BUILD/CTestTestfile.cmake" ]; then
  echo "stress_suite: $BUILD is not a build directory (run make first)" >&2
  exit 2
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT
# Each loop ends by itself after 6 hours at the latest.
for _ in $(seq "$LOOPS"); do
  timeout 21600 sh -c 'while :; do :; done' &
  pids+=($!)
done
echo "stress_suite: $ROUNDS rounds of the suite beside $LOOPS busy loops"
for r in $(seq "$ROUNDS"); do
  start=$(date +%s)
  log="$BUILD/stress-$r.log"
  if (cd "$BUILD" && ctest -j"$(nproc)" --timeout 600) >"$log" 2>&1; then
    echo "round $r/$ROUNDS: $(grep -o '[0-9]*% tests passed.*' "$log" | head -1) in $(($(date +%s) - start)) s"
    rm -f "$log"
  else
    echo "round $r/$ROUNDS FAILED after $(($(date +%s) - start)) s; failures:"
    grep -A20 "The following tests FAILED" "$log" | tail -n +2
    echo "log: $log"
    exit 1
  fi
done
echo "stress_suite: $ROUNDS of $ROUNDS rounds passed"
