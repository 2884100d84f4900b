#!/usr/bin/env bash
# Two-host testbed on one machine: network namespaces <name>-a and <name>-b
# joined by a veth pair, with an optional tc bottleneck (rate, queue, delay).
#
#   tools/testbed/netns.sh up [--name=uccl] [--rate=10gbit] [--queue_kb=256]
#                             [--delay_us=0] [--mtu=9000] [--loss=0.01]
#                             [--burst_kb=auto] [--reorder]
#   tools/testbed/netns.sh exec a|b <command...>   run inside a namespace
#   tools/testbed/netns.sh ip a|b                  print that side's address
#   tools/testbed/netns.sh qdisc a|b               tc -s qdisc of that side
#   tools/testbed/netns.sh drops a|b               arrivals --loss dropped there
#   tools/testbed/netns.sh qdrops a|b              packets the bottleneck's
#                                                  queue dropped leaving there
#   tools/testbed/netns.sh down [--name=uccl]      remove everything
#
# Side a is 10.199.0.1, side b 10.199.0.2 (/24). The bottleneck applies to
# each side's egress: netem (delay, if any) feeding a tbf with the given rate
# and a byte-limited queue (drop-tail); --loss drops that fraction of the
# packets arriving at each side at random (iptables' statistic match on
# INPUT: kernels here lack netem's loss, and a drop on OUTPUT would fail
# the sender's send instead of losing the packet on the way).
#
# Each flow stays in order, as through a real NIC (RSS) and switch: RPS on
# both veth ends, over every CPU. Without it a veth reorders a flow under
# load: a qdisc hands packets to the peer from whichever CPU runs it (the
# sender's, or the tbf timer's), each CPU's backlog is drained on its own,
# and a datagram can overtake an earlier one of its flow. RPS queues a flow
# to one CPU by its hash; that CPU does the receive work, as under a real
# NIC's RSS (and on a host of 2 CPUs takes it from whatever runs there).
# --reorder leaves the kernel's default (no RPS), e.g. to study a
# transport under reordering. Each side also knows the other's MAC from
# the start (a permanent neighbour entry): while ARP resolves, the kernel
# holds a flow's first datagrams in a short queue (and drops those beyond
# it) and can send a later one before them.
#
# `up` replaces a testbed of the same name. Needs root and iproute2 (ip
# netns, tc), and iptables for --loss: exit 2 without root, 3 without the
# commands. Traffic never leaves the two namespaces.
set -euo pipefail

cmd=${1:-}
[ $# -gt 0 ] && shift
name=${UCCL_TESTBED:-uccl}
rate=""
queue_kb=256
delay_us=0
mtu=9000
loss=""
reorder=0
burst_kb=auto
side=""
while [ $# -gt 0 ]; do
  case "$1" in
    --name=*) name=${1#--name=} ;;
    --rate=*) rate=${1#--rate=} ;;
    --queue_kb=*) queue_kb=${1#--queue_kb=} ;;
    --delay_us=*) delay_us=${1#--delay_us=} ;;
    --mtu=*) mtu=${1#--mtu=} ;;
    --loss=*) loss=${1#--loss=} ;;
    --reorder) reorder=1 ;;
    --burst_kb=*) burst_kb=${1#--burst_kb=} ;;
    a | b)
      if [ -z "$side" ]; then side=$1; shift; break; fi ;;
    *) echo "netns.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done

ns_a="$name-a"
ns_b="$name-b"
if_a="$name-va"
if_b="$name-vb"
ip_a=10.199.0.1
ip_b=10.199.0.2

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "netns.sh: needs root (ip netns, tc)" >&2
    exit 2
  fi
  local t
  for t in ip tc; do
    if ! command -v "$t" >/dev/null; then
      echo "netns.sh: '$t' not found (install iproute2)" >&2
      exit 3
    fi
  done
}

# iptables that works here: the legacy backend, else nft, else plain.
iptables_cmd() {
  local t
  for t in iptables-legacy iptables-nft iptables; do
    command -v "$t" >/dev/null && { echo "$t"; return 0; }
  done
  return 1
}

# --loss: random drops of what arrives at each side (iptables statistic).
lossy() {  # lossy <ns> <ifname>
  local ns=$1 dev=$2 ipt
  [ -z "$loss" ] && return 0
  [ "$loss" = "0" ] && return 0
  if ! ipt=$(iptables_cmd); then
    echo "netns.sh: --loss needs iptables" >&2
    down
    exit 3
  fi
  if ! ip netns exec "$ns" "$ipt" -A INPUT -i "$dev" -m statistic \
    --mode random --probability "$loss" -j DROP; then
    echo "netns.sh: --loss=$loss: iptables refused the statistic rule" >&2
    down
    exit 1
  fi
}

