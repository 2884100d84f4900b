#!/usr/bin/env python3
"""UCCL p2p benchmark: throughput and latency of uccl.p2p transfers between
two processes (run one --role server and one --role client with the same
flags).

  python3 p2p/benchmark.py --role server [--port 0] [--num-cpus 4]
  python3 p2p/benchmark.py --role client --remote-ip 10.0.0.2 --port P

Per size: --iters transfers with --async-depth outstanding (throughput),
then up to 100 at depth 1 (latency: us per transfer); send mode adds a
ping-pong up to 64 KB (server echoes; one-way = half the round trip, as a
UDP ping-pong reports). --mode send (two-sided), write or read
(one-sided, on a region the server advertises). --bidirectional (send mode):
both sides send and receive at once; the rate counts both directions.
--device gpu: buffers are CUDA tensors on --local-gpu-idx (needs torch;
staged through host memory on the software NIC; one-sided modes reach the
server's GPU memory through its host shadow, flushed before the check and
published before reads, outside the timing). --verify checks
every transfer's bytes. Exit status: 0 ok, 1 error or wrong data, 2 bad
usage.
"""

import argparse
import json
import sys
import time

try:
    import numpy as np
    from uccl import p2p
except ImportError as e:  # pragma: no cover - reported to the user
    print(f"benchmark: {e} (set PYTHONPATH=build/python after make)",
          file=sys.stderr)
    sys.exit(2)

DEFAULT_SIZES = "256,1K,4K,16K,64K,256K,1M,10M,100M"
LAT_ITERS = 100
PP_MAX = 64 << 10  # ping-pong latency up to this size
PP_ITERS = 1000


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B")
    unit = t[-1] if t and t[-1] in "KMG" else ""
    num = t[:-1] if unit else t
    if not num.isdigit():
        raise ValueError(f"bad size '{text}'")
    return int(num) * units[unit]


def human(n):
    for unit, div in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def pattern(n, size_idx, i):
    """The bytes of transfer i of size index size_idx (cheap to make)."""
    return ((np.arange(n, dtype=np.uint32) * 131 + size_idx * 7 + i) %
            251).astype(np.uint8)


def alloc(n, gpu):
    """n zero bytes: a numpy array, or a CUDA tensor on GPU `gpu`."""
    if gpu < 0:
        return np.zeros(n, dtype=np.uint8)
    import torch  # only for --device gpu
    return torch.zeros(n, dtype=torch.uint8, device=f"cuda:{gpu}")


