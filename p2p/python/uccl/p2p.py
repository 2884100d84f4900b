"""Point-to-point transfers over UCCL's engines (C++: include/uccl/p2p.h).

    ep = uccl.p2p.Endpoint(num_cpus=4)          # engines near the NIC
    port = ep.listen()                           # server
    conn = ep.accept()                           #   ... or ep.connect(ip, port)
    mr = ep.reg(buf)                             # numpy, bytearray, CPU tensor,
                                                 # or (ptr, nbytes)
    ep.send(conn, mr, buf); ep.recv(conn, mr, out)
    desc = ep.advertise(mr, 0, len)              # bytes, sent out of band
    ep.write(conn, mr, buf, desc, offset)        # one-sided
    ep.send_notif(conn, b"landed"); ep.get_notifs()   # [(conn, bytes)]
    ep.writev(conn, [(mr, a), (mr, b)], [(desc, 0), (desc, 4096)])
    ep.flush(mr) / ep.publish(mr)                # advertised GPU memory on the
                                                 # software NIC: peers' writes in,
                                                 # current contents out

Every error raises uccl.p2p.Error (its .code names the Status code); calls
that may block release the GIL.
"""

from uccl._p2p import MAX_NOTIF_BYTES, REGION_DESC_BYTES, Error  # noqa: F401
from uccl._p2p import Endpoint as _Endpoint

__all__ = ["Endpoint", "Error", "MAX_NOTIF_BYTES", "REGION_DESC_BYTES"]


class Endpoint(_Endpoint):
    """A p2p endpoint; the *_async calls return handles for poll/wait.

    It keeps a reference to every registered object until dereg, and to
    every transfer's buffer until the transfer is done, so neither is freed
    while the engines may still touch its memory."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._registered = {}  # memory id -> object
        self._in_flight = {}  # transfer handle -> buffer

    def reg(self, obj):
        mr = super().reg(obj)
        self._registered[mr] = obj
        return mr

    def dereg(self, mr):
        super().dereg(mr)
        self._registered.pop(mr, None)

    def _track(self, handle, buf):
        self._in_flight[handle] = buf
        return handle

    def send_async(self, conn, mr, buf):
        return self._track(super().send_async(conn, mr, buf), buf)

    def recv_async(self, conn, mr, buf):
        return self._track(super().recv_async(conn, mr, buf), buf)

    def write_async(self, conn, mr, src, desc, offset=0):
        return self._track(super().write_async(conn, mr, src, desc, offset),
                           src)

    def read_async(self, conn, mr, dst, desc, offset=0):
        return self._track(super().read_async(conn, mr, dst, desc, offset),
                           dst)

    def sendv_async(self, conn, slices):
        """slices: [(mr, buf), ...], each sent as its own message."""
        return self._track(super().sendv_async(conn, slices), slices)

    def recvv_async(self, conn, slices):
        """slices: [(mr, buf), ...], taking that many messages in order."""
        return self._track(super().recvv_async(conn, slices), slices)

    def writev_async(self, conn, slices, remote):
        """remote: [(desc, offset), ...], one per slice."""
        return self._track(super().writev_async(conn, slices, remote), slices)

    def readv_async(self, conn, slices, remote):
        return self._track(super().readv_async(conn, slices, remote), slices)

    def poll(self, handle):
        """(done, bytes); the handle is spent once done (or on an error)."""
        try:
            done, n = super().poll(handle)
        except Error:
            self._in_flight.pop(handle, None)
            raise
        if done:
            self._in_flight.pop(handle, None)
        return done, n

    def wait(self, handle, timeout_ms=30000):
        """Bytes moved; raises on an error or when timeout_ms passes (the
        handle then stays valid)."""
        try:
            n = super().wait(handle, timeout_ms)
        except Error as e:
            if e.code != "TIMED_OUT":
                self._in_flight.pop(handle, None)
            raise
        self._in_flight.pop(handle, None)
        return n

    def send(self, conn, mr, buf, timeout_ms=30000):
        return self.wait(self.send_async(conn, mr, buf), timeout_ms)

    def recv(self, conn, mr, buf, timeout_ms=30000):
        """Receives into buf; returns the bytes received."""
        return self.wait(self.recv_async(conn, mr, buf), timeout_ms)

    def write(self, conn, mr, buf, desc, offset=0, timeout_ms=30000):
        return self.wait(self.write_async(conn, mr, buf, desc, offset),
                         timeout_ms)

    def read(self, conn, mr, buf, desc, offset=0, timeout_ms=30000):
        return self.wait(self.read_async(conn, mr, buf, desc, offset),
                         timeout_ms)

    def sendv(self, conn, slices, timeout_ms=30000):
        return self.wait(self.sendv_async(conn, slices), timeout_ms)

    def recvv(self, conn, slices, timeout_ms=30000):
        """Bytes received over all slices."""
        return self.wait(self.recvv_async(conn, slices), timeout_ms)

    def writev(self, conn, slices, remote, timeout_ms=30000):
        return self.wait(self.writev_async(conn, slices, remote), timeout_ms)

    def readv(self, conn, slices, remote, timeout_ms=30000):
        return self.wait(self.readv_async(conn, slices, remote), timeout_ms)
