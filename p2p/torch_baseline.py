#!/usr/bin/env python3
"""The baseline p2p/benchmark.py is compared with: torch.distributed
send/recv between two local processes, gloo on CPU tensors or NCCL on CUDA
tensors (for NCCL's Socket transport set NCCL_P2P_DISABLE=1
NCCL_SHM_DISABLE=1 NCCL_NET=Socket). Same sizes, rows and JSON as the
benchmark: rank 0 sends, rank 1 receives, a 1-byte reply ends each round.

  python3 p2p/torch_baseline.py --backend gloo --sizes 256,1M,100M
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmark import DEFAULT_SIZES, human, parse_size  # noqa: E402

LAT_ITERS = 100


def rounds(rank, buf, ack, iters, depth):
    """iters messages, depth outstanding (isend/irecv), then an ack."""
    peer = 1 - rank
    pending = []
    for _ in range(iters):
        op = dist.isend if rank == 0 else dist.irecv
        pending.append(op(buf, peer))
        if len(pending) >= depth:
            pending.pop(0).wait()
    for w in pending:
        w.wait()
    (dist.recv if rank == 0 else dist.send)(ack, peer)
    if ack.is_cuda:
        torch.cuda.synchronize()


def worker(rank, a, port, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = "cpu"
    if a.backend == "nccl":
        torch.cuda.set_device(a.gpus[rank])
        dev = f"cuda:{a.gpus[rank]}"
    dist.init_process_group(a.backend, rank=rank, world_size=2)
    ack = torch.zeros(1, dtype=torch.uint8, device=dev)
    results = []
    for n in a.sizes:
        buf = torch.ones(max(n, 1), dtype=torch.uint8, device=dev)[:n]
        iters = max(1, min(a.iters, (8 << 30) // max(n, 1)))
        rounds(rank, buf, ack, min(iters, 4), a.depth)  # warm-up
        t0 = time.perf_counter()
        rounds(rank, buf, ack, iters, a.depth)
        secs = time.perf_counter() - t0
        lat_n = min(iters, LAT_ITERS)
        t0 = time.perf_counter()
        for _ in range(lat_n):
            rounds(rank, buf, ack, 1, 1)
        lat_us = (time.perf_counter() - t0) / lat_n * 1e6
        gbps = n * iters * 8 / secs / 1e9
        results.append({"bytes": n, "iters": iters, "gbps": gbps,
                        "gBps": gbps / 8, "lat_us": lat_us})
        if rank == 0:
            print(f"[{a.backend}] {human(n):>9} : {gbps:7.2f} Gbps | "
                  f"{gbps / 8:6.2f} GB/s | {lat_us:9.1f} us", flush=True)
    if rank == 0:
        q.put(results)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--async-depth", dest="depth", type=int, default=1)
    ap.add_argument("--gpus", default="0,1", help="nccl: GPU of each rank")
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    try:
        a.sizes = [parse_size(s) for s in a.sizes.split(",") if s.strip()]
        a.gpus = [int(g) for g in a.gpus.split(",")]
    except ValueError as e:
        ap.error(str(e))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, q))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        print(f"torch_baseline: a rank failed ({[p.exitcode for p in procs]})",
              file=sys.stderr)
        return 1
    results = q.get()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"backend": a.backend, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
