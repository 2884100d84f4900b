#!/usr/bin/env python3
"""Retransmissions on a clean path: transport_test tpt runs on loopback with
no injected loss, per flow count, for this build and a baseline build in
interleaved rounds (same run, same machine). A retransmission there is
spurious (the original was delayed, not lost) or a loss the sender caused
(a receive buffer it overran); the target is at most 1% of chunks sent,
with goodput no lower than the baseline's.

  tools/retx_bench.py --build build [--baseline /path/to/old/build]
      [--flows 1,4,16] [--msize 1000000] [--duration 5] [--rounds 3]

Prints one row per build and flow count (medians over rounds) and, with a
baseline, the goodput ratio; exits 1 when a row of this build misses the
1% target.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_once(build, flows, msize, duration, extra):
    """One server+client pair; the client's JSON summary (dict)."""
    cmd = [os.path.join(HERE, "transport_pair.sh"), build, "--perftype=tpt",
           "--json", f"--nflow={flows}", f"--msize={msize}",
           f"--duration_s={duration}"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True,
                         timeout=duration * 4 + 120)
    if out.returncode != 0:
        raise RuntimeError(f"{build} {flows} flows: exit {out.returncode}\n"
                           f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    for line in out.stdout.splitlines():
        if line.startswith('{"role":"client"'):
            return json.loads(line)
    raise RuntimeError(f"{build}: no client JSON line\n{out.stdout[-2000:]}")


def retx(j):
    return j["retx_fast"] + j["retx_rto"] + j["retx_tlp"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--baseline", default="",
                    help="another build directory, run in the same rounds")
    ap.add_argument("--flows", default="1,4,16")
    ap.add_argument("--msize", type=int, default=1000000)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target_percent", type=float, default=1.0)
    ap.add_argument("extra", nargs="*", help="more transport_test flags")
    a = ap.parse_args()
    if a.rounds < 1 or a.duration <= 0:
        ap.error("--rounds must be >= 1 and --duration positive")
    try:
        flows = [int(f) for f in a.flows.split(",")]
    except ValueError:
        ap.error("--flows is a comma-separated list of counts")
    builds = [("this", a.build)] + ([("baseline", a.baseline)]
                                    if a.baseline else [])
    res = {}  # (name, flows) -> list of (gbps, retx_percent, chunks, retx)
    for r in range(a.rounds):
        for f in flows:
            order = builds if r % 2 == 0 else builds[::-1]
            for name, b in order:
                j = run_once(b, f, a.msize, a.duration, a.extra)
                # Builds before tx_chunks was reported: 61440-byte chunks
                # (loopback with splicing) per message.
                chunks = j.get("tx_chunks") or (
                    j["tx_bytes"] // a.msize * -(-a.msize // 61440))
                pct = 100.0 * retx(j) / chunks if chunks else float("nan")
                res.setdefault((name, f), []).append(
                    (j["tx_gbps"], pct, chunks, retx(j)))
                print(f"round {r + 1}/{a.rounds} {name:8s} {f:3d} flows: "
                      f"{j['tx_gbps']:7.2f} Gb/s, {retx(j)} retransmitted "
                      f"of {chunks} chunks ({pct:.2f}%)", flush=True)
    print(f"\n| build | flows | Gb/s (median) | retransmitted, % of chunks "
          f"(median) | rounds | vs baseline |")
    print("|---|---:|---:|---:|---:|---:|")
    missed = False
    for f in flows:
        for name, _ in builds:
            rows = res[(name, f)]
            g = statistics.median(x[0] for x in rows)
            p = statistics.median(x[1] for x in rows)
            ratio = ""
            if name == "this" and a.baseline:
                gb = statistics.median(x[0] for x in res[("baseline", f)])
                ratio = f"{g / gb:.2f}x" if gb > 0 else "n/a"
            if name == "this" and not p <= a.target_percent:
                missed = True
            print(f"| {name} | {f} | {g:.2f} | {p:.2f} | {len(rows)} | "
                  f"{ratio} |")
    verdict = "MISSED" if missed else "MET"
    print(f"\nretransmission target (<= {a.target_percent}% of chunks, this "
          f"build, every flow count): {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
