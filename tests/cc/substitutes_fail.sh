#!/usr/bin/env bash
# Every experiment's targets must catch a controller that is not doing its
# job: for each substitute (ccsim --substitute: it runs in place of every
# listed controller, under their names) each experiment must exit 1.
# Usage: CCSIM "SUBSTITUTE[;SUBSTITUTE...]" CONF...
set -u
ccsim=$1
IFS=';' read -r -a subs <<<"$2"
shift 2
bad=0
out=$(mktemp)
for sub in "${subs[@]}"; do
  for conf in "$@"; do
    name=$(basename "$conf" .conf)
    "$ccsim" --quiet --substitute="$sub" --config="$conf" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 1 ]; then
      echo "ok: $name fails with '$sub': $(tail -1 "$out")"
    else
      echo "NOT CAUGHT: $name exits $rc with '$sub': $(tail -1 "$out")"
      bad=1
    fi
  done
done
rm -f "$out"
exit $bad
