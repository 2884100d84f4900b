#!/usr/bin/env bash
# transport_test benchmarks with their same-run baselines: loopback tpt vs raw
# TCP/UDP sockets, lat vs UDP ping-pong, and (as root) tpt per CC through the
# netns testbed's 1 and 10 Gb/s bottlenecks vs TCP through the same link.
#
#   tools/bench_transport.sh [build-dir] [--quick] [--no-netns]
#
# Prints markdown tables (the format of BENCHMARKS.md). --quick: 2 s runs.
set -uo pipefail

BUILD=build
QUICK=0
NETNS=1
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --no-netns) NETNS=0 ;;
    -*) echo "bench_transport: unknown flag $a" >&2; exit 2 ;;
    *) BUILD=$a ;;
  esac
done
BIN="$BUILD/bin"
TT="$BIN/transport_test"
SB="$BIN/socket_bench"
for b in "$TT" "$SB"; do
  [ -x "$b" ] || { echo "bench_transport: $b not built (make)" >&2; exit 2; }
done
DUR=5
[ "$QUICK" = 1 ] && DUR=2
TMP=$(mktemp -d -t uccl-bench.XXXXXX)
TB=tools/testbed/netns.sh
NAME=ucclbench
cleanup() {
  [ "$NETNS" = 1 ] && [ "$(id -u)" = 0 ] && $TB down --name=$NAME >/dev/null 2>&1
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# json <file> <role> <key>: a number from the last JSON line of that role.
json() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
val = "nan"
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    if line.startswith("{") and '"role":"%s"' % sys.argv[2] in line:
        d = json.loads(line)
        for k in sys.argv[3].split("."):
            d = d[k]
        val = d
print(val)
EOF
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "# transport_test benchmarks ($(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r))"
echo
echo "## Loopback, two processes (software NIC), ${DUR} s runs"
echo
"$SB" --proto=tcp --streams=4 --duration_s=$DUR --json >"$TMP/tcp" 2>&1
"$SB" --proto=udp --streams=4 --duration_s=$DUR --json >"$TMP/udp" 2>&1
tools/transport_pair.sh "$BUILD" --flagfile=configs/transport_test/loopback_tpt.flags \
  --duration_s=$DUR --json >"$TMP/tpt" 2>&1 || echo "(transport_test tpt failed: $TMP/tpt)"
tcp=$(json "$TMP/tcp" server rx_gbps)
udp=$(json "$TMP/udp" server rx_gbps)
uc=$(json "$TMP/tpt" server rx_gbps)
echo "| tpt, 4 flows x 2 x 1 MB | Gb/s | ratio |"
echo "|---|---:|---:|"
printf "| raw TCP, 4 streams (kernel, reliable) | %.2f | |\n" "$tcp"
printf "| raw UDP, 4 streams (received, lossy, no checks) | %.2f | |\n" "$udp"
printf "| UCCL transport_test tpt (UC, 4 paths, cc none) | %.2f | %s of TCP, %s of UDP |\n" \
  "$uc" "$(ratio "$uc" "$tcp")" "$(ratio "$uc" "$udp")"
echo
"$SB" --lat --iterations=20000 --json >"$TMP/udplat" 2>&1
tools/transport_pair.sh "$BUILD" --flagfile=configs/transport_test/loopback_lat.flags \
  --json >"$TMP/lat" 2>&1 || echo "(transport_test lat failed: $TMP/lat)"
echo "| lat, 64 B, one in flight | p50 us | p99 us | p50 ratio |"
echo "|---|---:|---:|---:|"
up50=$(json "$TMP/udplat" lat lat_us.p50)
up99=$(json "$TMP/udplat" lat lat_us.p99)
lp50=$(json "$TMP/lat" client lat_us.p50)
lp99=$(json "$TMP/lat" client lat_us.p99)
printf "| UDP ping-pong (blocking sockets) | %.1f | %.1f | |\n" "$up50" "$up99"
printf "| UCCL transport_test lat | %.1f | %.1f | %sx |\n" "$lp50" "$lp99" \
  "$(ratio "$lp50" "$up50")"
echo

if [ "$NETNS" = 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "(netns part skipped: needs root)"
  exit 0
fi

# One tpt run through the testbed; samples the bottleneck queue every 50 ms.
# Prints: rx_gbps avg_queue_bytes max_queue_bytes drops retx
netns_run() {  # <rate_gbps> <out> <transport_test flags...>
  local gbps=$1 out=$2
  shift 2
  $TB exec --name=$NAME b "$TT" --server --device=udp:10.199.0.2 --json "$@" \
    >"$out.s" 2>&1 &
  local spid=$!
  for _ in $(seq 100); do grep -q "listening" "$out.s" && break; sleep 0.05; done
  (
    while kill -0 $spid 2>/dev/null; do
      $TB qdisc --name=$NAME a | awk '/backlog/ { sub("b", "", $2); print $2 }'
      sleep 0.05
    done
  ) >"$out.q" &
  local qpid=$!
  timeout $((DUR * 4 + 60)) $TB exec --name=$NAME a "$TT" --serverip=10.199.0.2 \
    --device=udp:10.199.0.1 --json "$@" >"$out.c" 2>&1
  wait $spid
  kill $qpid 2>/dev/null
  wait $qpid 2>/dev/null
  $TB qdisc --name=$NAME a >"$out.qd"
}

for rate in 1 10; do
  flags=configs/transport_test/netns_${rate}g.flags
  echo "## netns testbed, ${rate} Gb/s bottleneck (tbf, 512 KiB drop-tail queue, MTU 9000), ${DUR} s runs"
  echo
  $TB up --name=$NAME --rate=${rate}gbit --queue_kb=512 >/dev/null
  $TB exec --name=$NAME b "$SB" --server --proto=tcp --port=19990 --json \
    >"$TMP/ns_tcp.s" 2>&1 &
  spid=$!
  sleep 0.3
  $TB exec --name=$NAME a "$SB" --serverip=10.199.0.2 --proto=tcp --port=19990 \
    --duration_s=$DUR >/dev/null 2>&1
  wait $spid
  tcp=$(json "$TMP/ns_tcp.s" server rx_gbps)
  echo "| sender | Gb/s | utilization | vs TCP | avg queue | max queue | qdisc drops | retransmits | Jain |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  printf "| kernel TCP (cubic), 4 streams | %.3f | %.0f%% | | | | | | |\n" "$tcp" \
    "$(awk -v a="$tcp" -v r=$rate 'BEGIN { print 100 * a / r }')"
  for cc in none timely timely_patched swift credit; do
    $TB up --name=$NAME --rate=${rate}gbit --queue_kb=512 >/dev/null
    netns_run $rate "$TMP/ns_$cc" --flagfile=$flags --duration_s=$DUR --cc=$cc
    g=$(json "$TMP/ns_$cc.s" server rx_gbps)
    errs=$(json "$TMP/ns_$cc.c" client errors)
    retx=$(python3 -c "
import json
for l in open('$TMP/ns_$cc.c', errors='replace'):
    if l.startswith('{') and '\"role\":\"client\"' in l:
        d = json.loads(l); print(d['retx_fast'] + d['retx_rto'] + d.get('retx_tlp', 0))" 2>/dev/null)
    jain=$(awk '/Jain/ { print $NF }' "$TMP/ns_$cc.c" | tail -1)
    drops=$(awk '/dropped/ { gsub(",", "", $7); print $7 }' "$TMP/ns_$cc.qd" | head -1)
    read -r qavg qmax < <(awk 'NF { n++; s += $1; if ($1 > m) m = $1 } END { if (n) printf "%.0f %.0f", s / n, m; else print "0 0" }' "$TMP/ns_$cc.q")
    qd() { awk -v b="$1" -v r=$rate 'BEGIN { printf "%.0f us", b * 8 / (r * 1e3) }'; }
    printf "| UCCL cc=%s | %.3f | %.0f%% | %s | %s (%s) | %s (%s) | %s | %s | %s |\n" \
      "$cc" "$g" "$(awk -v a="$g" -v r=$rate 'BEGIN { print 100 * a / r }')" \
      "$(ratio "$g" "$tcp")" "$(qd "$qavg")" "${qavg}B" "$(qd "$qmax")" "${qmax}B" \
      "${drops:-?}" "${retx:-?}" "${jain:-?}"
    [ "$errs" = "0" ] || echo "  (integrity errors or failure: see $TMP/ns_$cc.c)"
  done
  echo
done
$TB down --name=$NAME >/dev/null
