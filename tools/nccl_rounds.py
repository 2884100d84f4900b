#!/usr/bin/env python3
# tools/nccl_test.py's host-side figures: medians, ranks' rows merged, and
# interleaved rounds combined and taken apart (no torch, no GPU).
"""Used by tools/nccl_test.py (and tested by
tests/tools/nccl_test_rounds_test.py through it)."""


def median(xs):
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def merge_ranks(per_rank):
    # Rank 0's times; per size the slowest rank's issue time (a collective
    # waits for every rank's call, so the loop is no faster than that) and
    # CPU reference, and every rank's blocked loops and preemptions.
    rows = [dict(r) for r in per_rank[0]]
    for i, r in enumerate(rows):
        r["host_us"] = max(p[i]["host_us"] for p in per_rank)
        r["ref_ms"] = max(p[i]["ref_ms"] for p in per_rank)
        r["blocked"] = sum(p[i]["blocked"] for p in per_rank)
        r["preempted"] = sum(p[i]["preempted"] for p in per_rank)
    return rows


# Rounds per side that rounds_apart needs: with 3 and 3, one side's rounds
# all below the other's happens by chance 1 time in 20 (C(6,3) orders).
APART_MIN_ROUNDS = 3


def rounds_apart(mine, theirs):
    """Times (lower is better) of one net's rounds against another's:
    "faster" when each of mine beat each of theirs, "slower" when each lost,
    "level" otherwise (the two overlap: no difference these rounds can
    show); None with fewer than APART_MIN_ROUNDS on either side."""
    if len(mine) < APART_MIN_ROUNDS or len(theirs) < APART_MIN_ROUNDS:
        return None
    if max(mine) < min(theirs):
        return "faster"
    if min(mine) > max(theirs):
        return "slower"
    return "level"


def combine_rounds(rounds, subject, baselines):
    """rounds: [{net: rows}] (a net's rows missing where its run failed).
    Per size: each net's median time over its rounds, the subject's median
    host time, the ratio best baseline median time / subject's (> 1: the
    subject is faster) and in how many rounds the subject was no slower than
    every baseline of that round. "apart": per measure (time_us, pipe_us,
    lat_us), rounds_apart of the subject's rounds against the rounds of
    the baseline with the best median of that measure."""
    sizes = []
    for rd in rounds:
        for rows in rd.values():
            for r in rows:
                if r["bytes"] not in sizes:
                    sizes.append(r["bytes"])
    out = []
    for size in sorted(sizes):
        row = {"bytes": size, "time_us": {}, "busbw": {}, "rounds": {}}
        per = {}
        for rd in rounds:
            for net, rows in rd.items():
                for r in rows:
                    if r["bytes"] == size:
                        per.setdefault(net, []).append(r)
        row["pipe_us"], row["lat_us"] = {}, {}
        for net, rs in per.items():
            row["time_us"][net] = median([r["time_us"] for r in rs])
            row["busbw"][net] = median([r["busbw"] for r in rs])
            row["rounds"][net] = len(rs)
            for k in ("pipe_us", "lat_us"):
                xs = [r[k] for r in rs if r.get(k) is not None]
                if xs:
                    row[k][net] = median(xs)
        row["host_net_us"] = {net: median([r["host_us"] for r in rs])
                              for net, rs in per.items()}
        if subject in per:
            row["host_us"] = row["host_net_us"][subject]
        base = [b for b in baselines if b in per]
        best = (min(base, key=lambda b: row["time_us"][b]) if base
                else None)
        row["best_baseline"] = best
        row["best_baseline_us"] = row["time_us"][best] if best else None
        row["ratio"] = (row["time_us"][best] / row["time_us"][subject]
                        if best and subject in per else None)
        best_of = {"time_us": best}  # per measure, the best baseline
        for k in ("pipe_us", "lat_us"):
            has = [b for b in baselines if b in row[k]]
            bk = min(has, key=row[k].get) if has else None
            best_of[k] = bk
            row["best_baseline_" + k] = row[k][bk] if bk else None
            row[k[:-3] + "_ratio"] = (
                row[k][bk] / row[k][subject]
                if bk and row[k].get(subject) else None)

        def figures(net, k):  # net's rounds that gave measure k
            return [r[k] for r in per.get(net, []) if r.get(k) is not None]
        # Each measure's rounds against its best baseline's.
        row["apart"] = {k: rounds_apart(figures(subject, k),
                                        figures(b, k) if b else [])
                        for k, b in best_of.items()}
        wins = played = 0
        for rd in rounds:
            mine = [r for r in rd.get(subject, []) if r["bytes"] == size]
            theirs = [r["time_us"] for b in baselines
                      for r in rd.get(b, []) if r["bytes"] == size]
            if mine and theirs:
                played += 1
                wins += mine[0]["time_us"] <= min(theirs)
        row["wins"], row["played"] = wins, played
        out.append(row)
    return out


