"""Free loopback ports for tests that start replicas on fixed addresses."""
from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """n distinct ports that were free a moment ago (bound together, so never the same one twice)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports
