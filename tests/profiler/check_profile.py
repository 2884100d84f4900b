#!/usr/bin/env python3
# Runs profiler_harness against libnccl-profiler-uccl.so and checks what the
# plugin wrote: the trace parses, its counts match what the harness did,
# slices on a track nest (never partly overlap), the summary is complete.
"""Usage: check_profile.py HARNESS PLUGIN"""
import glob
import json
import os
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run(harness, plugin, args, env_extra):
    out_dir = tempfile.mkdtemp(prefix="uccl-prof-")
    env = dict(os.environ, UCCL_PROFILER_DIR=os.path.join(out_dir, "sub/dir"))
    env.update(env_extra)
    p = subprocess.run([harness, "--plugin=" + plugin] + args, env=env,
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "harness %s %s: rc %d\n%s" %
          (args, env_extra, p.returncode, p.stderr[-2000:]))
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    expect = json.loads(lines[-1]) if lines else {}
    return out_dir, expect


def nesting_errors(events):
    """Slices of one (pid, tid) must nest: each starts after the enclosing
    one ends, or ends within it."""
    tracks = {}
    for e in events:
        if e.get("ph") == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    bad = 0
    eps = 0.0015  # us: timestamps are printed to 1 ns
    for sl in tracks.values():
        sl.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in sl:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - eps:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + eps:
                bad += 1
            stack.append(e)
    return bad


def load(out_dir):
    traces = glob.glob(os.path.join(out_dir, "sub/dir/*.trace.json"))
    sums = glob.glob(os.path.join(out_dir, "sub/dir/*.summary.txt"))
    check(len(traces) == 1 and len(sums) == 1,
          "one trace and one summary in %s: %s %s" % (out_dir, traces, sums))
    if not traces or not sums:
        return {}, ""
    with open(traces[0]) as f:
        doc = json.load(f)
    with open(sums[0]) as f:
        text = f.read()
    return doc, text


def merged(out_dir, trace_doc):
    """tools/profile_merge.py lays the trace and an engine's chunk trace
    (UCCL_TRACE_FILE's format) on one timeline, each its own process."""
    eng = os.path.join(out_dir, "t.123.0.0.json")
    with open(eng, "w") as f:
        json.dump({"traceEvents": [
            {"name": "tx", "ph": "i", "s": "t", "ts": 5.5, "pid": 0,
             "tid": 3, "args": {"csn": 1}}]}, f)
    traces = glob.glob(os.path.join(out_dir, "sub/dir/*.trace.json"))
    out = os.path.join(out_dir, "merged.json")
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "../../tools/profile_merge.py")
    p = subprocess.run([sys.executable, tool, "-o", out] + traces + [eng],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "profile_merge: " + p.stderr)
    with open(out) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    real = [e for e in ev if e.get("ph") != "M"]
    want = sum(1 for e in trace_doc["traceEvents"] if e.get("ph") != "M") + 1
    check(len(real) == want, "merged %d events, want %d" % (len(real), want))
    check({e["pid"] for e in real} == {1, 2}, "merged: a process per file")
    check(any(e.get("ts") == 5.5 and e["pid"] == 2 for e in real),
          "merged: the engine's event keeps its time")
    names = [e["args"]["name"] for e in ev if e.get("name") == "process_name"]
    check("engines t.123.0.0.json" in names and
          any(n.startswith("rank 0/2") for n in names),
          "merged: process names %s" % names)


def full_run(harness, plugin, version):
    out_dir, expect = run(harness, plugin, ["--version=%d" % version], {})
    doc, text = load(out_dir)
    if not doc:
        return
    if version == 5:
        merged(out_dir, doc)
    meta = doc["otherData"]
    for k, v in expect.items():
        if k == "steps_per_coll":
            continue
        check(meta.get(k) == v, "v%d %s: trace says %s, harness did %s" %
              (version, k, meta.get(k), v))
    check(nesting_errors(doc["traceEvents"]) == 0,
          "v%d: %d slices partly overlap their track's enclosing slice" %
          (version, nesting_errors(doc["traceEvents"])))
    names = {e["args"]["name"] for e in doc["traceEvents"]
             if e.get("name") == "thread_name"}
    for track in ("collectives", "ch 0 send to peer 1: steps",
                  "ch 1 recv from peer 1: net"):
        check(any(n.startswith(track) for n in names),
              "v%d: no track %r in %s" % (version, track, sorted(names)[:8]))
    n = expect["collectives"]
    check(("#%d AllReduce 65536 B (16384 x ncclFloat32)" % (n - 1)) in text,
          "v%d: summary lacks the last collective:\n%s" % (version, text[:800]))
    rows = [l for l in text.splitlines() if l.strip().startswith(("0 ", "1 "))
            and len(l.split()) == 9]
    check(len(rows) == 2 * n and all(int(r.split()[1]) == 12 for r in rows),
          "v%d: %d channel rows with 12 steps each (want %d)" %
          (version, len(rows), 2 * n))
    check("slowest steps:" in text and "resent, rtt 30.0 us" in text,
          "v%d: slowest steps with their congestion state" % version)


def main():
    harness, plugin = sys.argv[1], sys.argv[2]
    full_run(harness, plugin, 5)
    full_run(harness, plugin, 4)
    # A pool too small: later events dropped and counted, output still whole.
    out_dir, _ = run(harness, plugin, ["--colls=4"],
                     {"UCCL_PROFILER_EVENTS": "30", "HARNESS_SMALL_POOL": "1"})
    doc, text = load(out_dir)
    if doc:
        meta = doc["otherData"]
        check(meta["events"] == 30 and meta["dropped"] > 100,
              "small pool: %s" % meta)
        check(nesting_errors(doc["traceEvents"]) == 0, "small pool nesting")
        check("UCCL_PROFILER_EVENTS" in text, "small pool: summary says so")
    # A bad knob: init refuses (NCCL then runs without the profiler).
    run(harness, plugin, [], {"UCCL_PROFILER_MASK": "colls",
                              "HARNESS_EXPECT_INIT_FAILS": "1"})
    run(harness, plugin, [], {"UCCL_PROFILER_EVENTS": "0",
                              "HARNESS_EXPECT_INIT_FAILS": "1"})
    print("%s: %d failures" % ("FAIL" if failures else "PASS", len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
