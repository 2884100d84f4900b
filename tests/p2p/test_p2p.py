"""uccl.p2p from Python: a server process and this one on loopback, every
kind of transfer byte for byte, and each misuse raising uccl.p2p.Error."""

import multiprocessing as mp
import time

import numpy as np
import pytest

from uccl import p2p

SIZES = [0, 1, 4096, 1 << 20, 3 << 20]


def _server(q_port, q_desc, sizes, q_done):
    ep = p2p.Endpoint(num_cpus=2, device="udp:lo", stripe_bytes=256 << 10)
    q_port.put(ep.listen())
    conn = ep.accept(timeout_ms=20000)
    buf = np.zeros(max(sizes) + 1, dtype=np.uint8)
    mr = ep.reg(buf)
    # Echo: each message comes back as it arrived.
    for _ in sizes:
        n = ep.recv(conn, mr, buf)
        ep.send(conn, mr, buf[:n])
    # One-sided: advertise a region, then wait for the client's "done".
    region = np.zeros(1 << 20, dtype=np.uint8)
    rmr = ep.reg(region)
    q_desc.put(ep.advertise(rmr, 0, region.nbytes))
    n = ep.recv(conn, mr, buf)
    assert n == 4
    # Send back what the client wrote, for it to check.
    ep.send(conn, rmr, region)
    # A notification comes back as it arrived.
    notifs = []
    while not notifs:
        notifs = ep.get_notifs()
    assert notifs == [(conn, b"landed")]
    ep.send_notif(conn, notifs[0][1] + b" back")
    ep.recv(conn, mr, buf)  # the client's last word: it is done
    q_done.get(timeout=30)  # and its send completed (_vec_server says why)


@pytest.fixture()
def pair():
    ctx = mp.get_context("spawn")
    q_port, q_desc, q_done = ctx.Queue(), ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_server, args=(q_port, q_desc, SIZES, q_done))
    proc.start()
    ep = p2p.Endpoint(num_cpus=2, device="udp:lo", stripe_bytes=256 << 10)
    conn = ep.connect("127.0.0.1", q_port.get(timeout=30), timeout_ms=20000)
    yield ep, conn, q_desc
    q_done.put(True)
    proc.join(timeout=30)
    assert proc.exitcode == 0


def test_send_recv_write_read_byte_for_byte(pair):
    ep, conn, q_desc = pair
    rng = np.random.default_rng(7)
    out = np.zeros(max(SIZES) + 1, dtype=np.uint8)
    back = np.zeros_like(out)
    smr, bmr = ep.reg(out), ep.reg(back)
    for n in SIZES:
        out[:n] = rng.integers(0, 256, n, dtype=np.uint8)
        assert ep.send(conn, smr, out[:n]) == n
        assert ep.recv(conn, bmr, back) == n
        assert np.array_equal(back[:n], out[:n])
    desc = q_desc.get(timeout=30)
    assert isinstance(desc, bytes) and len(desc) == p2p.REGION_DESC_BYTES
    data = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    dmr = ep.reg(data)
    assert ep.write(conn, dmr, data[100:], desc, offset=100) == (1 << 20) - 100
    readback = np.zeros(1 << 20, dtype=np.uint8)
    rmr = ep.reg(readback)
    assert ep.read(conn, rmr, readback, desc) == 1 << 20
    assert np.array_equal(readback[100:], data[100:])
    ep.send(conn, smr, out[:4])  # "done" with the region
    assert ep.recv(conn, bmr, back) == 1 << 20
    assert np.array_equal(back[100:1 << 20], data[100:])
    ep.send_notif(conn, b"landed")
    notifs = []
    deadline = time.monotonic() + 20
    while not notifs and time.monotonic() < deadline:
        notifs = ep.get_notifs()
    assert notifs == [(conn, b"landed back")]
    with pytest.raises(p2p.Error) as e:
        ep.send_notif(conn, b"x" * (p2p.MAX_NOTIF_BYTES + 1))
    assert e.value.code == "INVALID_ARGUMENT"
    ep.send(conn, smr, out[:1])


def test_misuse_raises_errors_with_codes():
    ep = p2p.Endpoint(num_cpus=1, device="udp:lo")
    buf = bytearray(4096)
    mr = ep.reg(buf)
    with pytest.raises(p2p.Error) as e:
        ep.send_async(12345, mr, buf)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(p2p.Error) as e:
        ep.reg(42)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(p2p.Error):
        ep.recv_async(1, mr, b"read-only bytes")
    with pytest.raises(p2p.Error) as e:
        ep.advertise(mr, 1000, 4096)
    assert e.value.code == "OUT_OF_RANGE"
    with pytest.raises(p2p.Error) as e:
        ep.get_metadata()
    assert e.value.code == "UNAVAILABLE"
    ep.listen()
    assert ep.get_metadata().startswith(b"127.0.0.1:")
    with pytest.raises(p2p.Error) as e:
        ep.connect_by_metadata("no-port", 1000)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(p2p.Error) as e:
        ep.accept(timeout_ms=50)
    assert e.value.code == "TIMED_OUT"
    strided = np.zeros((4, 4), dtype=np.uint8)[:, ::2]
    with pytest.raises(p2p.Error):
        ep.reg(strided)
    with pytest.raises(p2p.Error) as e:
        p2p.Endpoint(num_cpus=0)
    assert e.value.code == "INVALID_ARGUMENT"
    # The endpoint holds what it registered until dereg.
    tmp = ep.reg(bytearray(100))
    assert tmp in ep._registered
    ep.dereg(tmp)
    assert tmp not in ep._registered
    ep.dereg(mr)
    with pytest.raises(p2p.Error):
        ep.dereg(mr)


