#!/usr/bin/env bash
# Packs iproute2 (ip, tc) and iptables from Debian's packages, unpacked with
# dpkg -x, into gpu_netroot/ for the GPU machine (which has neither); name it
# in the device tool's `carry`. There: source gpu_netroot/env.sh.
set -euo pipefail
OUTDIR=${1:-gpu_netroot}
PKGS="iproute2 iptables libxtables12 libip4tc2 libip6tc2 libnftnl11 libmnl0
  libbpf1 libelf1 libcap2 libbsd0 libmd0 libnetfilter-conntrack3
  libnfnetlink0 zlib1g"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download $PKGS >/dev/null 2>&1) ||
  { echo "gpu_netroot.sh: apt-get download failed" >&2; exit 1; }
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
for d in "$tmp"/*.deb; do dpkg -x "$d" "$OUTDIR"; done
# Only what the testbed runs: the binaries, their libraries, xtables
# extensions; no documentation.
rm -rf "$OUTDIR"/usr/share "$OUTDIR"/etc "$OUTDIR"/usr/lib/tc 2>/dev/null || true
# Absolute links (sbin/ip -> /bin/ip) would leave the tree: make them
# relative to it.
find "$OUTDIR" -type l | while read -r l; do
  t=$(readlink "$l")
  case "$t" in /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$OUTDIR$t")" "$l" ;; esac
done
cat >"$OUTDIR/env.sh" <<'ENV'
# Sourced on the GPU machine: Debian's ip, tc and iptables from here.
R=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$R/usr/sbin:$R/sbin:$R/usr/bin:$R/bin:$PATH"
export LD_LIBRARY_PATH="$R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export XTABLES_LIBDIR="$R/usr/lib/x86_64-linux-gnu/xtables"
ENV
EXCL="$(git rev-parse --git-dir)/info/exclude"
grep -qx "$OUTDIR" "$EXCL" 2>/dev/null || echo "$OUTDIR" >>"$EXCL"
du -sh "$OUTDIR"
