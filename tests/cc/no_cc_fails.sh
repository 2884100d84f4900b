#!/usr/bin/env bash
# Every experiment's targets must catch a run without congestion control:
# ccsim --substitute=none runs no control under each listed controller's
# name, and each experiment must then exit 1 (FAIL). Usage: CCSIM CONF...
set -u
ccsim=$1
shift
bad=0
for conf in "$@"; do
  name=$(basename "$conf" .conf)
  "$ccsim" --quiet --substitute=none --config="$conf" >/tmp/no_cc_$$.txt 2>&1
  rc=$?
  if [ "$rc" -eq 1 ]; then
    echo "ok: $name fails without congestion control: $(tail -1 /tmp/no_cc_$$.txt)"
  else
    echo "NOT CAUGHT: $name exits $rc without congestion control: $(tail -1 /tmp/no_cc_$$.txt)"
    bad=1
  fi
done
rm -f /tmp/no_cc_$$.txt
exit $bad
