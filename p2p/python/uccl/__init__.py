"""UCCL: GPU-networking transports. `uccl.p2p` is the point-to-point engine."""
