#!/usr/bin/env bash
# transport_test between the two namespaces of a testbed (netns.sh), each
# setting (environment variables) in turn, against raw UDP and TCP
# (socket_bench) in the same rounds: what the software NIC's datagram path
# carries, without NCCL. Needs root and iproute2 (on the GPU machine,
# gpu_netroot/ carried). RATE=none: no bottleneck. PERFTYPE=bi: both ways
# at once (each direction's figure; NCCL's collectives load both), RAW=0:
# no raw sockets.
# Usage: [RATE=100gbit] [QUEUE_KB=1024] [MTU=9000] [ROUNDS=2] [ENGINES=4]
#   [BURST_KB=auto] [NFLOW=ENGINES] [PERFTYPE=tpt|bi] [RAW=1|0]
#   [SETTINGS="name=ENV=V:ENV=V ..."] tools/testbed/transport_ab.sh [build-dir]
set -u
B=${1:-build}/bin
[ -f gpu_netroot/env.sh ] && source gpu_netroot/env.sh
TB=tools/testbed/netns.sh
N=${ENGINES:-4}
rate=(--rate="${RATE:-100gbit}" --queue_kb="${QUEUE_KB:-1024}" --burst_kb="${BURST_KB:-auto}")
[ "${RATE:-}" = none ] && rate=()
$TB up --name=st "${rate[@]}" --mtu="${MTU:-9000}" || exit 1
trap '$TB down --name=st >/dev/null' EXIT
for round in $(seq "${ROUNDS:-2}"); do
  for proto in $([ "${RAW:-1}" = 1 ] && echo udp tcp); do
    ip netns exec st-b timeout 30 "$B/socket_bench" --server --proto=$proto --streams="$N" >/tmp/st_sb.txt 2>&1 &
    sleep 0.5
    ip netns exec st-a timeout 30 "$B/socket_bench" --serverip=10.199.0.2 --proto=$proto --streams="$N" --duration_s=3 $([ $proto = udp ] && echo --msize=$((${MTU:-9000} - 28))) >/tmp/st_sc.txt 2>&1
    wait
    echo "round $round raw $proto: sent $(grep -ioE '[0-9.]+ gb/s' /tmp/st_sc.txt | tail -1), received $(grep -ioE '[0-9.]+ gb/s' /tmp/st_sb.txt | tail -1)"
  done
  for s in ${SETTINGS:-"default=UCCL_SOFTNIC_GSO=1" "no-offload=UCCL_SOFTNIC_GSO=0:UCCL_SOFTNIC_GRO=0"}; do
    name=${s%%=*}; envs=$(echo "${s#*=}" | tr ':' ' ')
    ip netns exec st-b env $envs timeout 60 "$B/transport_test" --server --oobport=0 --device=udp:10.199.0.2 --engines="$N" >/tmp/st_srv.txt 2>&1 &
    sp=$! port=""
    for _ in $(seq 100); do port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' /tmp/st_srv.txt | head -1); [ -n "$port" ] && break; sleep 0.1; done
    ip netns exec st-a env $envs timeout 60 "$B/transport_test" --serverip=10.199.0.2 --device=udp:10.199.0.1 --oobport="$port" --engines="$N" --nflow="${NFLOW:-$N}" --perftype="${PERFTYPE:-tpt}" --duration_s=3 >/tmp/st_cli.txt 2>&1
    wait "$sp"
    got=$(grep -E '^  sent ' /tmp/st_cli.txt | awk '{print $4}')
    [ "${PERFTYPE:-tpt}" = bi ] && got="sent $got, received $(grep -E '^  received ' /tmp/st_cli.txt | awk '{print $4}')"
    echo "round $round uccl $name: $got Gb/s; $(grep -E 'retransmits' /tmp/st_cli.txt | head -1 | sed 's/^ *//'); queue drops (all so far) a $($TB qdrops --name=st a), b $($TB qdrops --name=st b)"
  done
done
