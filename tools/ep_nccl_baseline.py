#!/usr/bin/env python3
"""The baseline of channel_bench --mode ep: the same dispatch and combine
as two torch.distributed all_to_all_single calls over NCCL's network path
(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), NCCL_NET=Socket or this project's
plugin. Same block per peer as the demo: tokens x 2 x hidden floats.

  python3 tools/ep_nccl_baseline.py --world 2 --net Socket --tokens 8,32,128
  python3 tools/ep_nccl_baseline.py --world 4 --net UCCL \
      --plugin gpu_carry/libnccl-net-uccl.so [--share_gpu]

One line per token count: p50 and p99 of one iteration (both calls,
synchronized), in us, as rank 0 saw it, and of the GPU's time in the two
calls (CUDA events around them), as channel_bench times its exchange
kernels.
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nccl_launch  # noqa: E402

TOPK = 2


def worker(rank, world, port, out, a):
    torch, dist = nccl_launch.init(rank, world, port, a.share_gpu)
    dev = torch.device("cuda", 0 if a.share_gpu else rank)
    lines = []
    for tokens in a.tokens:
        block = tokens * TOPK * a.hidden
        x = torch.full((world * block,), float(rank), device=dev)
        y = torch.empty_like(x)
        z = torch.empty_like(x)
        times, gpu_times = [], []
        ev0 = torch.cuda.Event(enable_timing=True)
        ev1 = torch.cuda.Event(enable_timing=True)
        # Each iteration starts with the ranks together (channel_bench
        # does the same).
        for it in range(a.iterations + a.iterations // 10):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_to_all_single(y, x)  # dispatch
            dist.all_to_all_single(z, y)  # combine
            torch.cuda.synchronize()
            if it >= a.iterations // 10:
                times.append((time.perf_counter() - t0) * 1e6)
        # The GPU's time in the two calls: the GPU is held ~100 us first,
        # so the host has queued both calls before the first event is
        # reached (the host's own cost is not in it, as it is not in the
        # events channel_bench puts around its kernels).
        for it in range(a.iterations + a.iterations // 10):
            dist.barrier()
            torch.cuda.synchronize()
            torch.cuda._sleep(200000)
            ev0.record()
            dist.all_to_all_single(y, x)
            dist.all_to_all_single(z, y)
            ev1.record()
            torch.cuda.synchronize()
            if it >= a.iterations // 10:
                gpu_times.append(ev0.elapsed_time(ev1) * 1e3)
        # Block j of y came from rank j; z's came back from where they went.
        want = torch.arange(world, device=dev).float().repeat_interleave(block)
        ok = torch.equal(y, want) and torch.equal(z, x)
        times.sort()
        gpu_times.sort()
        lines.append("ep baseline %s, %d ranks, %d tokens (%d KiB per peer): "
                     "p50 %.1f p99 %.1f us (on the GPU p50 %.1f p99 %.1f)%s"
                     % (a.net, world, tokens, block * 4 >> 10,
                        times[len(times) // 2],
                        times[int(0.99 * (len(times) - 1))],
                        gpu_times[len(gpu_times) // 2],
                        gpu_times[int(0.99 * (len(gpu_times) - 1))],
                        "" if ok else " DATA WRONG"))
    if rank == 0:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--net", choices=["Socket", "UCCL"], default="Socket")
    ap.add_argument("--plugin", default="build/lib/libnccl-net-uccl.so")
    ap.add_argument("--tokens", default="128",
                    type=lambda s: [int(v) for v in s.split(",")])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--share_gpu", action="store_true",
                    help="every rank on GPU 0 (NCCL_HOSTID per rank; run "
                    "under CUDA MPS), as channel_bench's ranks under "
                    "gpu_channels.sh SHARE_GPU=1")
    ap.add_argument("--log_dir", default="",
                    help="keep each rank's NCCL log (with the plugin's "
                    "engine stats under UCCL_STATS_INTERVAL_S) in this "
                    "directory instead of a temporary one")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = a.log_dir or tmp
        os.makedirs(logs, exist_ok=True)
        env = nccl_launch.net_env(a.net, a.plugin, 0, 0,
                                os.path.join(logs, "nccl.%h.%p"))
        out = os.path.join(tmp, "out.txt")
        nccl_launch.spawn(worker, a.world, (nccl_launch.free_port(), out, a), env)
        text = open(out).read()
    print(text, end="")
    return 1 if "DATA WRONG" in text else 0


if __name__ == "__main__":
    sys.exit(main())
