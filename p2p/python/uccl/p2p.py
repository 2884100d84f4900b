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

Every error raises uccl.p2p.Error (its .code names the Status code); calls
that may block release the GIL.
"""

from uccl._p2p import MAX_NOTIF_BYTES, REGION_DESC_BYTES, Error  # noqa: F401
from uccl._p2p import Endpoint as _Endpoint

__all__ = ["Endpoint", "Error", "MAX_NOTIF_BYTES", "REGION_DESC_BYTES"]


class Endpoint(_Endpoint):
    """A p2p endpoint; the *_async calls return handles for poll/wait."""

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
