"""Two uccl.p2p endpoints of this process connected on loopback, shared by
the Python tests that need both ends in one process."""

import threading

from uccl import p2p


def connected_pair(timeout_ms=20000, **endpoint_args):
    """(a, b, a's connection, b's connection)."""
    a = p2p.Endpoint(**endpoint_args)
    b = p2p.Endpoint(**endpoint_args)
    port = b.listen()
    acc = {}
    t = threading.Thread(target=lambda: acc.update(c=b.accept(timeout_ms)))
    t.start()
    ca = a.connect("127.0.0.1", port, timeout_ms)
    t.join()
    return a, b, ca, acc["c"]
