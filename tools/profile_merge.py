#!/usr/bin/env python3
# Lays UCCL's NCCL profiler traces (one per rank and communicator) and the
# engines' chunk traces (UCCL_TRACE_FILE) on one timeline: one Chrome trace.
"""Usage:
  profile_merge.py -o merged.json PROFILE.trace.json... [ENGINE.json...]

Both kinds of file time events in microseconds on the host's monotonic
clock, so on one host they line up as written; each input becomes a
process of its own in the output (the profiler's keep their rank's name,
an engine trace is named after its file: <UCCL_TRACE_FILE>.<pid>.<n>.
<engine>.json). Files of different hosts do not share a clock: merge each
host's files on their own. Open the result in https://ui.perfetto.dev or
chrome://tracing.
"""
import argparse
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("profile_merge: %s: %s" % (path, e))
    if isinstance(doc, list):  # the array form of the format
        doc = {"traceEvents": doc}
    if not isinstance(doc.get("traceEvents"), list):
        sys.exit("profile_merge: %s: no traceEvents" % path)
    return doc


def merge(paths):
    out, meta = [], {}
    for i, path in enumerate(paths):
        doc = load(path)
        profiler = "otherData" in doc and "rank" in doc["otherData"]
        pid = i + 1  # a process per input file
        named = False
        for e in doc["traceEvents"]:
            e = dict(e)
            e["pid"] = pid
            if e.get("ph") == "M" and e.get("name") == "process_name":
                named = True
            out.append(e)
        if not named:
            name = ("engines " + os.path.basename(path)) if not profiler \
                else "rank %s" % doc["otherData"]["rank"]
            out.append({"name": "process_name", "ph": "M", "pid": pid,
                        "args": {"name": name}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                    "args": {"sort_index": pid}})
        if profiler:
            meta[os.path.basename(path)] = doc["otherData"]
    return {"displayTimeUnit": "ns", "traceEvents": out,
            "otherData": {"inputs": meta}}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    doc = merge(a.inputs)
    with open(a.output, "w") as f:
        json.dump(doc, f)
    n = sum(1 for e in doc["traceEvents"] if e.get("ph") != "M")
    print("profile_merge: %d events from %d files into %s" %
          (n, len(a.inputs), a.output))


if __name__ == "__main__":
    main()
