"""uccl.channels from Python on the CPU stand-in: two endpoints in this
process, proxies set up as a GPU program sets them up, host threads making
the device calls; every byte checked, every misuse raising uccl.p2p.Error."""

import threading

import numpy as np
import pytest
from p2p_pair import connected_pair

from uccl import channels, p2p

N = 64 << 10


@pytest.fixture()
def pair():
    """Two connected endpoints with a proxy each, memory 0 of N bytes."""
    a, b, ca, cb = connected_pair(num_cpus=1, device="udp:lo")
    pa = channels.ChannelProxy(a, num_semaphores=4, timeout_ms=20000)
    pb = channels.ChannelProxy(b, num_semaphores=4, timeout_ms=20000)
    ma, mb = np.zeros(N, np.uint8), np.zeros(N, np.uint8)
    assert pa.register_memory(ma) == 0
    assert pb.register_memory(mb) == 0
    ch_a = pa.add_channel(ca, pb.descriptor())
    ch_b = pb.add_channel(cb, pa.descriptor())
    pa.start()
    pb.start()
    yield pa, pb, ch_a, ch_b, ma, mb
    pa.stop()
    pb.stop()


def test_ping_pong_with_put_and_signal(pair):
    pa, pb, ch_a, ch_b, ma, mb = pair
    half = N // 2
    rng = np.random.default_rng(5)
    iters = 50

    def pong():
        for i in range(1, iters + 1):
            pb.wait(ch_b, 0, i)
            mb[:half] = mb[half:] + 1  # the answer depends on the request
            pb.put(ch_b, 0, half, 0, 0, half, signal=1)

    t = threading.Thread(target=pong)
    t.start()
    for i in range(1, iters + 1):
        ma[:half] = rng.integers(0, 255, half, dtype=np.uint8)
        sent = ma[:half].copy()
        pa.put(ch_a, 0, half, 0, 0, half, signal=0)
        pa.wait(ch_a, 1, i)
        assert np.array_equal(ma[half:], sent + 1)
    t.join()
    stats = pa.stats()
    assert stats["puts"] == iters and stats["signals"] == iters
    assert stats["bad_triggers"] == 0
    pa.status(ch_a)
    pb.status(ch_b)


def test_large_puts_go_as_writes_and_their_signal_follows():
    """Host memory both ends: a put over write_min_bytes is a one-sided
    write; its signal arrives once the bytes are there; 0 turns it off."""
    big = 1 << 20
    for write_min, writes in ((256 << 10, 1), (0, 0)):
        a, b, ca, cb = connected_pair(num_cpus=2, device="udp:lo")
        pa = channels.ChannelProxy(a, num_semaphores=2, timeout_ms=20000,
                                   write_min_bytes=write_min)
        pb = channels.ChannelProxy(b, num_semaphores=2, timeout_ms=20000,
                                   write_min_bytes=write_min)
        ma = np.random.default_rng(9).integers(0, 255, big, dtype=np.uint8)
        mb = np.zeros(big, np.uint8)
        pa.register_memory(ma)
        pb.register_memory(mb)
        # Descriptors swapped over the connections themselves.
        opened = {}
        t = threading.Thread(
            target=lambda: opened.update(b=pb.open_channel(cb, 10000)))
        t.start()
        ch_a = pa.open_channel(ca, timeout_ms=10000)
        t.join()
        ch_b = opened["b"]
        pa.start()
        pb.start()
        pa.put(ch_a, 0, 0, 0, 0, big, signal=1)
        pb.wait(ch_b, 1, 1)
        assert np.array_equal(mb, ma)
        assert pa.stats()["writes"] == writes
        pa.stop()
        pb.stop()


def test_open_channel_with_a_silent_peer_times_out():
    a, b, ca, cb = connected_pair(num_cpus=1, device="udp:lo")
    pa = channels.ChannelProxy(a, num_semaphores=2)
    pa.register_memory(np.zeros(4096, np.uint8))
    with pytest.raises(p2p.Error) as e:
        pa.open_channel(ca, timeout_ms=200)
    assert e.value.code == "TIMED_OUT"


def test_flush_then_every_put_is_there(pair):
    pa, pb, ch_a, ch_b, ma, mb = pair
    ma[:] = np.arange(N, dtype=np.uint64).astype(np.uint8)
    for k in range(8):
        pa.put(ch_a, 0, k * 4096, 0, k * 4096, 4096)
    pa.flush(ch_a)
    assert np.array_equal(mb[:8 * 4096], ma[:8 * 4096])
    assert len(pa.handle(ch_a)) == channels.CHANNEL_HANDLE_BYTES


def test_a_bad_put_fails_its_channel_and_writes_nothing(pair):
    pa, pb, ch_a, ch_b, ma, mb = pair
    ma[:] = 7
    pa.put(ch_a, 0, N - 10, 0, 0, 100)  # past the peer's memory: refused
    with pytest.raises(p2p.Error) as e:
        pa.flush(ch_a)
    assert "past peer memory" in str(e.value)
    with pytest.raises(p2p.Error):
        pa.status(ch_a)
    assert pa.stats()["bad_triggers"] == 1
    assert not mb.any()


def test_setup_mistakes_raise():
    a = p2p.Endpoint(num_cpus=1, device="udp:lo")
    pa = channels.ChannelProxy(a)
    with pytest.raises(p2p.Error):
        pa.add_channel(1, b"not a descriptor")
    with pytest.raises(p2p.Error):
        pa.handle(0)
    with pytest.raises(p2p.Error):
        pa.register_memory("text")
    pa.start()
    with pytest.raises(p2p.Error):
        pa.register_memory(np.zeros(8, np.uint8))
    pa.stop()
