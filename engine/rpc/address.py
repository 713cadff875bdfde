"""Server and peer addresses: 'host:port' checked once, for every carrier."""
from __future__ import annotations

from logtide.errors import InvalidArgument


def split_address(address: str, listen: bool = False) -> tuple[str, int]:
    """'host:port' as (host, port): a port in 1..65535, or 0 (any free port) for a server's `listen`
    address. A port past 65535 would otherwise wrap to another port (99999 served on 34463)."""
    host, sep, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        raise InvalidArgument(f"an address is 'host:port', got {address!r}")
    if not (0 if listen else 1) <= int(port) <= 65535:
        raise InvalidArgument(f"{address!r}: a port is 1..65535{' (0: any free port)' if listen else ''}, "
                              f"got {int(port)}")
    return host.strip("[]"), int(port)
