"""GrpcPassthrough: carries a gRPC client's connection, byte for byte, to the process's gRPC server
(on a Unix socket).

A WireServer given a gRPC backend tells its clients apart by their first bytes: HTTP/2's preface
("PRI * HTTP/2.0...") is a gRPC client, whose connection is then handed to this protocol, and the
framed carrier's magic ("LTWIRE") stays with the WireServer. So one port serves both carriers.
Each side's flow control holds the other: a side that does not read pauses reading from the other.
"""
from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("logtide.rpc.wire")

HTTP2_FIRST_BYTE = b"P"   # HTTP/2's client preface begins "PRI * HTTP/2.0"; the wire magic begins "L"
CONNECT_TIMEOUT_S = 5.0   # the backend is on loopback in this process: this is a generous bound


class _Backend(asyncio.Protocol):
    """The connection to the gRPC server: what it sends goes to the client."""

    def __init__(self, front: "GrpcPassthrough") -> None:
        self.front = front

    def data_received(self, data: bytes) -> None:
        self.front.client.write(data)

    def pause_writing(self) -> None:       # the gRPC server does not read: stop reading the client
        self.front.client.pause_reading()

    def resume_writing(self) -> None:
        self.front.client.resume_reading()

    def connection_lost(self, exc) -> None:
        self.front.close()


class GrpcPassthrough(asyncio.Protocol):
    """The client's side: set as its transport's protocol once the first bytes were seen."""

    def __init__(self, client: asyncio.Transport, first: bytes, backend: str, peer: str) -> None:
        self.client = client
        self.peer = peer
        self.backend: asyncio.Transport | None = None
        self.pending: list[bytes] = [first]
        self.closed = False
        client.pause_reading()                # until the backend connection is open
        asyncio.get_running_loop().create_task(self._connect(backend))

    async def _connect(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            tr, _ = await asyncio.wait_for(loop.create_unix_connection(lambda: _Backend(self), path),
                                           CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            log.warning("wire: gRPC client %s: the gRPC server at %s is unreachable: %s", self.peer, path, exc)
            self.close()
            return
        if self.closed:
            tr.close()
            return
        self.backend = tr
        tr.writelines(self.pending)
        self.pending = []
        self.client.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.backend is not None:
            self.backend.write(data)
        else:
            self.pending.append(data)

    def eof_received(self) -> bool:
        return False                          # close both: HTTP/2 has no use for half-closed connections

    def pause_writing(self) -> None:          # the client does not read: stop reading the gRPC server
        if self.backend is not None:
            self.backend.pause_reading()

    def resume_writing(self) -> None:
        if self.backend is not None:
            self.backend.resume_reading()

    def connection_lost(self, exc) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.client.close()
        if self.backend is not None:
            self.backend.close()
