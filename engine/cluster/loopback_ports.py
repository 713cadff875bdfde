"""Free loopback ports for servers told their port before they start (Raft peers name each other's
addresses in advance, so they cannot bind port 0 and report it).

A port from bind(port 0) lies in the kernel's ephemeral range, from which every outgoing connection
also takes its local port: between the check here and the server's own bind, any connection of any
process may take it, and the server then fails with "address already in use". Ports below that range
are never handed out that way: only another server choosing the same port can collide, and a random
choice among thousands makes that rare.
"""
from __future__ import annotations

import random
import socket

SPAN = 10_000                      # ports just below the ephemeral range to choose from
_rng = random.SystemRandom()       # forked test workers must not draw the same sequence


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _kernel_ports(n: int, host: str) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports of host that no socket holds now, below the ephemeral range when there is
    room there (else chosen by the kernel)."""
    high = _ephemeral_low()
    low = max(1024, high - SPAN)
    if high - low < 8 * n:
        return _kernel_ports(n, host)
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(100 * n):
            if len(ports) == n:
                break
            p = _rng.randrange(low, high)
            if p in ports:
                continue
            s = socket.socket()
            try:
                s.bind((host, p))      # no SO_REUSEADDR: a port in TIME_WAIT is passed over too
            except OSError:
                s.close()
                continue
            held.append(s)
            ports.append(p)
    finally:
        for s in held:
            s.close()
    return ports if len(ports) == n else _kernel_ports(n, host)
