"""The Logtail RPC service: the TN's push stream and pull, served over engine/rpc (the framed carrier,
gRPC on the same port, or in-process)."""
from __future__ import annotations

import threading

from logtide.engine.logtail import logtail_pb2 as pb
from logtide.engine.logtail.transport import encode_message
from logtide.engine.rpc import ServiceDef
from logtide.errors import StreamClosedError

LOGTAIL = ServiceDef.from_proto(pb, "Logtail")


class LogtailServicer:
    """Serves one TN: Push (bidirectional stream per CN) and Pull (unary)."""

    def __init__(self, tn) -> None:
        self.tn = tn

    def Push(self, requests, context):
        s = self.tn.connect(getattr(context, "peer", None) or "remote")

        def pump():
            try:
                for r in requests:
                    s.send_to_tn(bytes(r.frame))
            except Exception:      # the CN went away or cancelled
                pass
            finally:
                s.cut()
        threading.Thread(target=pump, name="logtail-push-requests", daemon=True).start()
        try:
            while context.is_active():
                m = s.cn_recv(timeout=0.2)
                if m is not None:
                    yield pb.StreamMessage(payload=encode_message(m))
        except StreamClosedError:
            return
        finally:
            s.cut()

    def Pull(self, request, context):
        resp = self.tn.pull(request.table, request.from_ts, request.to_ts or None)
        return pb.PullResponse(payload=encode_message(("pulled", resp)))


def serve(tn, address: str = "127.0.0.1:0", **options):
    """Serve the TN's Logtail service on `address`, to framed-carrier and gRPC clients alike;
    returns (server, bound address)."""
    from logtide.engine.rpc.dual_server import DualServer
    server = DualServer(address, **options)
    server.add_service(LOGTAIL, LogtailServicer(tn))
    server.start()
    return server, server.address


def pull(address: str, table: str, from_ts: int = 0, to_ts: int = 0) -> dict:
    """Pull (table, from_ts, to_ts] from a TN served at address: {"checkpoint", "entries", ...}."""
    from logtide.engine.logtail.transport import decode_message
    from logtide.engine.rpc import connect
    with connect(LOGTAIL, address, carrier="wire") as c:
        return decode_message(c.Pull(table=table, from_ts=from_ts, to_ts=to_ts).payload)[1]
