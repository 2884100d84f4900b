#!/usr/bin/env bash
# Runs libFuzzer targets one after another and prints a line per target
# (executions, coverage, corpus, findings). Usage:
#   tools/run_fuzzers.sh BUILD_DIR [libFuzzer flags...] -- TARGET...
# Each target starts from its corpus in BUILD_DIR/fuzz-corpus/<target> (kept
# between runs) plus tests/fuzz/corpus/<target> when present. A crash, leak
# or sanitizer report fails the run; the reproducer is in BUILD_DIR.
set -uo pipefail
BUILD=$1
shift
FLAGS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do FLAGS+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "run_fuzzers: no targets" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
fail=0
for t in "$@"; do
  bin="$BUILD/bin/$t"
  [ -x "$bin" ] || { echo "run_fuzzers: $bin not built" >&2; exit 2; }
  corpus="$BUILD/fuzz-corpus/$t"
  mkdir -p "$corpus"
  seeds=()
  [ -d "$SRC/tests/fuzz/corpus/$t" ] && seeds=("$SRC/tests/fuzz/corpus/$t")
  log="$BUILD/fuzz-$t.log"
  start=$(date +%s)
  (cd "$BUILD" && "bin/$t" "${FLAGS[@]}" -print_final_stats=1 \
      "fuzz-corpus/$t" "${seeds[@]}") >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "fuzz $t: ${runs:-?} executions in ${secs} s, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l) inputs, no findings"
  else
    fail=1
    echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} executions; log: $log"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5
  fi
done
exit $fail
