#!/usr/bin/env bash
# `make experiments`: runs every configs/experiments/*.conf and the
# validations against published results (configs/validation/*.conf) on ccsim, writes
# CSVs, PNG plots and a markdown report to $BUILD/experiments/.
# Usage: tools/run_experiments.sh [build-dir] [config ...]
# Exit status: 0 when every experiment passes its targets, 1 otherwise.
set -u
BUILD=${1:-build}
shift || true
CONFIGS=("$@")
[ ${#CONFIGS[@]} -eq 0 ] && CONFIGS=(configs/experiments/*.conf configs/validation/*.conf)
SIM="$BUILD/bin/ccsim"
OUT="$BUILD/experiments"
if [ ! -x "$SIM" ]; then
  echo "run_experiments: $SIM not built (run make first)" >&2
  exit 2
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.csv "$OUT"/*.png "$OUT"/*.log
status=0
for cfg in "${CONFIGS[@]}"; do
  name=$(basename "$cfg" .conf)
  echo "== $name ($cfg)"
  start=$(date +%s%N)
  if "$SIM" --config="$cfg" --out="$OUT" --quiet > "$OUT/$name.log" 2>&1; then
    :
  else
    rc=$?
    [ $rc -ne 1 ] && echo "   ccsim exited $rc" >&2
    status=1
  fi
  end=$(date +%s%N)
  echo "   $(tail -1 "$OUT/$name.log") ($(( (end - start) / 1000000 )) ms)"
done
# Debian's python3-matplotlib lives in the system interpreter.
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if "$PY" -c 'import matplotlib' 2>/dev/null; then
  "$PY" tools/plot_experiments.py "$OUT" "${CONFIGS[@]}" || status=1
else
  echo "run_experiments: python3-matplotlib missing: no plots/report" >&2
  status=1
fi
# The engine against the simulator through the netns testbed (root only;
# skipped otherwise, and said so in the report).
if [ -f "$OUT/REPORT.md" ] && [ "${UCCL_CROSSCHECK:-1}" != 0 ]; then
  echo "== engine vs simulator (tools/sim_crosscheck.py)"
  rm -rf "$OUT/crosscheck"
  "$PY" tools/sim_crosscheck.py --build="$BUILD" --out="$OUT/crosscheck" \
    >"$OUT/crosscheck.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  {
    echo
    echo "## Engine vs simulator: $([ $rc -eq 0 ] && echo agree || echo "DISAGREE or failed (exit $rc)")"
    echo
    echo "transport_test through the netns testbed's tc bottleneck against ccsim"
    echo "on the same setup (tools/sim_crosscheck.py; logs in crosscheck/)."
    echo
    if [ -f "$OUT/crosscheck/CROSSCHECK.md" ]; then
      cat "$OUT/crosscheck/CROSSCHECK.md"
    else
      tail -3 "$OUT/crosscheck.log"
    fi
  } >>"$OUT/REPORT.md"
  rows=$(grep -cE '^\| [a-z_]+ \| ([0-9]|run failed)' "$OUT/crosscheck/CROSSCHECK.md" 2>/dev/null)
  echo "   ${rows:-0} controller(s) compared, $(grep -c '| agree' \
    "$OUT/crosscheck/CROSSCHECK.md" 2>/dev/null || true) agree (exit $rc)"
fi
echo "report: $OUT/REPORT.md"
exit $status