def _vec_server(q_port, q_desc, lens, q_done):
    ep = p2p.Endpoint(num_cpus=2, device="udp:lo", stripe_bytes=256 << 10)
    q_port.put(ep.listen())
    conn = ep.accept(timeout_ms=20000)
    bufs = [np.zeros(n + 8, dtype=np.uint8) for n in lens]
    mrs = [ep.reg(b) for b in bufs]
    # The messages come in order, one per slice; they go back as one sendv.
    got = ep.recvv(conn, list(zip(mrs, bufs)))
    assert got == sum(lens)
    ep.sendv(conn, [(m, b[:n]) for m, b, n in zip(mrs, bufs, lens)])
    region = np.zeros(1 << 20, dtype=np.uint8)
    rmr = ep.reg(region)
    q_desc.put(ep.advertise(rmr, 0, region.nbytes))
    ep.recv(conn, mrs[0], bufs[0])  # the client is done reading
    # Up until the client's last send has completed: the receive completes
    # before this side's engine acknowledges it, and a process that exits
    # in between fails that send at the client (the peer went away).
    q_done.get(timeout=30)


def test_vectored_send_write_read():
    lens = [0, 1, 4096, 700000, 33]
    ctx = mp.get_context("spawn")
    q_port, q_desc, q_done = ctx.Queue(), ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_vec_server,
                       args=(q_port, q_desc, lens, q_done))
    proc.start()
    try:
        ep = p2p.Endpoint(num_cpus=2, device="udp:lo",
                          stripe_bytes=256 << 10)
        conn = ep.connect("127.0.0.1", q_port.get(timeout=30),
                          timeout_ms=20000)
        rng = np.random.default_rng(11)
        # Slices of one registered buffer per side (the empty one too).
        obuf = rng.integers(0, 256, sum(lens) + 1, dtype=np.uint8)
        bbuf = np.zeros_like(obuf)
        cuts = np.cumsum([0] + lens)
        out = [obuf[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
        back = [bbuf[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
        omr = [ep.reg(obuf)] * len(lens)
        bmr = [ep.reg(bbuf)] * len(lens)
        h = ep.recvv_async(conn, list(zip(bmr, back)))
        assert ep.sendv(conn, list(zip(omr, out))) == sum(lens)
        assert ep.wait(h) == sum(lens)
        for a, b in zip(out, back):
            assert np.array_equal(a, b)
        # One-sided: slices to offsets in the reverse order, then read back.
        desc = q_desc.get(timeout=30)
        src = [(m, b) for m, b in zip(omr, out) if b.nbytes]
        offs, o = [], 1 << 20
        for _, b in src:
            o -= b.nbytes
            offs.append(o)
        remote = [(desc, off) for off in offs]
        assert ep.writev(conn, src, remote) == sum(lens)
        dst = [(m, b) for m, b in zip(bmr, back) if b.nbytes]
        for _, b in dst:
            b[:] = 0
        assert ep.readv(conn, dst, remote) == sum(lens)
        for (_, a), (_, b) in zip(src, dst):
            assert np.array_equal(a, b)
        with pytest.raises(p2p.Error) as e:
            ep.writev(conn, src, remote[:-1])
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(p2p.Error) as e:
            ep.sendv(conn, [(omr[1], out[1]), "not a slice"])
        assert e.value.code == "INVALID_ARGUMENT"
        ep.send(conn, omr[1], out[1])
    finally:
        q_done.put(True)
        proc.join(timeout=30)
    assert proc.exitcode == 0


def _silent_server(q_port):
    ep = p2p.Endpoint(num_cpus=1, device="udp:lo")
    q_port.put(ep.listen())
    ep.accept(timeout_ms=20000)
    time.sleep(60)  # killed by the test before this ends


def test_transfer_errors_raise():
    ctx = mp.get_context("spawn")
    q_port = ctx.Queue()
    proc = ctx.Process(target=_silent_server, args=(q_port,))
    proc.start()
    try:
        ep = p2p.Endpoint(num_cpus=1, device="udp:lo")
        conn = ep.connect("127.0.0.1", q_port.get(timeout=30),
                          timeout_ms=20000)
        buf = np.zeros(1 << 20, dtype=np.uint8)
        mr = ep.reg(buf[:4096])
        # Unregistered memory, a bad address, a spent handle.
        with pytest.raises(p2p.Error) as e:
            ep.send_async(conn, mr, buf[8192:])
        assert e.value.code == "OUT_OF_RANGE"
        with pytest.raises(p2p.Error) as e:
            ep.reg((0, 4096))
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(p2p.Error) as e:
            ep.poll(12345)
        assert e.value.code == "INVALID_ARGUMENT"
        # A peer that never receives: the wait times out, the handle lives.
        h = ep.send_async(conn, mr, buf[:4096])
        with pytest.raises(p2p.Error) as e:
            ep.wait(h, timeout_ms=200)
        assert e.value.code == "TIMED_OUT"
        # A dead peer fails it (UCCL_MAX_RETRIES bounds how long that takes).
        proc.kill()
        proc.join(timeout=30)
        t0 = time.monotonic()
        with pytest.raises(p2p.Error) as e:
            ep.wait(h, timeout_ms=60000)
        assert e.value.code != "TIMED_OUT"
        assert time.monotonic() - t0 < 30
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=30)
