"""uccl.p2p with CUDA tensors (GPU machine only; skipped elsewhere): two
processes on loopback, GPU memory at both ends staged through host
buffers, byte for byte; one GPU shared by both processes, and two GPUs
where there are two. Run by tools/dev/gpu_p2p.sh run."""

import multiprocessing as mp

import numpy as np
import pytest

from uccl import p2p

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

SIZES = [0, 1, 4096, (1 << 20) + 3, 64 << 20]


def _server(q, gpu, sizes):
    torch.cuda.set_device(gpu)
    ep = p2p.Endpoint(local_gpu_idx=gpu, num_cpus=2, device="udp:lo")
    q.put(ep.listen())
    conn = ep.accept(timeout_ms=30000)
    buf = torch.zeros(max(sizes) + 1, dtype=torch.uint8, device=f"cuda:{gpu}")
    mr = ep.reg(buf)
    for _ in sizes:  # echo every message back from GPU memory
        n = ep.recv(conn, mr, buf)
        ep.send(conn, mr, buf[:n])
    stats = ep.staging_stats()
    assert stats["copies"] > 0 and stats["overlapped"] > 0, stats


@pytest.mark.parametrize("gpus", [(0, 0), (0, 1)], ids=["one_gpu", "two_gpus"])
def test_cuda_tensors_both_ends(gpus):
    if max(gpus) >= torch.cuda.device_count():
        pytest.skip("needs two GPUs")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_server, args=(q, gpus[1], SIZES))
    proc.start()
    try:
        dev = f"cuda:{gpus[0]}"
        torch.cuda.set_device(gpus[0])
        ep = p2p.Endpoint(local_gpu_idx=gpus[0], num_cpus=2, device="udp:lo")
        conn = ep.connect("127.0.0.1", q.get(timeout=60), timeout_ms=30000)
        out = torch.zeros(max(SIZES) + 1, dtype=torch.uint8, device=dev)
        back = torch.zeros_like(out)
        omr, bmr = ep.reg(out), ep.reg(back)
        rng = np.random.default_rng(5)
        for n in SIZES:
            data = rng.integers(0, 256, n, dtype=np.uint8)
            out[:n].copy_(torch.from_numpy(data))
            torch.cuda.synchronize()
            h = ep.recv_async(conn, bmr, back)
            assert ep.send(conn, omr, out[:n]) == n
            assert ep.wait(h) == n
            assert np.array_equal(back[:n].cpu().numpy(), data), n
    finally:
        proc.join(timeout=120)
    assert proc.exitcode == 0


def test_gpu_memory_needs_a_gpu_endpoint():
    ep = p2p.Endpoint(num_cpus=1, device="udp:lo")
    t = torch.zeros(16, dtype=torch.uint8, device="cuda:0")
    with pytest.raises(p2p.Error) as e:
        ep.reg(t)
    assert e.value.code == "INVALID_ARGUMENT"
    gep = p2p.Endpoint(local_gpu_idx=0, num_cpus=1, device="udp:lo")
    mr = gep.reg(t)
    with pytest.raises(p2p.Error) as e:
        gep.advertise(mr, 8, 16)
    assert e.value.code == "OUT_OF_RANGE"


def _region_server(q, gpu, n):
    torch.cuda.set_device(gpu)
    ep = p2p.Endpoint(local_gpu_idx=gpu, num_cpus=2, device="udp:lo")
    q.put(ep.listen())
    conn = ep.accept(timeout_ms=30000)
    region = torch.zeros(n, dtype=torch.uint8, device=f"cuda:{gpu}")
    mr = ep.reg(region)
    ctl = np.zeros(8, dtype=np.uint8)
    cmr = ep.reg(ctl)
    q.put(ep.advertise(mr, 0, n))
    ep.recv(conn, cmr, ctl)  # written
    ep.flush(mr)
    region += 1  # on the GPU: the client reads back data + 1
    torch.cuda.synchronize()
    ep.publish(mr)
    ep.send(conn, cmr, ctl[:1])
    ep.recv(conn, cmr, ctl)  # read


@pytest.mark.parametrize("gpus", [(0, 0), (0, 1)], ids=["one_gpu", "two_gpus"])
def test_one_sided_into_gpu_memory(gpus):
    if max(gpus) >= torch.cuda.device_count():
        pytest.skip("needs two GPUs")
    n = (16 << 20) + 5
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_region_server, args=(q, gpus[1], n))
    proc.start()
    try:
        torch.cuda.set_device(gpus[0])
        ep = p2p.Endpoint(local_gpu_idx=gpus[0], num_cpus=2, device="udp:lo")
        conn = ep.connect("127.0.0.1", q.get(timeout=60), timeout_ms=30000)
        desc = q.get(timeout=60)
        rng = np.random.default_rng(9)
        data = rng.integers(0, 255, n, dtype=np.uint8)
        src = torch.from_numpy(data).to(f"cuda:{gpus[0]}")
        torch.cuda.synchronize()
        mr = ep.reg(src)
        ctl = np.zeros(8, dtype=np.uint8)
        cmr = ep.reg(ctl)
        assert ep.write(conn, mr, src, desc) == n
        ep.send(conn, cmr, ctl[:1])
        ep.recv(conn, cmr, ctl)  # flushed, changed, published
        assert ep.read(conn, mr, src, desc) == n
        assert np.array_equal(src.cpu().numpy(), data + 1)
        ep.send(conn, cmr, ctl[:1])
    finally:
        proc.join(timeout=120)
    assert proc.exitcode == 0


def test_channel_proxy_setup_on_a_gpu():
    """uccl.channels with a GPU proxy: CUDA tensors registered, descriptors
    swapped, a channel handle of the C++ layout's size, and host calls
    refused (a GPU FIFO's counters are GPU memory)."""
    from p2p_pair import connected_pair

    from uccl import channels
    a, b, ca, cb = connected_pair(local_gpu_idx=0, num_cpus=1,
                                  device="udp:lo")
    pa = channels.ChannelProxy(a, gpu=0)
    pb = channels.ChannelProxy(b, gpu=0)
    ta = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda:0")
    tb = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda:0")
    assert pa.register_memory(ta) == 0 and pb.register_memory(tb) == 0
    ch = pa.add_channel(ca, pb.descriptor())
    pb.add_channel(cb, pa.descriptor())
    pa.start()
    pb.start()
    assert len(pa.handle(ch)) == channels.CHANNEL_HANDLE_BYTES
    with pytest.raises(p2p.Error):
        pa.put(ch, 0, 0, 0, 0, 16)
    pa.status(ch)
    pa.stop()
    pb.stop()
