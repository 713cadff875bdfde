"""Python values <-> meta.proto messages, both ways, for the servicer and the client.

Requests are rebuilt into the validating command classes (command.py), so a malformed message is
refused with MetaInvalidArgument exactly like a bad argument to the embedded API.
"""
from __future__ import annotations

from typing import Optional

from logtide.engine.meta import meta_pb2 as pb
from logtide.engine.meta.command import (
    BoolExpr, Branch, Condition, DeleteByPrefixOp, DeleteOp, FetchAddU64Op, GetOp, MetaSpec, PutOp,
    PutSequentialOp, TxnCmd, UpsertCmd, make_spec)
from logtide.engine.meta.match_seq import ANY, AS_IS, DELETE, GE, Exact
from logtide.engine.meta.meta_format import EXPR_ALL, TARGET_VALUE
from logtide.engine.meta.seqv import KVMeta, SeqV
from logtide.engine.meta.txn_reply import (
    TxnDeleteByPrefixResponse, TxnDeleteResponse, TxnFetchAddU64Response, TxnGetResponse, TxnPutResponse, TxnReply)
from logtide.engine.meta.watch import WatchEvent
from logtide.errors import MetaInvalidArgument


def _opt(msg, field: str):
    return getattr(msg, field) if msg.HasField(field) else None


# ---------------------------------------------------------------- SeqV

def seqv_to_pb(v: Optional[SeqV], out) -> None:
    """Fill the SeqV message `out` (a sub-message field) unless v is None."""
    if v is None:
        return
    out.SetInParent()
    out.seq = v.seq
    out.data = v.data
    if v.meta.expire_at_ms is not None:
        out.expire_at_ms = v.meta.expire_at_ms
    if v.meta.proposed_at_ms is not None:
        out.proposed_at_ms = v.meta.proposed_at_ms


def seqv_from_pb(parent, field: str) -> Optional[SeqV]:
    if not parent.HasField(field):
        return None
    m = getattr(parent, field)
    return SeqV(m.seq, m.data, KVMeta(_opt(m, "expire_at_ms"), _opt(m, "proposed_at_ms")))


# ---------------------------------------------------------------- specs

def _spec_to(spec: Optional[MetaSpec], out) -> None:
    if spec is None:
        return
    if spec.ttl_ms is not None:
        out.ttl_ms = spec.ttl_ms
    if spec.expire_at is not None:
        out.expire_at = spec.expire_at


def _spec_from(m) -> Optional[MetaSpec]:
    return make_spec(_opt(m, "ttl_ms"), _opt(m, "expire_at"))


# ---------------------------------------------------------------- upsert

def upsert_to_pb(cmd: UpsertCmd) -> pb.UpsertRequest:
    r = pb.UpsertRequest(key=cmd.key)
    if cmd.value is DELETE:
        r.delete = True
    elif cmd.value is AS_IS:
        r.as_is = True
    else:
        r.update = cmd.value
    if isinstance(cmd.match_seq, Exact):
        r.match_seq.exact = cmd.match_seq.seq
    elif isinstance(cmd.match_seq, GE):
        r.match_seq.ge = cmd.match_seq.seq
    _spec_to(cmd.spec, r)
    return r


def upsert_from_pb(r: pb.UpsertRequest) -> UpsertCmd:
    kind = r.WhichOneof("value")
    if kind is None:
        raise MetaInvalidArgument("an upsert needs a value: update, delete or as_is")
    value = {"update": lambda: r.update, "delete": lambda: DELETE, "as_is": lambda: AS_IS}[kind]()
    if kind in ("delete", "as_is") and not getattr(r, kind):
        raise MetaInvalidArgument(f"{kind} must be true when set")
    m = r.match_seq.WhichOneof("kind") if r.HasField("match_seq") else None
    match = ANY if m is None else (Exact(r.match_seq.exact) if m == "exact" else GE(r.match_seq.ge))
    return UpsertCmd(r.key, value, match, _spec_from(r))


def upsert_reply_to_pb(leader: str, prev, result) -> pb.UpsertReply:
    out = pb.UpsertReply(leader=leader or "")
    if prev is not None:
        seqv_to_pb(prev, out.prev)
    if result is not None:
        seqv_to_pb(result, out.result)
    return out


def upsert_reply_from_pb(r: pb.UpsertReply):
    return seqv_from_pb(r, "prev"), seqv_from_pb(r, "result")


# ---------------------------------------------------------------- conditions and expressions

def _cond_to(c: Condition, out) -> None:
    out.key, out.target, out.op = c.key, c.target, c.op
    if c.target == TARGET_VALUE:
        out.value = c.arg
    else:
        out.number = c.arg


def _cond_from(m) -> Condition:
    arg = m.value if m.WhichOneof("arg") == "value" else m.number
    if (m.target == TARGET_VALUE) != (m.WhichOneof("arg") == "value"):
        raise MetaInvalidArgument(f"condition on {m.target!r} has the wrong kind of operand")
    return Condition(m.key, m.target, m.op, arg)


def _expr_to(e, out) -> None:
    if isinstance(e, Condition):
        _cond_to(e, out.cond)
        return
    dst = out.all if e.kind == EXPR_ALL else getattr(out, "any")
    dst.SetInParent()
    for item in e.items:
        _expr_to(item, dst.items.add())


def _expr_from(m):
    kind = m.WhichOneof("node")
    if kind == "cond":
        return _cond_from(m.cond)
    if kind is None:
        raise MetaInvalidArgument("an expression needs cond, all or any")
    return BoolExpr(kind, tuple(_expr_from(i) for i in getattr(m, kind).items))


# ---------------------------------------------------------------- ops

