"""GPU-initiated channels' setup (C++: channels/proxy.h; device API:
include/uccl/device/channel.h).

    ep = uccl.p2p.Endpoint(...); conn = ep.connect(...)   # or accept()
    proxy = uccl.channels.ChannelProxy(ep, gpu=0)
    mem = proxy.register_memory(tensor)      # ids 0, 1, ... in order
    ch = proxy.open_channel(conn)   # both sides at once: swaps descriptors
                                    # over conn (or add_channel(conn,
                                    # peer_descriptor) to swap them yourself)
    proxy.start()
    handle = proxy.handle(ch)   # CHANNEL_HANDLE_BYTES: a kernel's
                                # uccl::device::ChannelHandle argument
    proxy.status(ch)            # raises uccl.p2p.Error if the channel failed

With gpu=-1 (the CPU stand-in) host threads call put/signal/wait/flush,
the device calls' host versions. write_min_bytes: puts of at least this
many bytes between host memories go as one-sided writes (0: never; -1:
UCCL_CHANNEL_WRITE_MIN_KB); stats()["writes"] counts them. The channel owns its connection: stop()
closes it.
"""

from uccl._p2p import CHANNEL_HANDLE_BYTES, Error  # noqa: F401
from uccl._p2p import ChannelProxy as _ChannelProxy

__all__ = ["ChannelProxy", "Error", "CHANNEL_HANDLE_BYTES"]


class ChannelProxy(_ChannelProxy):
    """A proxy thread draining one GPU's trigger FIFO over a p2p endpoint.

    Keeps a reference to every registered object, so its memory outlives
    the proxy's use of it."""

    def __init__(self, endpoint, *args, **kwargs):
        super().__init__(endpoint, *args, **kwargs)
        self._registered = []

    def register_memory(self, obj):
        mem = super().register_memory(obj)
        self._registered.append(obj)
        return mem
