#!/usr/bin/env python3
# NCCL over UCCL's net plugin (or NCCL's own Socket transport) through
# torch.distributed: collective correctness and an nccl-tests-style table.
"""Usage (one process per GPU, spawned here):

  python3 tools/nccl_test.py check --plugin /abs/libnccl-net-uccl.so
  python3 tools/nccl_test.py bench --net UCCL --plugin /abs/libnccl-net-uccl.so
  python3 tools/nccl_test.py bench --net Socket [--socket-threads 4 --socks 4]
  python3 tools/nccl_test.py bench --net P2P
  python3 tools/nccl_test.py suite --plugin /abs/libnccl-net-uccl.so
  python3 tools/nccl_test.py profile --plugin /abs/libnccl-net-uccl.so \
      [--profiler /abs/libnccl-profiler-uccl.so]

check: all_reduce, all_gather, reduce_scatter, all_to_all and send/recv from
4 B to 256 MiB, every element compared with its expected value, and the NCCL
log must say the traffic went "via NET/UCCL". bench: all_reduce bus bandwidth
per size (busbw = algbw * 2(n-1)/n), and the host's time per call ("host":
issuing only, the slowest rank's; well below "time" means the GPU/network side is the bound;
close to it means the host is, or the launch queue filled up), and, taken
apart, "pipeline" (per call with the host far ahead: a GPU sleep holds the
stream while the host issues every call, which then run back to back, as
nccl-tests times them) and "latency" (one call from idle). --net P2P
gives the loop's floor without a network (NVLink), for reading small sizes.
suite: check, then bench for UCCL, Socket (defaults) and Socket (4 threads x
4 sockets), interleaved in --rounds rounds (default 3; order rotated each
round), and the summary: per size each net's median, the ratio, in how many
rounds UCCL was no slower than both Socket runs, and the target verdicts:
by medians, and, per measure up to 64 KiB, whether every round of UCCL's
beat (faster) or lost to (slower) every round of the best Socket run's or
the two overlap (level: these rounds show no difference; with 3 rounds
each, a complete split happens by chance 1 time in 20).
Each run's table also gives the slowest rank's CPU reference (a fixed piece
of Python work, timed: small sizes here are bound by the host, whose vCPUs
change speed), how many timed loops blocked and how often the issuing thread
was preempted (it shared its CPU). Every run but --net P2P forces
NCCL off NVLink and shared memory (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1) so
the bytes cross the network layer.
profile: all_reduce and send/recv (checked values) with UCCL's profiler
plugin (build/lib/libnccl-profiler-uccl.so, docs/nccl-profiler.md) loaded by
NCCL; the net plugin must emit a NetPlugin event under a ProxyStep for each
request, updated with its outcome, and each rank's trace must record its
collectives with nothing malformed or dropped.
"""
import argparse
import glob
import json
import os
import sys
import tempfile
import time

from nccl_launch import (SHARE_GPU_ENV, free_port, init, net_env, rank_gpu,
                         spawn)
from nccl_rounds import (HOST_BOUND, apart_line, combine_rounds, host_bound,
                         median, merge_ranks, print_small_apart)

MiB = 1 << 20
CHECK_SIZES = [4, 64, 1024, 64 * 1024, MiB, 16 * MiB, 64 * MiB, 256 * MiB]
BENCH_SIZES = [4 << (2 * i) for i in range(14)]  # 4 B .. 256 MiB, x4


def pattern(torch, n, a, b, dev):
    # Small integers: sums over ranks stay exact in float32.
    return ((torch.arange(n, device=dev, dtype=torch.int64) % a) + b).float()


def all_reduce_ok(torch, dist, n, rank, world, dev):
    # Sum over ranks of a pattern offset by each rank's number.
    x = pattern(torch, n, 13, rank, dev)
    dist.all_reduce(x)
    want = pattern(torch, n, 13, 0, dev) * world + sum(range(world))
    return torch.equal(x, want)


