#!/usr/bin/env bash
# Simulator scale benchmark: runs configs/scale/*.conf (or the given ones)
# one controller at a time, with experiment 0 (1024 -> 1 incast) from the
# same binary as the baseline, and prints wall time, peak memory and
# events/s with the ratio to the baseline's events/s.
# Each config states its targets in comment lines the script reads:
# `# scale_target_s = 5` (wall time, setup included) and
# `# scale_target_mb = 500` (peak resident memory).
# Usage: tools/sim_scale.sh [build-dir] [config ...]
set -u
BUILD=${1:-build}
shift || true
SIM="$BUILD/bin/ccsim"
[ -x "$SIM" ] || { echo "sim_scale: $SIM not built (run make first)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "sim_scale: needs /usr/bin/time (Debian: time)" >&2; exit 2; }
CONFIGS=("$@")
[ ${#CONFIGS[@]} -eq 0 ] && CONFIGS=(configs/scale/*.conf)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
base_eps=""

# run NAME CONF CC: prints one row; sets eps, wall_s, rss_mb.
run() {
  /usr/bin/time -f "TIME %e %M" "$SIM" --quiet --config="$2" --cc="$3" \
    >"$log" 2>&1
  local rc=$?
  wall_s=$(awk '/^TIME/ {print $2}' "$log")
  rss_mb=$(awk '/^TIME/ {printf "%.0f", $3 / 1024}' "$log")
  eps=$(awk '$1 == "==" {for (i = 1; i < NF; i++) if ($(i + 1) ~ /events\/s/) {gsub(/[(M]/, "", $i); print $i}}' "$log")
  local flows
  flows=$(awk '$1 == "==" {print $3}' "$log")
  local ratio="1.00"
  [ -n "$base_eps" ] && [ -n "$eps" ] && ratio=$(awk -v a="$eps" -v b="$base_eps" 'BEGIN {printf "%.2f", a / b}')
  printf "%-28s %-7s %7s flows %8s s %7s MB %7sM ev/s  x%s  %s\n" "$1" "$3" \
    "$flows" "$wall_s" "$rss_mb" "$eps" "$ratio" "$(grep -E '^(PASS|FAIL)' "$log" | cut -c1-60)"
  [ $rc -le 1 ] || { echo "   ccsim exited $rc: $(grep -m1 ccsim: "$log")"; status=1; }
}

echo "ccsim scale ($(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%F))"
run "baseline 0_scale_incast1024" configs/experiments/0_scale_incast1024.conf swift
base_eps=$eps
for conf in "${CONFIGS[@]}"; do
  name=$(basename "$conf" .conf)
  ccs=$(awk -F= '$1 ~ /^cc *$/ {gsub(/ /, "", $2); print $2}' "$conf")
  for cc in ${ccs//,/ }; do
    run "$name" "$conf" "$cc"
    limit_s=$(awk '$2 == "scale_target_s" {print $4}' "$conf")
    limit_mb=$(awk '$2 == "scale_target_mb" {print $4}' "$conf")
    if { [ -n "$limit_s" ] && awk -v w="$wall_s" -v l="$limit_s" 'BEGIN {exit !(w >= l)}'; } ||
      { [ -n "$limit_mb" ] && [ "$rss_mb" -ge "$limit_mb" ]; }; then
      echo "   over target: ${limit_s:-any} s, ${limit_mb:-any} MB"
      status=1
    fi
  done
done
exit $status
