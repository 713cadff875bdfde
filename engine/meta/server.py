"""The meta-service over the shared RPC layer: MetaServicer (meta.proto) and MetaServer.

Errors are typed LogtideErrors raised by the service; the RPC layer carries them across the wire
(MetaInvalidArgument -> INVALID_ARGUMENT and back to MetaInvalidArgument on the client).
"""
from __future__ import annotations

from typing import Optional

from logtide.engine.meta import grpc_format as G
from logtide.engine.meta import meta_pb2 as pb
from logtide.engine.meta.command import check_key
from logtide.engine.meta.command_batch import apply_decoded
from logtide.engine.meta.service import MetaService
from logtide.engine.meta.watch import check_filter
from logtide.engine.meta.wire import (
    event_to_pb, seqv_to_pb, txn_from_pb, txn_reply_to_pb, upsert_from_pb, upsert_reply_to_pb)
from logtide.engine.rpc import ServiceDef
from logtide.engine.rpc.dual_server import DualServer
from logtide.errors import MetaClosedError, MetaInvalidArgument

META = ServiceDef.from_proto(pb, "MetaService")


class MetaServicer:
    """The MetaService RPCs on one MetaService (embedded): same calls in-process and over gRPC."""

    def __init__(self, service: MetaService):
        self.service = service
        self.stopped = False

    @property
    def leader(self) -> str:
        return self.service.leader or ""

    def Upsert(self, request: pb.UpsertRequest, context) -> pb.UpsertReply:
        prev, result = self.service.apply_command(upsert_from_pb(request))
        return upsert_reply_to_pb(self.leader, prev, result)

    def Txn(self, request: pb.TxnRequest, context) -> pb.TxnReply:
        return txn_reply_to_pb(self.leader, self.service.apply_command(txn_from_pb(request)))

    def batch_Upsert(self, requests: list, context) -> list:
        """The pipeline's batch of Upserts, proposed together: one group, one fsync."""
        leader = self.leader
        return [r if isinstance(r, Exception) else upsert_reply_to_pb(leader, *r)
                for r in self._apply_many(requests, upsert_from_pb)]

    def batch_Txn(self, requests: list, context) -> list:
        """The pipeline's batch of Txns, proposed together: one group, one fsync."""
        leader = self.leader
        return [r if isinstance(r, Exception) else txn_reply_to_pb(leader, r)
                for r in self._apply_many(requests, txn_from_pb)]

    def _apply_many(self, requests: list, decode) -> list:
        return apply_decoded(requests, decode, self.service.apply_commands)

    def Get(self, request: pb.GetRequest, context) -> pb.GetReply:
        out = pb.GetReply(leader=self.leader)
        seqv_to_pb(self.service.get(request.key), out.value)
        return out

    def MGet(self, request: pb.MGetRequest, context) -> pb.MGetReply:
        out = pb.MGetReply(leader=self.leader)
        for v in self.service.mget(list(request.keys)):
            seqv_to_pb(v, out.values.add().value)
        return out

    def List(self, request: pb.ListRequest, context) -> pb.ListReply:
        limit = request.limit if request.HasField("limit") else None
        out = pb.ListReply(leader=self.leader)
        for k, v in self.service.list(request.prefix, limit):
            item = out.items.add(key=k)
            seqv_to_pb(v, item.value)
        return out

    def Status(self, request: pb.StatusRequest, context) -> pb.StatusReply:
        ms = self.service
        return pb.StatusReply(leader=self.leader, seq=ms.seq, applied_index=ms.applied_index, durable=ms.durable)

    def ChangeMember(self, request: pb.MemberRequest, context) -> pb.MemberReply:
        raise MetaInvalidArgument("this meta-service is one process, not a Raft group: it has no members "
                                  "to change (serve it with `logtide meta serve --raft`)")

    def Watch(self, request: pb.WatchRequest, context):
        key_end = request.key_end if request.HasField("key_end") else None
        after = (request.after_index, request.after_pos) if request.HasField("after_index") else None
        w = self.service.watch(check_key(request.key), key_end, check_filter(request.filter or "all"),
                               request.initial_flush, after)
        leader = self.leader
        try:
            yield pb.WatchEvent(leader=leader, ready=True)
            while context.is_active() and not self.stopped:
                try:
                    ev = w.get(timeout=G.WATCH_POLL_S)
                except MetaClosedError:
                    return
                if ev is not None:
                    yield event_to_pb(leader, ev)
        finally:
            w.close()


class MetaServer:
    """Serves one MetaService on an address, to framed-carrier and gRPC clients alike ("host:0"
    picks a free port; `address` is the bound one).

    Writes block their worker until durable, so concurrent writers share the log's group commit.
    """

    def __init__(self, service: MetaService, listen: str = "127.0.0.1:0", max_workers: int = 64):
        if not isinstance(listen, str) or ":" not in listen:
            raise MetaInvalidArgument(f"listen must be host:port, got {listen!r}")
        self.service = service
        self.servicer = MetaServicer(service)
        self._rpc = DualServer(listen, max_message_size=G.MAX_MESSAGE_BYTES, workers=max_workers,
                               grpc_workers=max_workers)
        self._rpc.add_service(META, self.servicer)
        self._listen = listen
        self.port: Optional[int] = None
        self.address: Optional[str] = None

    def start(self) -> "MetaServer":
        self.port = self._rpc.start()
        self.address = self._rpc.address
        if self.service.leader is None:
            self.service.leader = self.address   # single node: this server is the leader
        return self

    def stop(self, grace: Optional[float] = 1.0) -> None:
        self.servicer.stopped = True
        self._rpc.stop(grace)

    def wait(self) -> None:
        self._rpc.wait()