def _op_to(o, out) -> None:
    if isinstance(o, GetOp):
        out.get.key = o.key
    elif isinstance(o, PutOp):
        out.put.key, out.put.value = o.key, o.value
        _spec_to(o.spec, out.put)
        if o.match_seq is not None:
            out.put.match_seq = o.match_seq
    elif isinstance(o, DeleteOp):
        out.delete.key = o.key
        if o.match_seq is not None:
            out.delete.match_seq = o.match_seq
    elif isinstance(o, DeleteByPrefixOp):
        out.delete_by_prefix.prefix = o.prefix
    elif isinstance(o, FetchAddU64Op):
        out.fetch_add_u64.key, out.fetch_add_u64.delta = o.key, o.delta
        if o.match_seq is not None:
            out.fetch_add_u64.match_seq = o.match_seq
    elif isinstance(o, PutSequentialOp):
        ps = out.put_sequential
        ps.prefix, ps.sequence_key, ps.value = o.prefix, o.sequence_key, o.value
        _spec_to(o.spec, ps)


def _op_from(m):
    kind = m.WhichOneof("op")
    if kind == "get":
        return GetOp(m.get.key)
    if kind == "put":
        return PutOp(m.put.key, m.put.value, _spec_from(m.put), _opt(m.put, "match_seq"))
    if kind == "delete":
        return DeleteOp(m.delete.key, _opt(m.delete, "match_seq"))
    if kind == "delete_by_prefix":
        return DeleteByPrefixOp(m.delete_by_prefix.prefix)
    if kind == "fetch_add_u64":
        f = m.fetch_add_u64
        return FetchAddU64Op(f.key, f.delta, _opt(f, "match_seq"))
    if kind == "put_sequential":
        p = m.put_sequential
        return PutSequentialOp(p.prefix, p.sequence_key, p.value, _spec_from(p))
    raise MetaInvalidArgument("a txn op needs one of get, put, delete, delete_by_prefix, fetch_add_u64, "
                              "put_sequential")


def txn_to_pb(cmd: TxnCmd) -> pb.TxnRequest:
    r = pb.TxnRequest()
    for c in cmd.conditions:
        _cond_to(c, r.conditions.add())
    for o in cmd.if_then:
        _op_to(o, r.if_then.add())
    for o in cmd.else_then:
        _op_to(o, r.else_then.add())
    for b in cmd.branches:
        mb = r.branches.add()
        if b.predicate is not None:
            _expr_to(b.predicate, mb.predicate)
        for o in b.ops:
            _op_to(o, mb.ops.add())
    return r


def txn_from_pb(r: pb.TxnRequest) -> TxnCmd:
    branches = tuple(Branch(_expr_from(b.predicate) if b.HasField("predicate") else None,
                            tuple(_op_from(o) for o in b.ops)) for b in r.branches)
    return TxnCmd(tuple(_cond_from(c) for c in r.conditions), tuple(_op_from(o) for o in r.if_then),
                  tuple(_op_from(o) for o in r.else_then), branches)


def txn_reply_to_pb(leader: str, reply: TxnReply) -> pb.TxnReply:
    out = pb.TxnReply(leader=leader or "", success=reply.success, execution_path=reply.execution_path)
    for x in reply.responses:
        m = out.responses.add()
        if isinstance(x, TxnGetResponse):
            m.get.key = x.key
            seqv_to_pb(x.value, m.get.value)
        elif isinstance(x, TxnPutResponse):
            m.put.key = x.key
            seqv_to_pb(x.prev, m.put.prev)
            seqv_to_pb(x.current, m.put.current)
        elif isinstance(x, TxnDeleteResponse):
            m.delete.key, m.delete.success = x.key, x.success
            seqv_to_pb(x.prev, m.delete.prev)
        elif isinstance(x, TxnDeleteByPrefixResponse):
            m.delete_by_prefix.prefix, m.delete_by_prefix.count = x.prefix, x.count
        else:
            f = m.fetch_add_u64
            f.key, f.before_seq, f.before, f.after_seq, f.after = x.key, x.before_seq, x.before, x.after_seq, x.after
    return out


def txn_reply_from_pb(r: pb.TxnReply) -> TxnReply:
    out = []
    for m in r.responses:
        kind = m.WhichOneof("response")
        if kind == "get":
            out.append(TxnGetResponse(m.get.key, seqv_from_pb(m.get, "value")))
        elif kind == "put":
            out.append(TxnPutResponse(m.put.key, seqv_from_pb(m.put, "prev"), seqv_from_pb(m.put, "current")))
        elif kind == "delete":
            out.append(TxnDeleteResponse(m.delete.key, m.delete.success, seqv_from_pb(m.delete, "prev")))
        elif kind == "delete_by_prefix":
            out.append(TxnDeleteByPrefixResponse(m.delete_by_prefix.prefix, m.delete_by_prefix.count))
        else:
            f = m.fetch_add_u64
            out.append(TxnFetchAddU64Response(f.key, f.before_seq, f.before, f.after_seq, f.after))
    return TxnReply(r.success, tuple(out), r.execution_path)


# ---------------------------------------------------------------- watch

def event_to_pb(leader: str, e: WatchEvent) -> pb.WatchEvent:
    out = pb.WatchEvent(leader=leader or "", is_initialization=e.is_initialization, index=e.index, pos=e.pos)
    if e.key is not None:
        out.key = e.key
    if e.prev is not None:
        seqv_to_pb(e.prev, out.prev)
    if e.current is not None:
        seqv_to_pb(e.current, out.current)
    return out


def event_from_pb(m: pb.WatchEvent) -> WatchEvent:
    return WatchEvent(_opt(m, "key"), seqv_from_pb(m, "prev"), seqv_from_pb(m, "current"), m.is_initialization,
                      m.index, m.pos)
