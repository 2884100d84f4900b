#!/usr/bin/env bash
# Each deliberately broken Swift, run in place of the experiments' Swift
# (ccsim --substitute, on top of the paper's absolute target,
# target_from_min_delay=0), must fail a Swift check of the experiment named
# for it, which the unbroken setting passes: the suite catches what each
# parameter is for. (Under --substitute, known_miss marks do not apply.)
# Usage: broken_swift_caught.sh CCSIM CONFDIR
set -u
ccsim=$1
dir=$2
base="swift:target_from_min_delay=0"
# variant (added to the base) | experiment | what it measured (2026-11-28)
cases=(
  "ai=20|3_long_short|average queue 364 KB against a 200 KB bound"
  "ai=20|7_websearch|largest queue over 650 KB at the 95% CI over ten seeds"
  "beta=0.01,max_mdf=0.01|2_staircase|Jain's index under 0.99"
  "beta=0.01,max_mdf=0.01|3_long_short|average queue over 200 KB"
  "max_mdf=0.99,beta=1|0_scale_incast1024|completion 18x the ideal"
  "fs_range_us=0|2_staircase|Jain's index under 0.99"
  "base_target_us=100|5_permutation|max queue over 320 KB"
)
out=$(mktemp)
bad=0
swift_fails() {  # swift_fails SUBSTITUTE CONF: its Swift checks that FAIL
  "$ccsim" --quiet --substitute="$1" --config="$2" >"$out" 2>&1
  grep -c '^check swift.* FAIL$' "$out"
}
for c in "${cases[@]}"; do
  IFS='|' read -r variant exp why <<<"$c"
  conf="$dir/$exp.conf"
  control=$(swift_fails "$base" "$conf")
  broken=$(swift_fails "$base,$variant" "$conf")
  if [ "$control" -eq 0 ] && [ "$broken" -gt 0 ]; then
    echo "ok: $exp catches $variant ($why): $broken Swift check(s) fail"
  else
    echo "NOT CAUGHT: $exp with $variant ($why): $broken Swift check(s)" \
      "fail, $control without it"
    bad=1
  fi
done
rm -f "$out"
exit $bad