# The RPS mask of every CPU: 32-bit hex groups, highest first, comma-separated
# (the format of /sys/class/net/*/queues/rx-*/rps_cpus).
all_cpus_mask() {
  local n groups="" take g
  n=$(nproc --all)
  while [ "$n" -gt 0 ]; do
    take=$((n > 32 ? 32 : n))
    g=$(printf '%x' $(((1 << take) - 1)))
    groups="$g${groups:+,$groups}"
    n=$((n - take))
  done
  echo "$groups"
}

# Keep each flow in order (see above): RPS on every receive queue of <dev>.
# Prints "kept", or why not (a kernel without RPS).
keep_order() {  # keep_order <ns> <ifname>
  local ns=$1 dev=$2 q qs mask
  mask=$(all_cpus_mask)
  qs=$(ip netns exec "$ns" sh -c "ls -d /sys/class/net/$dev/queues/rx-*" \
    2>/dev/null) || true
  if [ -z "$qs" ]; then
    echo "not kept (no receive queues in sysfs: a flow may be reordered)"
    return 0
  fi
  for q in $qs; do
    if ! ip netns exec "$ns" sh -c "echo $mask > $q/rps_cpus" 2>/dev/null; then
      echo "not kept (no RPS: a flow may be reordered)"
      return 0
    fi
  done
  echo "kept"
}

