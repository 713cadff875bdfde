"""Free loopback ports for servers told their port before they start (Raft peers name each other's
addresses in advance, so they cannot bind port 0 and report it).

A port from bind(port 0) lies in the kernel's ephemeral range, from which every outgoing connection
also takes its local port: between the check here and the server's own bind, any connection of any
process may take it, and the server then fails with "address already in use". Ports below that range
are never handed out that way: only another server choosing the same port can collide, and a random
choice among thousands makes that rare. Rarer still: each port handed out is claimed for
CLAIM_SECONDS, by a file in a directory shared by this user's processes, and no other call here
hands it out while the claim holds (concurrent test workers, each starting replicas, were the
collisions seen).
"""
from __future__ import annotations

import os
import random
import socket
import tempfile
import time

SPAN = 10_000                      # ports just below the ephemeral range to choose from
_rng = random.SystemRandom()       # forked test workers must not draw the same sequence
CLAIM_SECONDS = 120.0              # long enough for a server told its port to start and bind it


def _claims_dir() -> str | None:
    d = os.path.join(tempfile.gettempdir(), f"logtide-ports-{os.getuid()}")
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return d


def _claim(d: str | None, port: int) -> bool:
    """Claim port for CLAIM_SECONDS; False when another call here holds a fresh claim on it."""
    if d is None:
        return True            # no shared directory: fall back to the random choice alone
    path = os.path.join(d, str(port))
    now = time.time()
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        pass
    except OSError:
        return True
    try:
        if now - os.stat(path).st_mtime < CLAIM_SECONDS:
            return False
        # a stale claim: take it over, unless another process took it over first (what was moved
        # aside is then its fresh claim, which goes back)
        aside = f"{path}.{os.getpid()}.{_rng.randrange(1 << 30)}"
        os.rename(path, aside)
        if now - os.stat(aside).st_mtime < CLAIM_SECONDS:
            try:
                os.link(aside, path)
            finally:
                os.unlink(aside)
            return False
        os.unlink(aside)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except OSError:
        return False


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
    claims = _claims_dir()
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
            if _claim(claims, p):
                ports.append(p)
    finally:
        for s in held:
            s.close()
    return ports if len(ports) == n else _kernel_ports(n, host)