def ring_send_recv_ok(torch, dist, n, rank, world, dev):
    # Each rank sends to the next and receives from the previous.
    s = pattern(torch, n, 7, 500 + rank, dev)
    r = torch.empty(n, device=dev)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    ops = [dist.P2POp(dist.isend, s, nxt), dist.P2POp(dist.irecv, r, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return torch.equal(r, pattern(torch, n, 7, 500 + prv, dev))


def check_worker(rank, world, port, out):
    torch, dist = init(rank, world, port)
    dev = torch.device("cuda", rank_gpu(rank))
    results = []

    def record(op, size, ok, detail=""):
        results.append({"op": op, "bytes": size, "ok": bool(ok),
                        "detail": detail})

    for size in CHECK_SIZES:
        n = max(size // 4, world)
        n -= n % world
        record("all_reduce", size,
               all_reduce_ok(torch, dist, n, rank, world, dev))
        # all_gather
        mine = pattern(torch, n, 97, rank * 1000, dev)
        outs = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(outs, mine)
        ok = all(torch.equal(outs[r], pattern(torch, n, 97, r * 1000, dev))
                 for r in range(world))
        record("all_gather", size, ok)
        # reduce_scatter (sum): each rank gets its slice of the sum
        inp = [pattern(torch, n // world, 11, rank + 10 * j, dev)
               for j in range(world)]
        o = torch.empty(n // world, device=dev)
        dist.reduce_scatter(o, inp)
        want = sum(pattern(torch, n // world, 11, r + 10 * rank, dev)
                   for r in range(world))
        record("reduce_scatter", size, torch.equal(o, want))
        # all_to_all: chunk j of rank r goes to rank j
        ins = [pattern(torch, n // world, 5, rank * 100 + j, dev)
               for j in range(world)]
        outs = [torch.empty(n // world, device=dev) for _ in range(world)]
        dist.all_to_all(outs, ins)
        ok = all(torch.equal(outs[i], pattern(torch, n // world, 5,
                                              i * 100 + rank, dev))
                 for i in range(world))
        record("all_to_all", size, ok)
        record("send_recv", size,
               ring_send_recv_ok(torch, dist, n, rank, world, dev))
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    with open("%s.%d" % (out, rank), "w") as f:
        json.dump(results, f)


def bench_worker(rank, world, port, out, sizes, max_iters, reps=1):
    # reps > 1: the sweep runs reps times in turn and each size reports the
    # median of its reps (one process's noise, e.g. a slow first pass).
    torch, dist = init(rank, world, port)
    dev = torch.device("cuda", rank_gpu(rank))
    times = {}
    host = {}  # time the host spent issuing the calls (before synchronize)
    ref = {}  # this process's CPU speed just before (cpu_reference_ms)
    blocked = {}  # timed loops in which the issuing thread blocked
    preempted = {}  # its involuntary context switches in the timed loops
    pipe = {}  # per call with the host far ahead (pipeline_s)
    lat = {}  # one call from idle (latency_s)
    buf = torch.empty(max(sizes) // 4, device=dev)
    for _ in range(reps):
        for size in sizes:
            n = max(size // 4, 1)
            x = buf[:n]
            x.fill_(1.0)
            iters = max(5, min(max_iters, int(2e9 // max(size, 1))))
            for _ in range(3):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            ref.setdefault(n, []).append(cpu_reference_ms())
            # The barrier comes last: the CPU reference takes 7-15 ms and
            # differs between processes, and a rank that started its loop
            # that much earlier would time the other rank's lateness (at 100
            # calls, 5 ms is 50 us per call).
            dist.barrier()
            w0, p0 = context_switches()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            t1 = time.perf_counter()
            w1, p1 = context_switches()
            torch.cuda.synchronize()
            times.setdefault(n, []).append((time.perf_counter() - t0) / iters)
            host.setdefault(n, []).append((t1 - t0) / iters)
            blocked[n] = blocked.get(n, 0) + (w1 > w0)
            preempted[n] = preempted.get(n, 0) + (p1 - p0)
            p = pipeline_s(torch, dist, x, iters, t1 - t0)
            if p is not None:
                pipe.setdefault(n, []).append(p)
            lat.setdefault(n, []).append(latency_s(torch, dist, x,
                                                   min(20, iters)))
    rows = []
    for n in sorted(times):
        dt = median(times[n])
        algbw = n * 4 / dt / 1e9
        rows.append({"bytes": n * 4, "time_us": dt * 1e6, "algbw": algbw,
                     "host_us": median(host[n]) * 1e6,
                     "busbw": algbw * 2 * (world - 1) / world,
                     "reps_us": [t * 1e6 for t in times[n]],
                     "ref_ms": median(ref[n]), "blocked": blocked[n],
                     "preempted": preempted[n],
                     "pipe_us": median(pipe[n]) * 1e6 if n in pipe else None,
                     "lat_us": median(lat[n]) * 1e6})
    dist.barrier()
    dist.destroy_process_group()
    # Every rank's rows: a collective takes as long as its slowest rank, so
    # the table shows rank 0's times and the slowest rank's CPU reference.
    with open("%s.%d" % (out, rank), "w") as f:
        json.dump(rows, f)


def pipeline_s(torch, dist, x, iters, issue_s):
    # The GPU/network side's time per call with the host far ahead: a GPU
    # sleep holds the stream while the host issues all `iters` calls, which
    # then run back to back (what nccl-tests measures). The hold is 3x the
    # timed loop's issue time and at least 20 ms, at <= 2 GHz; None if the
    # host still was not done when it ended (a slow host: no figure).
    dist.barrier()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(max(0.02, 3 * issue_s) * 2e9))
    # Each rank's sleep ends at its own time (its own issue time, its GPU's
    # clock): the timing starts after one call, which both GPUs leave only
    # when both have woken, so no rank times the other's sleep.
    dist.all_reduce(x)
    start.record()
    for _ in range(iters):
        dist.all_reduce(x)
    held = not start.query()  # the sleep still held the stream
    end.record()
    end.synchronize()
    # Every rank must agree, or one rank's figure includes the other's wait.
    ok = torch.tensor([1.0 if held else 0.0], device=x.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if ok.item() < 1.0:
        return None
    return start.elapsed_time(end) / 1e3 / iters


def latency_s(torch, dist, x, calls):
    # One call's time from an idle pipeline to its completion seen by the
    # host (issue, launch, network, synchronize), median of `calls`.
    torch.cuda.synchronize()
    dist.barrier()
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return median(out)


def cpu_reference_ms():
    # A fixed piece of pure-Python work (the kind the issuing thread does),
    # timed: the milliseconds it takes say how fast this thread's CPU runs
    # now. Small sizes in this loop are bound by the host, and a VM's vCPUs
    # change speed with load outside it (BENCHMARKS.md, NCCL section).
    t0 = time.perf_counter()
    acc = 0
    for i in range(200000):
        acc += i
    return (time.perf_counter() - t0) * 1e3


def context_switches():
    # The calling thread's voluntary context switches so far (it blocked:
    # e.g. NCCL waited for its proxy thread to free an operation slot) and
    # involuntary ones (another thread took its CPU).
    import resource
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return ru.ru_nvcsw, ru.ru_nivcsw


def nccl_log(log_glob):
    text = ""
    for p in sorted(glob.glob(log_glob)):
        with open(p, errors="replace") as f:
            text += f.read()
    return text


def run_check(a, world, tmp):
    log = os.path.join(tmp, "check.%h.%p.log")
    out = os.path.join(tmp, "check.json")
    t0 = time.time()
    spawn(check_worker, world, (free_port(), out),
          net_env("UCCL", a.plugin, 0, 0, log))
    results = []
    for r in range(world):
        with open("%s.%d" % (out, r)) as f:
            results += [dict(x, rank=r) for x in json.load(f)]
    text = nccl_log(os.path.join(tmp, "check.*.log"))
    via = "via NET/UCCL" in text
    loaded = "NET/UCCL" in text
    bad = [x for x in results if not x["ok"]]
    print("## Correctness (NCCL over UCCL, %d ranks, %.0f s)\n" %
          (world, time.time() - t0))
    ops = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "send_recv"]
    print("| bytes | " + " | ".join(ops) + " |")
    print("|---:|" + "---|" * len(ops))
    for size in CHECK_SIZES:
        cells = []
        for op in ops:
            rs = [x for x in results if x["op"] == op and x["bytes"] == size]
            cells.append("ok" if rs and all(x["ok"] for x in rs) else "FAIL")
        print("| %d | %s |" % (size, " | ".join(cells)))
    print()
    lines = [l for l in text.splitlines() if "via NET/UCCL" in l]
    print("NCCL log: plugin loaded: %s; 'via NET/UCCL' lines: %d" %
          (loaded, len(lines)))
    for l in lines[:3]:
        print("  " + l.strip())
    for l in text.splitlines():
        if "NET/Plugin" in l or "Using network" in l:
            print("  " + l.strip())
            break
    ok = not bad and via and len(results) == world * len(ops) * len(CHECK_SIZES)
    print("\nCHECK %s (%d results, %d failed)\n" % ("PASS" if ok else "FAIL",
                                                   len(results), len(bad)))
    return ok


PROFILE_SIZES = [4, 64 * 1024, 4 * MiB, 256 * MiB]


def profile_worker(rank, world, port, out):
    torch, dist = init(rank, world, port)
    dev = torch.device("cuda", rank_gpu(rank))
    ok = []
    for size in PROFILE_SIZES:
        n = max(size // 4, 1)
        ok.append(all_reduce_ok(torch, dist, n, rank, world, dev))
        ok.append(ring_send_recv_ok(torch, dist, n, rank, world, dev))
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    with open("%s.%d" % (out, rank), "w") as f:
        json.dump(ok, f)


def run_profile(a, world, tmp):
    """One profiled run over UCCL; returns (values ok, each rank's trace
    metadata, their summaries, NCCL log text)."""
    name = "profile-UCCL"
    log = os.path.join(tmp, name + ".%h.%p.log")
    out = os.path.join(tmp, name + ".json")
    prof_dir = os.path.join(tmp, "profile")
    env = net_env("UCCL", a.plugin, 0, 0, log)
    env.update({"NCCL_PROFILER_PLUGIN": a.profiler,
                "UCCL_PROFILER_DIR": prof_dir})
    spawn(profile_worker, world, (free_port(), out), env)
    values = []
    for r in range(world):
        with open("%s.%d" % (out, r)) as f:
            values += json.load(f)
    metas, summaries = [], []
    for p in sorted(glob.glob(os.path.join(prof_dir, "*.trace.json"))):
        try:
            with open(p) as f:
                metas.append(json.load(f)["otherData"])
        except (OSError, ValueError, KeyError) as e:
            print("unreadable trace %s: %s" % (p, e))
            metas.append({"rank": -1, "net_uccl": 0})
    for p in sorted(glob.glob(os.path.join(prof_dir, "*.summary.txt"))):
        with open(p) as f:
            summaries.append(f.read())
    text = nccl_log(log.replace("%h", "*").replace("%p", "*"))
    print("traces and summaries in %s" % prof_dir)
    return values and all(values), metas, summaries, text


def profile_verdict(world, values_ok, metas, summaries, text):
    loaded = "PROFILER/Plugin: Loaded UCCL" in text
    via = "via NET/UCCL" in text
    print("### NCCL over UCCL: profiler loaded: %s, via NET/UCCL: %s, "
          "values %s\n" % ("yes" if loaded else "NO", "yes" if via else "NO",
                           "ok" if values_ok else "WRONG"))
    keys = ["rank", "collectives", "events", "net_uccl", "net_updated",
            "net_under_step", "net_retransmits", "dropped", "unfinished",
            "bad_calls", "stray_calls", "parents_not_found"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---:|" * len(keys))
    for m in metas:
        print("| " + " | ".join(str(m.get(k, "-")) for k in keys) + " |")
    print()
    if summaries:  # the first collectives of rank 0, as a reader sees them
        print("```\n" + "\n".join(summaries[0].splitlines()[:40]) + "\n```\n")
    # Every net plugin request an event under its proxy step, updated with
    # its outcome; each rank's collectives recorded; nothing malformed.
    good = (loaded and via and values_ok and len(metas) >= world and
            all(m["net_uccl"] > 0 and m["net_uccl"] == m["net_updated"] and
                m["net_uccl"] == m["net_under_step"] and
                m["collectives"] > 0 and m["bad_calls"] == 0 and
                m["stray_calls"] == 0 and m["dropped"] == 0 for m in metas))
    return good


def run_profile_mode(a, world, tmp):
    # The net plugin's NetPlugin events must reach the profiler through
    # NCCL: a NetPlugin event whose parent is a ProxyStep the profiler
    # itself started can only come from NCCL's callback fed the handle NCCL
    # gave the net plugin. The profiler's own checks are its harness's
    # (tests/profiler/check_profile.py).
    v, metas, summaries, text = run_profile(a, world, tmp)
    ok = profile_verdict(world, v, metas, summaries, text)
    print("PROFILE %s\n" % ("PASS" if ok else "FAIL"))
    return ok


def run_bench(a, world, tmp, net, threads=0, socks=0, label=None,
              channels=0, tag=""):
    name = "%s-%d-%d%s" % (net, threads, channels, tag)
    log = os.path.join(tmp, "bench-%s.%%h.%%p.log" % name)
    out = os.path.join(tmp, "bench-%s.json" % name)
    env = net_env(net, a.plugin, threads, socks, log)
    if channels:
        env["NCCL_MIN_NCHANNELS"] = str(channels)
    spawn(bench_worker, world,
          (free_port(), out, BENCH_SIZES, a.iters, a.reps), env)
    per_rank = []
    for r in range(world):
        with open("%s.%d" % (out, r)) as f:
            per_rank.append(json.load(f))
    rows = merge_ranks(per_rank)
    text = nccl_log(log.replace("%h", "*").replace("%p", "*"))
    via = ("via NET/%s" % net) in text or net == "P2P"
    label = label or net
    chans = sorted({int(m) for m in __import__("re").findall(
        r"Channel (\d+)/\d+ : \d+\[\d+\] -> \d+\[\d+\] \[send\] via NET",
        text)})
    seen = ("NVLink/shared memory, no network" if net == "P2P" else
            "via NET/%s seen" % net if via else "NET path NOT seen")
    print("### all_reduce, %s (%s, %d NET channels)\n" % (label, seen,
                                                         len(chans)))
    # host: the slowest rank's time per all_reduce call (issuing only; the
    # loop waits for every rank's call). Well below
    # the time: the GPU/network side bounds the loop. Close to it: the host
    # does, or the launch queue filled up and the host waited (see P2P).
    # cpu ref: the slowest rank's cpu_reference_ms (lower: faster CPU).
    # blocked: timed loops, over ranks and sweeps, in which the issuing
    # thread blocked at least once. preempted: its involuntary context
    # switches in them (another thread shared its CPU), summed alike.
    # pipeline: the time per call with the host far ahead (the GPU/network
    # side alone, as nccl-tests measures it; "-": the host was too slow to
    # get ahead). latency: one call from an idle pipeline until the host
    # sees it done, median of up to 20.
    print("| size (B) | time (us) | algbw (GB/s) | busbw (GB/s) | host (us) "
          "| cpu ref (ms) | blocked | preempted | pipeline (us) "
          "| latency (us) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %d | %.1f | %.2f | %.2f | %.1f | %.2f | %d | %d | %s | %.1f "
              "|" % (r["bytes"], r["time_us"], r["algbw"], r["busbw"],
                     r["host_us"], r["ref_ms"], r["blocked"], r["preempted"],
                     "-" if r["pipe_us"] is None else "%.1f" % r["pipe_us"],
                     r["lat_us"]))
    for r in rows:
        if len(r.get("reps_us", [])) > 1:
            print("reps %d B (us): %s" % (r["bytes"], " ".join(
                "%.1f" % t for t in r["reps_us"])))
    print()
    return rows, via


# The suite's nets, interleaved each round: (key, net, threads, sockets,
# label).
SUITE_NETS = [("UCCL", "UCCL", 0, 0, "UCCL"),
              ("Socket", "Socket", 0, 0, "Socket"),
              ("Socket_4x4", "Socket", 4, 4, "Socket, 4 threads x 4 sockets")]


def run_suite(a, world, tmp):
    """Returns (every run went via its net, JSON summary)."""
    ok = True
    rounds = []
    for rnd in range(a.rounds):
        # Rotated each round, so no net always runs first or last.
        k = rnd % len(SUITE_NETS)
        rd = {}
        for key, net, th, so, label in SUITE_NETS[k:] + SUITE_NETS[:k]:
            try:
                rows, via = run_bench(
                    a, world, tmp, net, th, so,
                    "%s, round %d of %d" % (label, rnd + 1, a.rounds),
                    tag="-r%d" % rnd)
            except Exception as e:  # a rank died: the other runs still count
                last = (str(e).strip().splitlines() or [type(e).__name__])
                print("### all_reduce, %s, round %d: FAILED (%s)\n" % (
                    label, rnd + 1, last[-1]))
                ok = False
                continue
            rd[key] = rows
            ok = ok and via
        rounds.append(rd)
    # Like for like with more channels (NCCL_MIN_NCHANNELS=8 on both), once.
    u8, via_u8 = run_bench(a, world, tmp, "UCCL", label="UCCL, "
                           "NCCL_MIN_NCHANNELS=8", channels=8)
    s48, via_s48 = run_bench(a, world, tmp, "Socket", 4, 4,
                             "Socket 4x4, NCCL_MIN_NCHANNELS=8", channels=8)
    # No network at all: what the loop itself costs at small sizes (not
    # with --share-gpu: NCCL's GPU paths need ranks of one host).
    p2p = []
    if not a.share_gpu:
        p2p, _ = run_bench(a, world, tmp, "P2P", label="P2P (NVLink, no "
                           "network: the loop's floor)")
    ok = ok and via_u8 and via_s48
    comb = combine_rounds(rounds, "UCCL", ["Socket", "Socket_4x4"])
    floor = {r["bytes"]: r["time_us"] for r in p2p}
    print("### Summary: all_reduce, medians of %d round(s), nets "
          "interleaved\n" % a.rounds)
    print("ratio: the best Socket median time / UCCL's (> 1: UCCL is "
          "faster; busbw ratio alike). won: rounds in which UCCL was no "
          "slower than both Socket runs of that round. Up to 64 KiB this "
          "loop is bound by the host's time per call (host), which moves "
          "with the vCPUs' speed (cpu ref in each run's table).\n")
    print("| size (B) | UCCL us | Socket us | Socket 4x4 us | UCCL busbw "
          "(GB/s) | best Socket busbw | ratio | UCCL won | UCCL host us "
          "| P2P floor us |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def f(x, fmt):  # "-" where no run of that net gave a figure
        return "-" if x is None else fmt % x

    for r in comb:
        t, b = r["time_us"], r["busbw"]
        sb = [b[k] for k in ("Socket", "Socket_4x4") if k in b]
        print("| %d | %s | %s | %s | %s | %s | %s | %d/%d | %s | %s |" % (
            r["bytes"], f(t.get("UCCL"), "%.1f"), f(t.get("Socket"), "%.1f"),
            f(t.get("Socket_4x4"), "%.1f"), f(b.get("UCCL"), "%.2f"),
            f(max(sb) if sb else None, "%.2f"), f(r["ratio"], "%.2f"),
            r["wins"], r["played"], f(r.get("host_us"), "%.1f"),
            f(floor.get(r["bytes"]), "%.1f")))
    print("\n| size (B) | UCCL 8ch busbw | Socket 4x4 8ch busbw | ratio "
          "8ch |")
    print("|---:|---:|---:|---:|")
    for x8, z8 in zip(u8, s48):
        print("| %d | %.2f | %.2f | %.2f |" % (
            x8["bytes"], x8["busbw"], z8["busbw"],
            x8["busbw"] / z8["busbw"] if z8["busbw"] else 0))
    small = [r for r in comb if r["bytes"] <= 65536]
    print_small_apart(small, f)
    big = [r for r in comb if r["bytes"] == 256 * MiB and r["ratio"]]
    if big:
        print("\n256 MiB: UCCL %.2f GB/s vs best Socket %.2f GB/s: %.2fx "
              "(target >= 2x)" % (big[0]["busbw"]["UCCL"],
                                  big[0]["busbw"]["UCCL"] / big[0]["ratio"],
                                  big[0]["ratio"]))
    for key, what in (("ratio", "loop time"), ("pipe_ratio", "pipeline"),
                      ("lat_ratio", "latency")):
        if small:
            print("sizes <= 64 KiB no slower than Socket by %s (medians): "
                  "%s (ratios %s)" % (
                      what, "yes" if all(r[key] and r[key] >= 1.0
                                         for r in small) else "no",
                      " ".join(f(r[key], "%.2f") for r in small)))
    for key, what in (("time_us", "loop time"), ("pipe_us", "pipeline"),
                      ("lat_us", "latency")):
        if small:
            print(apart_line(small, key, what))
    bound = host_bound(small)
    if bound:
        print("host-bound loops (UCCL's and the best Socket run's loop "
              "within %d%% of their hosts' issue time): %s B; there the "
              "loop ratio is the ratio of the runs' host issue times" % (
                  round((HOST_BOUND - 1) * 100),
                  ", ".join(str(r["bytes"]) for r in bound)))
    return ok, {"rounds": rounds, "combined": comb, "UCCL_8ch": u8,
                "Socket_4x4_8ch": s48, "P2P": p2p}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("mode", choices=["check", "bench", "suite", "profile"])
    ap.add_argument("--plugin", default="", help="absolute path of the .so")
    ap.add_argument("--net", default="UCCL",
                    help="bench: UCCL, Socket, or P2P (NCCL over NVLink/shared "
                         "memory, no network: the floor the host's calls and "
                         "kernel launches set for small sizes)")
    ap.add_argument("--profiler", default="",
                    help="profile: the profiler plugin's .so (default: "
                         "libnccl-profiler-uccl.so beside the plugin)")
    ap.add_argument("--socket-threads", type=int, default=0)
    ap.add_argument("--socks", type=int, default=0)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--reps", type=int, default=1,
                    help="bench: sweeps per process; each size reports the "
                         "median of its sweeps")
    ap.add_argument("--sizes", default="",
                    help="bench: comma-separated byte counts (default 4 B "
                         "to 256 MiB, x4)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="suite: rounds of UCCL, Socket and Socket 4x4 "
                         "(interleaved, order rotated); the summary gives "
                         "each size's medians and UCCL's wins")
    ap.add_argument("--json", default="", help="write results here")
    ap.add_argument("--world", type=int, default=2,
                    help="ranks, one process and GPU each (at most the GPUs "
                         "this machine has)")
    ap.add_argument("--share-gpu", action="store_true",
                    help="every rank on GPU 0, each with an NCCL_HOSTID of "
                         "its own (NCCL then runs them over the network); "
                         "run under CUDA MPS (tools/dev/mps.sh)")
    a = ap.parse_args()
    if a.share_gpu and a.mode == "bench" and a.net == "P2P":
        sys.exit("--share-gpu: P2P needs the ranks on one host and on GPUs "
                 "of their own")
    for flag in ("rounds", "reps", "iters"):
        if getattr(a, flag) < 1:
            sys.exit("--%s %d: give at least 1" % (flag, getattr(a, flag)))
    global BENCH_SIZES
    if a.sizes:
        BENCH_SIZES = [int(x) for x in a.sizes.split(",")]
    import torch
    gpus = torch.cuda.device_count()
    world = a.world
    if a.share_gpu:
        if gpus < 1 or world < 2 or world > 8:
            sys.exit("--share-gpu: needs a GPU (this machine has %d) and "
                     "--world 2 to 8" % gpus)
        os.environ[SHARE_GPU_ENV] = "1"  # the ranks inherit it
    elif gpus < 2:
        sys.exit("needs 2 GPUs (NCCL refuses two ranks on one GPU; "
                 "--share-gpu runs them on one); this machine has %d" % gpus)
    elif world < 2 or world > gpus:
        sys.exit("--world %d: give 2 to %d (one rank per GPU)" % (world, gpus))
    if a.plugin:
        a.plugin = os.path.abspath(a.plugin)
        if not os.path.exists(a.plugin):
            sys.exit("no plugin at %s" % a.plugin)
    elif a.mode != "bench" or a.net == "UCCL":
        sys.exit("--plugin is required")
    if a.mode == "profile":
        a.profiler = os.path.abspath(a.profiler or os.path.join(
            os.path.dirname(a.plugin), "libnccl-profiler-uccl.so"))
        if not os.path.exists(a.profiler):
            sys.exit("no profiler plugin at %s (build it: make build)" %
                     a.profiler)
    print("torch %s, NCCL %s, %d ranks on %d GPUs (%s)\n" % (
        torch.__version__, ".".join(map(str, torch.cuda.nccl.version())),
        world, gpus, torch.cuda.get_device_name(0)))
    tmp = tempfile.mkdtemp(prefix="uccl-nccl-")
    ok = True
    summary = {}
    if a.mode in ("check", "suite"):
        ok = run_check(a, world, tmp) and ok
    if a.mode == "profile":
        ok = run_profile_mode(a, world, tmp) and ok
    if a.mode == "bench":
        rows, via = run_bench(a, world, tmp, a.net, a.socket_threads, a.socks)
        summary[a.net] = rows
        ok = via and ok
    if a.mode == "suite":
        via, summary = run_suite(a, world, tmp)
        ok = via and ok
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    print("\nlogs in %s" % tmp)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