class Bench:
    def __init__(self, args):
        self.a = args
        gpu = args.local_gpu_idx if args.device == "gpu" else -1
        self.gpu = gpu
        if gpu >= 0:
            import torch  # its CUDA runtime is the one the endpoint loads
            torch.cuda.set_device(gpu)
        self.ep = p2p.Endpoint(num_cpus=args.num_cpus, device=args.device_name,
                               local_gpu_idx=gpu)
        self.max = max(args.sizes)
        # One buffer slot per outstanding transfer, so none is reused early;
        # bidirectional: as many again to receive into.
        self.depth = args.async_depth
        slots = self.depth * (2 if args.bidirectional else 1)
        self.buf = alloc(self.max * slots + 1, gpu)
        self.mr = self.ep.reg(self.buf)
        # Ping-pong (send mode, sizes up to PP_MAX): the reply lands here.
        self.pp = alloc(2 * PP_MAX, gpu)
        self.pp_mr = self.ep.reg(self.pp)
        self.ctl = np.zeros(256, dtype=np.uint8)  # descriptors, sync bytes
        self.ctl_mr = self.ep.reg(self.ctl)

    def slot(self, k, n):
        return self.buf[k * self.max:k * self.max + n]

    def connect(self):
        if self.a.role == "server":
            port = self.ep.listen(self.a.port)
            print(f"listening on port {port}", flush=True)
            self.conn = self.ep.accept(timeout_ms=self.a.timeout_ms)
        else:
            self.conn = self.ep.connect(self.a.remote_ip, self.a.port,
                                        timeout_ms=self.a.timeout_ms)
        if self.a.mode != "send":
            if self.a.role == "server":
                desc = self.ep.advertise(self.mr, 0, self.buf.nbytes)
                self.ctl[:len(desc)] = np.frombuffer(desc, dtype=np.uint8)
                self.ep.send(self.conn, self.ctl_mr, self.ctl[:len(desc)])
            else:
                n = self.ep.recv(self.conn, self.ctl_mr, self.ctl)
                self.desc = self.ctl[:n].tobytes()

    def sync(self):
        """Both sides meet: the client speaks, the server answers."""
        if self.a.role == "client":
            self.ep.send(self.conn, self.ctl_mr, self.ctl[:1])
            self.ep.recv(self.conn, self.ctl_mr, self.ctl)
        else:
            self.ep.recv(self.conn, self.ctl_mr, self.ctl)
            self.ep.send(self.conn, self.ctl_mr, self.ctl[:1])

    def post(self, k, n):
        """Transfers from this side into/out of slot k (None: nothing)."""
        ep, c, buf = self.ep, self.conn, self.slot(k, n)
        if self.a.bidirectional:  # send from slot k, receive into k + depth
            return (ep.send_async(c, self.mr, buf),
                    ep.recv_async(c, self.mr, self.slot(k + self.depth, n)))
        if self.a.mode == "send":
            if self.a.role == "client":
                return ep.send_async(c, self.mr, buf)
            return ep.recv_async(c, self.mr, buf)
        if self.a.role == "server":
            return None  # one-sided: the server's memory just sits there
        if self.a.mode == "write":
            return ep.write_async(c, self.mr, buf, self.desc, k * self.max)
        return ep.read_async(c, self.mr, buf, self.desc, k * self.max)

    def put(self, k, n, data):
        if self.gpu >= 0:
            import torch
            self.slot(k, n).copy_(torch.from_numpy(data))
            # The engines copy on streams of their own: the data must be
            # in GPU memory before the transfer is posted.
            torch.cuda.synchronize()
        else:
            self.slot(k, n)[:] = data

    def get(self, k, n):
        s = self.slot(k, n)
        return s.cpu().numpy() if self.gpu >= 0 else s

    def fill(self, size_idx, i, k, n):
        sender = ("client" if self.a.mode in ("send", "write") else "server")
        if self.a.verify and n and (self.a.role == sender or
                                    self.a.bidirectional):
            self.put(k, n, pattern(n, size_idx, i))

    def check(self, size_idx, i, k, n):
        receiver = "server" if self.a.mode in ("send", "write") else "client"
        if self.a.bidirectional:
            k += self.depth
        elif self.a.role != receiver:
            return
        if self.a.verify and n:
            if not np.array_equal(self.get(k, n), pattern(n, size_idx, i)):
                raise RuntimeError(f"data mismatch: {human(n)} transfer {i}")

    def run_size(self, size_idx, n, iters, depth):
        """iters transfers of n bytes, depth outstanding; seconds taken."""
        one_sided = self.a.mode != "send"
        handles = {}
        t0 = time.perf_counter()
        for i in range(iters + depth):
            if i >= depth:  # retire the oldest
                j = i - depth
                h = handles.pop(j)
                for one in (h if isinstance(h, tuple) else (h,)):
                    if one is not None:
                        self.ep.wait(one, self.a.timeout_ms)
                if not one_sided:
                    self.check(size_idx, j, j % depth, n)
            if i < iters:
                if one_sided and self.a.role == "server":
                    handles[i] = None
                    continue
                self.fill(size_idx, i, i % depth, n)
                handles[i] = self.post(i % depth, n)
        if not one_sided:
            return time.perf_counter() - t0
        # One-sided: the time includes one round trip that tells the server
        # the transfers are done (its own loop does nothing).
        self.sync()
        secs = time.perf_counter() - t0
        last = range(max(iters - depth, 0), iters)
        if self.a.mode == "write" and self.a.role == "server":
            self.ep.flush(self.mr)  # GPU memory: the writes into it
        if (self.a.mode, self.a.role) in (("read", "client"),
                                          ("write", "server")):
            for j in last:  # the last transfer into each slot
                self.check(size_idx, j, j % depth, n)
        return secs

    def pingpong(self, n, iters):
        """send mode: one-way latency (half a round trip) of n-byte messages
        echoed by the server, in us, as a UDP ping-pong measures it. Each
        side's next receive is posted before it waits for its send to be
        acknowledged, so only the messages are on the critical path."""
        ep, c, t = self.ep, self.conn, self.a.timeout_ms
        bufs = (self.pp[:n], self.pp[PP_MAX:PP_MAX + n])
        out = self.slot(0, n)
        self.sync()
        t0 = time.perf_counter()
        if self.a.role == "client":
            for _ in range(iters):
                h = ep.recv_async(c, self.pp_mr, bufs[0])
                s = ep.send_async(c, self.mr, out)
                ep.wait(h, t)
                ep.wait(s, t)
        else:
            h = ep.recv_async(c, self.pp_mr, bufs[0])
            for i in range(iters):
                got = ep.wait(h, t)
                s = ep.send_async(c, self.pp_mr, bufs[i % 2][:got])
                if i + 1 < iters:
                    h = ep.recv_async(c, self.pp_mr, bufs[(i + 1) % 2])
                ep.wait(s, t)
        return (time.perf_counter() - t0) / iters / 2 * 1e6

    def prepare_reads(self, size_idx, n, iters, depth):
        """read mode: the server writes what the client will read."""
        if self.a.mode == "read" and self.a.role == "server" and self.a.verify:
            for j in range(max(iters - depth, 0), iters):
                self.put(j % depth, n, pattern(n, size_idx, j))
            self.ep.publish(self.mr)  # GPU memory: what the client reads
        self.sync()

    def run(self):
        a = self.a
        role = a.role.capitalize()
        print(f"UCCL P2P Benchmark — role: {a.role}")
        print("Message sizes: " + ", ".join(human(s) for s in a.sizes))
        print(f"Device: {a.device} | Local GPU idx: {a.local_gpu_idx} | "
              f"Engines: {self.ep.num_engines} | Mode: {a.mode}"
              f"{' (bidirectional)' if a.bidirectional else ''} | "
              f"Iterations: {a.iters} | Async depth: {a.async_depth}",
              flush=True)
        self.connect()
        results = []
        for idx, n in enumerate(a.sizes):
            iters = max(1, min(a.iters, (8 << 30) // max(n, 1)))
            self.prepare_reads(idx, n, iters, self.depth)
            secs = self.run_size(idx, n, iters, self.depth)
            lat_n = min(iters, LAT_ITERS)
            self.prepare_reads(idx, n, lat_n, 1)
            lat_s = self.run_size(idx, n, lat_n, 1)
            ways = 2 if a.bidirectional else 1
            gbps = n * iters * 8 * ways / secs / 1e9 if secs > 0 else 0.0
            lat_us = lat_s / lat_n * 1e6
            pp_us = None
            if a.mode == "send" and not a.bidirectional and n <= PP_MAX:
                pp_us = self.pingpong(n, PP_ITERS)
            results.append({"bytes": n, "iters": iters, "gbps": gbps,
                            "gBps": gbps / 8, "lat_us": lat_us,
                            "pingpong_us": pp_us})
            pp = f" | {pp_us:7.2f} us 1-way" if pp_us is not None else ""
            print(f"[{role}] {human(n):>9} : {gbps:7.2f} Gbps | "
                  f"{gbps / 8:6.2f} GB/s | {lat_us:9.1f} us{pp}", flush=True)
        best = max(results, key=lambda r: r["gbps"])
        print(f"[{role}] done: {len(results)} sizes, best "
              f"{best['gbps']:.2f} Gbps at {human(best['bytes'])}"
              f"{', data verified' if a.verify else ''}")
        staged = self.ep.staging_stats()
        if staged["copies"]:
            print(f"[{role}] staged through host memory: "
                  f"{staged['copies']} copies, {staged['overlapped']} "
                  f"overlapping the network")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"role": a.role, "mode": a.mode, "device": a.device,
                           "bidirectional": a.bidirectional,
                           "engines": self.ep.num_engines,
                           "staging": staged, "results": results}, f,
                          indent=1)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--role", choices=["server", "client"], required=True)
    ap.add_argument("--remote-ip", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=19999)
    ap.add_argument("--local-gpu-idx", type=int, default=-1)
    ap.add_argument("--num-cpus", type=int, default=4)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--nic", dest="device_name", default="",
                    help="NIC device (default: UCCL_DEVICE or 'udp')")
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--mode", choices=["send", "write", "read"],
                    default="send")
    ap.add_argument("--async-depth", type=int, default=1)
    ap.add_argument("--bidirectional", action="store_true")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--timeout-ms", type=int, default=30000)
    a = ap.parse_args(argv)
    try:
        a.sizes = [parse_size(s) for s in a.sizes.split(",") if s.strip()]
    except ValueError as e:
        ap.error(str(e))
    if not a.sizes or a.iters < 1 or not 1 <= a.async_depth <= 64:
        ap.error("need sizes, --iters >= 1 and --async-depth in [1, 64]")
    if a.device == "gpu" and a.local_gpu_idx < 0:
        a.local_gpu_idx = 0
    if a.bidirectional and a.mode != "send":
        ap.error("--bidirectional needs --mode send")
    if a.role == "client" and a.port == 0:
        ap.error("the client needs the server's --port")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        Bench(a).run()
    except (p2p.Error, RuntimeError) as e:
        print(f"benchmark ({a.role}): error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug here: still one line and a failure
        print(f"benchmark ({a.role}): error: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
