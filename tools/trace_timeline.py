#!/usr/bin/env python3
# Merges UCCL_TRACE_FILE traces of several engines/processes (one monotonic
# clock on one host) into one timeline, and measures gaps between events.
"""Usage:
  trace_timeline.py FILE... [--window N] [--gap FROM:TO ...] [--skip F]

Each FILE is a trace an engine wrote (<UCCL_TRACE_FILE>.<pid>.<n>.<engine>
.json); it is tagged P0, P1, ... in the order given. --window prints N
consecutive events from the middle of the run (time from the first shown,
and from the previous event). --gap FROM:TO, where each side is NAME or
NAME@P<i>, reports the time from every FROM event to the first TO event
after it (p10/p50/p90, us); --skip drops that fraction of the run at each
end (warm-up, tear-down). NIC events (nic_tx, nic_rx) carry the datagram
count of one sendmmsg/recvmmsg call in 'n'.
"""
import argparse
import bisect
import json
import sys


def load(paths):
    ev = []
    for i, p in enumerate(paths):
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"trace_timeline: {p}: {e}")
        for e in doc.get("traceEvents", []):
            ev.append((float(e["ts"]), i, e["name"], int(e["tid"]),
                       int(e["args"]["csn"])))
    if not ev:
        sys.exit("trace_timeline: no events")
    ev.sort()
    return ev


def parse_side(s):
    name, _, proc = s.partition("@")
    if proc and not (proc.startswith("P") and proc[1:].isdigit()):
        sys.exit(f"trace_timeline: bad process '{proc}' (want P0, P1, ...)")
    return name, int(proc[1:]) if proc else None


def quantile(xs, q):
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--gap", action="append", default=[])
    ap.add_argument("--skip", type=float, default=0.1)
    a = ap.parse_args()
    gaps = []
    for g in a.gap:
        f, _, t = g.partition(":")
        if not t:
            sys.exit(f"trace_timeline: --gap {g}: want FROM:TO")
        gaps.append((g, parse_side(f), parse_side(t)))
    ev = load(a.files)
    lo, hi = int(len(ev) * a.skip), int(len(ev) * (1 - a.skip))
    ev = ev[lo:max(hi, lo + 1)]
    counts = {}
    for e in ev:
        counts[(e[1], e[2])] = counts.get((e[1], e[2]), 0) + 1
    print("events (after --skip):",
          ", ".join(f"{n}@P{p} {c}" for (p, n), c in sorted(counts.items())))
    if a.window:
        start = len(ev) // 2
        t0 = prev = ev[start][0]
        for ts, p, name, conn, arg in ev[start:start + a.window]:
            who = "nic" if conn == 0xFFFFFFFF else f"conn {conn}"
            print(f"  {ts - t0:9.3f} +{ts - prev:7.3f}  P{p} {name:<10} "
                  f"{who:<8} {'n' if who == 'nic' else 'csn'} {arg}")
            prev = ts
    for g, (fn, fp), (tn, tp) in gaps:
        to_ts = [e[0] for e in ev if e[2] == tn and (tp is None or e[1] == tp)]
        d = []
        for e in ev:
            if e[2] != fn or (fp is not None and e[1] != fp):
                continue
            k = bisect.bisect_right(to_ts, e[0])
            if k < len(to_ts):
                d.append(to_ts[k] - e[0])
        if not d:
            print(f"  {g}: no pairs")
            continue
        d.sort()
        print(f"  {g}: {len(d)} pairs, us p10 {quantile(d, 0.1):.2f} "
              f"p50 {quantile(d, 0.5):.2f} p90 {quantile(d, 0.9):.2f}")


if __name__ == "__main__":
    main()
