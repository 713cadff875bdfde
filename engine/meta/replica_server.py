"""The meta-service RPCs on a Raft replica: ReplicaServicer (meta.proto's MetaService) and
ForwardServicer (MetaForward, replica to replica).

A replica serves a request itself when it leads, and a stale read, a watch or a stale status
anywhere; anything else it forwards to the leader once (Forwarder) and returns the leader's reply.
Every reply names the leader's client address, in its `leader` field and, on a gRPC call of its
own, in the `x-databend-meta-leader-grpc-endpoint` header as Databend's meta-service sends it.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

from google.protobuf.message import DecodeError

from logtide.engine.meta import grpc_format as G
from logtide.engine.meta import meta_pb2 as pb
from logtide.engine.meta.command import check_key
from logtide.engine.meta.command_batch import apply_decoded
from logtide.engine.meta.replica import check_consistency
from logtide.engine.meta.watch import check_filter
from logtide.engine.meta.wire import (
    event_to_pb, seqv_to_pb, txn_from_pb, txn_reply_to_pb, upsert_from_pb, upsert_reply_to_pb)
from logtide.engine.rpc import ServiceDef
from logtide.errors import MetaClosedError, MetaForwardRefused, MetaInvalidArgument, MetaUnknownMember

META_FORWARD = ServiceDef.from_proto(pb, "MetaForward")
LEADER_HEADER = "x-databend-meta-leader-grpc-endpoint"
MAX_FORWARD_TIMEOUT_S = 60.0           # a forwarded request waits at most this long, whatever it asks
WRITES = ("Upsert", "Txn", "ChangeMember")
READS = ("Get", "MGet", "List", "Status")
_REPLY = {"Upsert": pb.UpsertReply, "Txn": pb.TxnReply, "Get": pb.GetReply, "MGet": pb.MGetReply,
          "List": pb.ListReply, "Status": pb.StatusReply, "ChangeMember": pb.MemberReply}
_REQUEST = {"Upsert": pb.UpsertRequest, "Txn": pb.TxnRequest, "Get": pb.GetRequest, "MGet": pb.MGetRequest,
            "List": pb.ListRequest, "Status": pb.StatusRequest, "ChangeMember": pb.MemberRequest}


def _timeout(replica, ctx) -> float:
    """What this call may wait: the caller's deadline when gRPC tells it, else the replica's default."""
    left = ctx.time_remaining() if ctx is not None and hasattr(ctx, "time_remaining") else None
    t = replica.request_timeout
    return t if left is None else max(0.0, min(t, left))


def _stale(name: str, req) -> bool:
    return name in READS and check_consistency(req.consistency) == "stale"


class ReplicaServicer:
    """MetaService on one replica: served locally when it leads (or the read is stale), else forwarded."""

    def __init__(self, replica) -> None:
        self.r = replica
        self.stopped = False

    # ------------------------------------------------------------------ one call
    def serve_local(self, name: str, req, timeout: float, barrier: bool = True):
        """The reply of `name(req)` from this replica's own state (writes: this replica must lead)."""
        r = self.r
        if name == "Upsert":
            prev, res = r.apply_command(upsert_from_pb(req), timeout)
            return upsert_reply_to_pb(r.leader_address(), prev, res)
        if name == "Txn":
            return txn_reply_to_pb(r.leader_address(), r.apply_command(txn_from_pb(req), timeout))
        if name == "ChangeMember":
            r.change_member(req.op, req.node_id, req.address, timeout)
            conf = r.node.conf()
            return pb.MemberReply(leader=r.leader_address(), voters=sorted(conf.voters),
                                  learners=sorted(conf.learners), nodes=_node_records(r.nodes()))
        if barrier and check_consistency(req.consistency) == "linearizable":
            r.read_barrier(timeout)
        return self._read(name, req)

    def _read(self, name: str, req):
        r = self.r
        leader = r.leader_address()
        if name == "Get":
            out = pb.GetReply(leader=leader)
            seqv_to_pb(r.get(req.key), out.value)
            return out
        if name == "MGet":
            out = pb.MGetReply(leader=leader)
            for v in r.mget(list(req.keys)):
                seqv_to_pb(v, out.values.add().value)
            return out
        if name == "List":
            limit = req.limit if req.HasField("limit") else None
            out = pb.ListReply(leader=leader)
            for k, v in r.list(req.prefix, limit):
                seqv_to_pb(v, out.items.add(key=k).value)
            return out
        return self._status(leader)

    def _status(self, leader: str) -> pb.StatusReply:
        st = self.r.status()
        return pb.StatusReply(leader=leader, seq=st["seq"], applied_index=st["applied"], durable=True, id=st["id"],
                              role=st["role"], term=st["term"], leader_id=st["lead"], commit_index=st["commit"],
                              last_index=st["last_index"], first_index=st["first_index"], voters=st["voters"],
                              learners=st["learners"], nodes=_node_records(st["nodes"]))

    def _serve(self, name: str, req, ctx):
        t = _timeout(self.r, ctx)
        if self.r.is_leader() or _stale(name, req):
            out = self.serve_local(name, req, t)
        else:
            out = self.r.forwarder.forward(name, req, _REPLY[name], t)
        _header(ctx, out.leader)
        return out

    def Upsert(self, request: pb.UpsertRequest, context) -> pb.UpsertReply:
        return self._serve("Upsert", request, context)

    def Txn(self, request: pb.TxnRequest, context) -> pb.TxnReply:
        return self._serve("Txn", request, context)

    def Get(self, request: pb.GetRequest, context) -> pb.GetReply:
        return self._serve("Get", request, context)

    def MGet(self, request: pb.MGetRequest, context) -> pb.MGetReply:
        return self._serve("MGet", request, context)

    def List(self, request: pb.ListRequest, context) -> pb.ListReply:
        return self._serve("List", request, context)

    def Status(self, request: pb.StatusRequest, context) -> pb.StatusReply:
        return self._serve("Status", request, context)

    def ChangeMember(self, request: pb.MemberRequest, context) -> pb.MemberReply:
        return self._serve("ChangeMember", request, context)

    # ------------------------------------------------------------------ a batch of calls (one frame)
    def batch_Upsert(self, requests: list, context) -> list:
        """The pipeline's batch of Upserts: proposed together on the leader (one group, one fsync)."""
        return self._batch_writes("Upsert", requests, context, upsert_from_pb,
                                  lambda leader, rep: upsert_reply_to_pb(leader, *rep))

    def batch_Txn(self, requests: list, context) -> list:
        return self._batch_writes("Txn", requests, context, txn_from_pb, txn_reply_to_pb)

    def batch_Get(self, requests: list, context) -> list:
        return self._batch_reads("Get", requests, context)

    def batch_MGet(self, requests: list, context) -> list:
        return self._batch_reads("MGet", requests, context)

    def batch_List(self, requests: list, context) -> list:
        return self._batch_reads("List", requests, context)

    def _batch_writes(self, name: str, requests: list, context, decode: Callable, encode: Callable) -> list:
        t = _timeout(self.r, context)
        if not self.r.is_leader():
            return self.r.forwarder.forward_many([(name, q, _REPLY[name]) for q in requests], t)
        out = apply_decoded(requests, decode, lambda cmds: self.r.apply_commands(cmds, t))
        leader = self.r.leader_address()
        return [rep if isinstance(rep, BaseException) else encode(leader, rep) for rep in out]

    def _batch_reads(self, name: str, requests: list, context) -> list:
        """One ReadIndex barrier for every linearizable read of the batch (on the leader)."""
        t = _timeout(self.r, context)
        out: List[Any] = [None] * len(requests)
        linear, stale = [], []
        for i, q in enumerate(requests):
            try:
                (stale if check_consistency(q.consistency) == "stale" else linear).append(i)
            except MetaInvalidArgument as exc:
                out[i] = exc
        if linear:
            if self.r.is_leader():
                try:
                    self.r.read_barrier(t)
                    barrier_error = None
                except Exception as exc:  # noqa: BLE001 - every linearizable read of the batch fails alike
                    barrier_error = exc
                for i in linear:
                    out[i] = barrier_error or _try(lambda: self._read(name, requests[i]))
            else:
                got = self.r.forwarder.forward_many([(name, requests[i], _REPLY[name]) for i in linear], t)
                for i, g in zip(linear, got):
                    out[i] = g
        for i in stale:
            out[i] = _try(lambda: self._read(name, requests[i]))
        return out

    # ------------------------------------------------------------------ watch (served by any replica)
    def Watch(self, request: pb.WatchRequest, context):
        key_end = request.key_end if request.HasField("key_end") else None
        after = (request.after_index, request.after_pos) if request.HasField("after_index") else None
        w = self.r.watch(check_key(request.key), key_end, check_filter(request.filter or "all"),
                         request.initial_flush, after)
        leader = self.r.leader_address()
        _header(context, leader)
        try:
            yield pb.WatchEvent(leader=leader, ready=True)
            while context.is_active() and not self.stopped:
                try:
                    ev = w.get(timeout=G.WATCH_POLL_S)
                except MetaClosedError:
                    return
                if ev is not None:
                    yield event_to_pb(self.r.leader_address(), ev)
        finally:
            w.close()