# --rate in bits/s ("25gbit", "2.5gbit", "500mbit", "100kbit", "1000bit").
rate_bps() {
  local r=${rate,,} n unit mult
  n=${r%%[a-z]*}
  unit=${r#"$n"}
  case "$unit" in
    gbit) mult=1000000000 ;;
    mbit) mult=1000000 ;;
    kbit) mult=1000 ;;
    bit | "") mult=1 ;;
    *) mult="" ;;
  esac
  if [ -z "$mult" ] || ! [[ "$n" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    echo "netns.sh: --rate=$rate: give a number and gbit, mbit, kbit or bit" >&2
    return 1
  fi
  awk -v n="$n" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

# The tbf's bucket: --burst_kb, or by default what the rate sends in 50 us,
# at least two MTU-sized packets. tbf sends no more than the bucket holds
# and then sleeps on a timer until enough tokens are back; a bucket of two
# packets at 25 Gb/s (6 us) leaves it asleep for much of each timer's
# slack, and the link carries ~0.8 of its rate to anyone (raw UDP too).
burst_bytes() {
  local floor=$((mtu * 2 + 1600)) bps b
  if [ "$burst_kb" != auto ]; then
    echo $((burst_kb * 1024))
    return 0
  fi
  bps=$(rate_bps) || return 1
  b=$((bps / 8 / 20000))  # 50 us
  echo $((b > floor ? b : floor))
}

down() {
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  ip link del "$if_a" 2>/dev/null || true
}

shape() {  # shape <ns> <ifname>
  local ns=$1 dev=$2
  [ -z "$rate" ] && return 0
  local parent="root"
  if [ "$delay_us" != "0" ]; then
    if ! ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem \
      delay "${delay_us}us" limit 100000; then
      echo "netns.sh: --delay_us needs the netem qdisc (sch_netem), which" \
        "this kernel lacks" >&2
      down
      exit 1
    fi
    parent="parent 1:1"
  fi
  # The queue is drop-tail in bytes.
  # shellcheck disable=SC2086
  ip netns exec "$ns" tc qdisc add dev "$dev" $parent handle 10: tbf \
    rate "$rate" burst "$(burst_bytes)" limit $((queue_kb * 1024))
}

case "$cmd" in
  up)
    need_root
    if [ -n "$rate" ]; then rate_bps >/dev/null || exit 2; fi
    if [ "$burst_kb" != auto ] && ! [[ "$burst_kb" =~ ^[1-9][0-9]*$ ]]; then
      echo "netns.sh: --burst_kb=$burst_kb: give a positive number of KiB or auto" >&2
      exit 2
    fi
    down
    ip netns add "$ns_a"
    ip netns add "$ns_b"
    ip link add "$if_a" type veth peer name "$if_b"
    ip link set "$if_a" netns "$ns_a"
    ip link set "$if_b" netns "$ns_b"
    ip -n "$ns_a" addr add "$ip_a/24" dev "$if_a"
    ip -n "$ns_b" addr add "$ip_b/24" dev "$if_b"
    for pair in "$ns_a:$if_a" "$ns_b:$if_b"; do
      ns=${pair%%:*}
      dev=${pair#*:}
      ip -n "$ns" link set "$dev" mtu "$mtu"
      ip -n "$ns" link set "$dev" up
      ip -n "$ns" link set lo up
      shape "$ns" "$dev"
      lossy "$ns" "$dev"
      if [ "$reorder" = 1 ]; then
        order="not kept (--reorder)"
      else
        order=$(keep_order "$ns" "$dev")
      fi
    done
    mac_a=$(ip netns exec "$ns_a" cat "/sys/class/net/$if_a/address")
    mac_b=$(ip netns exec "$ns_b" cat "/sys/class/net/$if_b/address")
    ip -n "$ns_a" neigh replace "$ip_b" lladdr "$mac_b" dev "$if_a" nud permanent
    ip -n "$ns_b" neigh replace "$ip_a" lladdr "$mac_a" dev "$if_b" nud permanent
    # Both ends up (carrier) and a route between them.
    for _ in $(seq 1 50); do
      ip -n "$ns_a" link show "$if_a" | grep -q LOWER_UP &&
        ip -n "$ns_b" link show "$if_b" | grep -q LOWER_UP && break
      sleep 0.1
    done
    if ! ip -n "$ns_a" link show "$if_a" | grep -q LOWER_UP ||
      ! ip -n "$ns_a" route get "$ip_b" >/dev/null 2>&1; then
      echo "netns.sh: the veth pair did not come up" >&2
      down
      exit 1
    fi
    echo "testbed $name up: $ns_a ($ip_a, $if_a) <-> $ns_b ($ip_b, $if_b)," \
      "mtu $mtu, bottleneck ${rate:-none}${rate:+ queue ${queue_kb} KiB}" \
      "delay ${delay_us} us, loss ${loss:-0}, flow order $order"
    ;;
  down)
    need_root
    down
    echo "testbed $name down"
    ;;
  exec)
    need_root
    case "$side" in
      a) exec ip netns exec "$ns_a" "$@" ;;
      b) exec ip netns exec "$ns_b" "$@" ;;
      *) echo "netns.sh exec: give a or b" >&2; exit 2 ;;
    esac
    ;;
  ip)
    case "$side" in
      a) echo "$ip_a" ;;
      b) echo "$ip_b" ;;
      *) echo "netns.sh ip: give a or b" >&2; exit 2 ;;
    esac
    ;;
  qdisc)
    need_root
    case "$side" in
      a) ip netns exec "$ns_a" tc -s qdisc show dev "$if_a" ;;
      b) ip netns exec "$ns_b" tc -s qdisc show dev "$if_b" ;;
      *) echo "netns.sh qdisc: give a or b" >&2; exit 2 ;;
    esac
    ;;
  drops)
    need_root
    ipt=$(iptables_cmd) || { echo 0; exit 0; }
    case "$side" in
      a) n=$ns_a d=$if_a ;;
      b) n=$ns_b d=$if_b ;;
      *) echo "netns.sh drops: give a or b" >&2; exit 2 ;;
    esac
    ip netns exec "$n" "$ipt" -L INPUT -v -n -x 2>/dev/null |
      awk -v d="$d" '$3 == "DROP" && $6 == d { s += $1 } END { print s + 0 }'
    ;;
  qdrops)
    need_root
    case "$side" in
      a) n=$ns_a d=$if_a ;;
      b) n=$ns_b d=$if_b ;;
      *) echo "netns.sh qdrops: give a or b" >&2; exit 2 ;;
    esac
    # tc -s prints "Sent B bytes P pkt (dropped D, overlimits O ...)" per
    # qdisc; the tbf (handle 10:) is the bottleneck's queue.
    ip netns exec "$n" tc -s qdisc show dev "$d" 2>/dev/null |
      awk '/qdisc tbf/ { t = 1; next } /^qdisc/ { t = 0 }
           t && /dropped/ { gsub(",", ""); for (i = 1; i < NF; ++i)
             if ($i == "(dropped") s += $(i + 1) }
           END { print s + 0 }'
    ;;
  *)
    sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = "help" ] || [ "$cmd" = "--help" ] || exit 2
    ;;
esac
