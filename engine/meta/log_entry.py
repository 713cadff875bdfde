"""The meta-service log entry {time_ms, cmd}: canonical JSON bytes (docs/meta_format.md).

The encoding is deterministic (sorted keys, no whitespace, base64 bytes), so one command always
has one byte form, and replicas applying the same bytes reach the same state.
"""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Tuple

from logtide.engine.meta import meta_format as F
from logtide.engine.meta.command import (
    Branch, BoolExpr, Command, Condition, DeleteByPrefixOp, DeleteOp, FetchAddU64Op, GetOp, MetaSpec, PutOp,
    PutSequentialOp, TxnCmd, UpsertCmd)
from logtide.engine.meta.match_seq import ANY, AS_IS, DELETE, GE, Exact, check_u64
from logtide.engine.meta.node_info import AddNodeCmd, NodeInfo, RemoveNodeCmd
from logtide.errors import CorruptionError, MetaInvalidArgument


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(s) -> bytes:
    if not isinstance(s, str):
        raise MetaInvalidArgument(f"expected base64 text, got {type(s).__name__}")
    try:
        return base64.b64decode(s.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise MetaInvalidArgument(f"bad base64: {exc}") from None


# ------------------------------------------------------------------ to plain objects

def _spec_obj(spec):
    if spec is None:
        return None
    return {"ttl_ms": spec.ttl_ms, "expire_at": spec.expire_at}


def _match_obj(m):
    if isinstance(m, Exact):
        return [F.MATCH_EXACT, m.seq]
    if isinstance(m, GE):
        return [F.MATCH_GE, m.seq]
    return None


def _cond_obj(c: Condition):
    arg = _b64(c.arg) if c.target == F.TARGET_VALUE else c.arg
    return {"key": c.key, "target": c.target, "op": c.op, "arg": arg}


def _expr_obj(e):
    if isinstance(e, Condition):
        return {"cond": _cond_obj(e)}
    return {e.kind: [_expr_obj(i) for i in e.items]}


def _op_obj(o):
    if isinstance(o, GetOp):
        return {F.OP_GET: {"key": o.key}}
    if isinstance(o, PutOp):
        return {F.OP_PUT: {"key": o.key, "value": _b64(o.value), "spec": _spec_obj(o.spec), "match_seq": o.match_seq}}
    if isinstance(o, DeleteOp):
        return {F.OP_DELETE: {"key": o.key, "match_seq": o.match_seq}}
    if isinstance(o, DeleteByPrefixOp):
        return {F.OP_DELETE_BY_PREFIX: {"prefix": o.prefix}}
    if isinstance(o, FetchAddU64Op):
        return {F.OP_FETCH_ADD_U64: {"key": o.key, "delta": o.delta, "match_seq": o.match_seq}}
    if isinstance(o, PutSequentialOp):
        return {F.OP_PUT_SEQUENTIAL: {"prefix": o.prefix, "sequence_key": o.sequence_key, "value": _b64(o.value),
                                      "spec": _spec_obj(o.spec)}}
    raise MetaInvalidArgument(f"not an op: {o!r}")


def command_to_obj(cmd: Command) -> dict:
    """A command as JSON-ready plain objects."""
    if isinstance(cmd, UpsertCmd):
        if cmd.value is DELETE:
            value: Any = F.VALUE_DELETE
        elif cmd.value is AS_IS:
            value = F.VALUE_AS_IS
        else:
            value = {F.VALUE_UPDATE: _b64(cmd.value)}
        return {F.CMD_UPSERT: {"key": cmd.key, "value": value, "match_seq": _match_obj(cmd.match_seq),
                               "spec": _spec_obj(cmd.spec)}}
    if isinstance(cmd, TxnCmd):
        return {F.CMD_TXN: {
            "conditions": [_cond_obj(c) for c in cmd.conditions],
            "if_then": [_op_obj(o) for o in cmd.if_then],
            "else_then": [_op_obj(o) for o in cmd.else_then],
            "branches": [{"predicate": None if b.predicate is None else _expr_obj(b.predicate),
                          "ops": [_op_obj(o) for o in b.ops]} for b in cmd.branches],
        }}
    if isinstance(cmd, AddNodeCmd):
        n = cmd.node
        return {F.CMD_ADD_NODE: {"node": {"id": n.node_id, "address": n.address, "role": n.role},
                                 "overriding": cmd.overriding}}
    if isinstance(cmd, RemoveNodeCmd):
        return {F.CMD_REMOVE_NODE: {"id": cmd.node_id}}
    raise MetaInvalidArgument(f"not a command: {cmd!r}")


# ------------------------------------------------------------------ from plain objects (validating)

def _dict(o, what: str) -> dict:
    if not isinstance(o, dict):
        raise MetaInvalidArgument(f"{what} must be an object, got {type(o).__name__}")
    return o


def _list(o, what: str) -> list:
    if not isinstance(o, list):
        raise MetaInvalidArgument(f"{what} must be a list, got {type(o).__name__}")
    return o


def _one(o, what: str) -> Tuple[str, Any]:
    d = _dict(o, what)
    if len(d) != 1:
        raise MetaInvalidArgument(f"{what} must have exactly one field, got {sorted(d)}")
    return next(iter(d.items()))


def _spec_from(o):
    if o is None:
        return None
    d = _dict(o, "spec")
    return MetaSpec(d.get("ttl_ms"), d.get("expire_at"))


def _match_from(o):
    if o is None:
        return ANY
    m = _list(o, "match_seq")
    if len(m) != 2 or m[0] not in (F.MATCH_EXACT, F.MATCH_GE):
        raise MetaInvalidArgument(f"match_seq must be null, [exact, n] or [ge, n], got {m!r}")
    return Exact(m[1]) if m[0] == F.MATCH_EXACT else GE(m[1])


def _cond_from(o) -> Condition:
    d = _dict(o, "condition")
    target = d.get("target")
    arg = _unb64(d.get("arg")) if target == F.TARGET_VALUE else d.get("arg")
    return Condition(d.get("key"), target, d.get("op"), arg)


def _expr_from(o):
    kind, body = _one(o, "expression")
    if kind == "cond":
        return _cond_from(body)
    if kind not in (F.EXPR_ALL, F.EXPR_ANY):
        raise MetaInvalidArgument(f"expression kind must be cond, all or any, got {kind!r}")
    return BoolExpr(kind, tuple(_expr_from(i) for i in _list(body, kind)))


def _op_from(o):
    kind, b = _one(o, "op")
    b = _dict(b, kind)
    if kind == F.OP_GET:
        return GetOp(b.get("key"))
    if kind == F.OP_PUT:
        return PutOp(b.get("key"), _unb64(b.get("value")), _spec_from(b.get("spec")), b.get("match_seq"))
    if kind == F.OP_DELETE:
        return DeleteOp(b.get("key"), b.get("match_seq"))
    if kind == F.OP_DELETE_BY_PREFIX:
        return DeleteByPrefixOp(b.get("prefix"))
    if kind == F.OP_FETCH_ADD_U64:
        return FetchAddU64Op(b.get("key"), b.get("delta"), b.get("match_seq"))
    if kind == F.OP_PUT_SEQUENTIAL:
        return PutSequentialOp(b.get("prefix"), b.get("sequence_key"), _unb64(b.get("value")),
                               _spec_from(b.get("spec")))
    raise MetaInvalidArgument(f"unknown op {kind!r}")


def command_from_obj(o) -> Command:
    """Rebuild a command from plain objects; anything malformed raises MetaInvalidArgument."""
    kind, body = _one(o, "command")
    body = _dict(body, kind)
    if kind == F.CMD_UPSERT:
        v = body.get("value")
        if v == F.VALUE_DELETE:
            value: Any = DELETE
        elif v == F.VALUE_AS_IS:
            value = AS_IS
        else:
            k, data = _one(v, "value")
            if k != F.VALUE_UPDATE:
                raise MetaInvalidArgument(f"value must be {{update: ...}}, delete or as_is, got {k!r}")
            value = _unb64(data)
        return UpsertCmd(body.get("key"), value, _match_from(body.get("match_seq")), _spec_from(body.get("spec")))
    if kind == F.CMD_TXN:
        branches = []
        for b in _list(body.get("branches", []), "branches"):
            b = _dict(b, "branch")
            p = b.get("predicate")
            branches.append(Branch(None if p is None else _expr_from(p),
                                   tuple(_op_from(x) for x in _list(b.get("ops", []), "ops"))))
        return TxnCmd(tuple(_cond_from(c) for c in _list(body.get("conditions", []), "conditions")),
                      tuple(_op_from(x) for x in _list(body.get("if_then", []), "if_then")),
                      tuple(_op_from(x) for x in _list(body.get("else_then", []), "else_then")),
                      tuple(branches))
    if kind == F.CMD_ADD_NODE:
        n = _dict(body.get("node"), "node")
        return AddNodeCmd(NodeInfo(n.get("id"), n.get("address"), n.get("role")), body.get("overriding", True))
    if kind == F.CMD_REMOVE_NODE:
        return RemoveNodeCmd(body.get("id"))
    raise MetaInvalidArgument(f"unknown command {kind!r}")


# ------------------------------------------------------------------ the entry

def dumps(obj) -> bytes:
    """Canonical JSON: one byte form per value."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_entry(time_ms: int, cmd: Command) -> bytes:
    """The log payload of one proposal."""
    check_u64("time_ms", time_ms)
    return dumps({F.ENTRY_VER: F.ENTRY_VERSION, F.ENTRY_TIME: time_ms, F.ENTRY_CMD: command_to_obj(cmd)})


def decode_entry(payload: bytes) -> Tuple[int, Command]:
    """(time_ms, cmd) of a log payload; damaged or foreign bytes raise CorruptionError."""
    try:
        obj = json.loads(bytes(payload).decode("utf-8"))
        d = _dict(obj, "log entry")
        if d.get(F.ENTRY_VER) != F.ENTRY_VERSION:
            raise MetaInvalidArgument(f"unknown entry version {d.get(F.ENTRY_VER)!r}")
        return check_u64("time_ms", d.get(F.ENTRY_TIME)), command_from_obj(d.get(F.ENTRY_CMD))
    except (UnicodeDecodeError, json.JSONDecodeError, MetaInvalidArgument, RecursionError) as exc:
        raise CorruptionError(f"meta log entry is not decodable: {exc}") from None