# A loop whose time per call is within this factor of its host's issue time
# per call is bound by the host: the transport kept up with it.
HOST_BOUND = 1.1


def loop_per_host(r, net):
    # One combine_rounds row: net's loop time over its host's issue time
    # (None where that net has no figure).
    t, h = r["time_us"].get(net), r["host_net_us"].get(net)
    return t / h if t and h else None


def host_bound(rows):
    # combine_rounds' rows in which both UCCL's loop and the best baseline's
    # are bound by their hosts.
    def bound(r, net):
        x = loop_per_host(r, net)
        return x is not None and x <= HOST_BOUND
    return [r for r in rows
            if bound(r, "UCCL") and bound(r, r["best_baseline"])]


def print_small_apart(small, f):
    # The suite's sizes up to 64 KiB taken apart (combine_rounds' rows; f
    # formats a figure or "-").
    if not small:
        return
    print("\nSizes <= 64 KiB, the loop's time taken apart (medians): "
          "loop / host = the loop's time per call over its host's issue "
          "time per call (near 1: the host bounds the loop and the "
          "transport kept up; the loop ratio then compares the two runs' "
          "vCPU speed, see cpu ref); pipeline = per call with the host far "
          "ahead (the transport's throughput for back-to-back calls, what "
          "nccl-tests times); latency = one call from idle until the host "
          "sees it done. Ratios: best Socket / UCCL (> 1: UCCL is "
          "faster).\n")
    print("| size (B) | loop ratio | UCCL loop / host | best Socket loop / "
          "host | UCCL pipeline us | best Socket pipeline "
          "us | pipeline ratio | UCCL latency us | best Socket latency us "
          "| latency ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in small:
        print("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["bytes"], f(r["ratio"], "%.2f"),
            f(loop_per_host(r, "UCCL"), "%.2f"),
            f(loop_per_host(r, r["best_baseline"]), "%.2f"),
            f(r["pipe_us"].get("UCCL"), "%.1f"),
            f(r["best_baseline_pipe_us"], "%.1f"),
            f(r["pipe_ratio"], "%.2f"), f(r["lat_us"].get("UCCL"), "%.1f"),
            f(r["best_baseline_lat_us"], "%.1f"), f(r["lat_ratio"], "%.2f")))


def apart_line(small, key, what):
    # The sizes where UCCL's rounds of one measure were all faster, all
    # slower, or neither, than the best Socket run's (combine_rounds' rows).
    groups = {}
    for r in small:
        groups.setdefault(r["apart"].get(key) or "too few rounds",
                          []).append(str(r["bytes"]))
    return ("sizes <= 64 KiB by %s, UCCL's rounds against the best Socket "
            "run's (faster/slower: every round of UCCL's beat/lost to every "
            "one of Socket's, by chance 1 in 20 with 3 rounds each, 1 in "
            "252 with 5; level: they overlap): %s; no slower: %s" % (
                what, "; ".join("%s %s B" % (g, ", ".join(groups[g]))
                                for g in ("faster", "level", "slower",
                                          "too few rounds") if g in groups),
                "no" if "slower" in groups else
                "yes" if "too few rounds" not in groups else "-"))