class ForwardServicer:
    """MetaForward on one replica: a request another replica forwarded, served only by the leader."""

    def __init__(self, replica) -> None:
        self.r = replica

    def Forward(self, request: pb.ForwardRequest, context) -> pb.ForwardReply:
        r = self.r
        if request.method not in _REQUEST:
            raise MetaInvalidArgument(f"Forward: {request.method!r} is not a forwardable method "
                                      f"({sorted(_REQUEST)})")
        members = set(r.node.conf().voters) | set(r.node.conf().learners)
        if request.from_id not in members:
            raise MetaUnknownMember(f"Forward: replica {request.from_id} is not a member of this group "
                                    f"(members {sorted(members)})")
        if request.timeout_ms == 0:
            raise MetaInvalidArgument("Forward: timeout_ms must be above 0")
        try:
            inner = _REQUEST[request.method].FromString(request.request)
        except (DecodeError, ValueError, TypeError) as exc:
            raise MetaInvalidArgument(f"Forward: malformed {request.method} request: {exc}") from None
        if not r.is_leader():
            lead = r.node.leader
            where = f"leader {lead} at {r.address_of(lead)}" if lead else "leader unknown"
            raise MetaForwardRefused(f"replica {r.id} is not the leader ({where}); a forwarded request is "
                                     f"not forwarded again")
        timeout = min(request.timeout_ms / 1000.0, MAX_FORWARD_TIMEOUT_S)
        reply = r.servicer.serve_local(request.method, inner, timeout)
        return pb.ForwardReply(reply=reply.SerializeToString())


def _node_records(nodes: dict) -> list:
    return [pb.NodeRecord(id=n.node_id, address=n.address, role=n.role) for _i, n in sorted(nodes.items())]


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - that call's reply
        return exc


def _header(ctx, leader: Optional[str]) -> None:
    if leader and ctx is not None and hasattr(ctx, "send_header"):
        ctx.send_header(LEADER_HEADER, leader)
