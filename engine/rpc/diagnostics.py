"""The Diagnostics service (diagnostics.proto): ping, counting stream, echo, sum. Any server can
carry it so a client can check that every call shape gets through."""
from __future__ import annotations

from logtide.engine.rpc import diagnostics_pb2 as pb
from logtide.engine.rpc.service import ServiceDef

DIAGNOSTICS = ServiceDef.from_proto(pb, "Diagnostics")


class DiagnosticsServicer:
    # Ping returns at once: the framed carrier's server runs it on its event loop (wire_server.py)
    nonblocking_methods = frozenset({"Ping"})

    def __init__(self, server_name: str = "logtide") -> None:
        self.server_name = server_name

    def Ping(self, request: pb.PingRequest, context) -> pb.PingReply:
        return pb.PingReply(payload=request.payload, server=self.server_name)

    def Count(self, request: pb.CountRequest, context):
        for i in range(request.n):
            if not context.is_active():
                return
            yield pb.CountReply(i=i)

    def Echo(self, requests, context):
        for r in requests:
            yield pb.PingReply(payload=r.payload, server=self.server_name)

    def Sum(self, requests, context) -> pb.CountReply:
        return pb.CountReply(i=sum(r.i for r in requests))
