"""The commands a log entry carries: an upsert or a transaction, and the parts they are built from.

Every constructor validates its arguments, so a command that exists is well-formed; the same
classes are built by the API, by the log decoder and by the RPC server.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple, Union

from logtide.engine.meta.match_seq import ANY, GE, Exact, MatchSeq, _Any, _ValueOp, check_u64
from logtide.engine.meta.meta_format import (
    MAX_KEY_BYTES, MAX_OPS_PER_TXN, MAX_VALUE_BYTES, OPERATORS, SEQUENTIAL_KEY_DIGITS, TARGET_PREFIX_COUNT, TARGET_SEQ,
    TARGET_VALUE, EXPR_ALL, EXPR_ANY)
from logtide.errors import MetaInvalidArgument


# ---------------------------------------------------------------- argument checks

def check_key(key, name: str = "key", allow_empty: bool = True) -> str:
    if not isinstance(key, str):
        raise MetaInvalidArgument(f"{name} must be a str, got {type(key).__name__}")
    try:
        n = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise MetaInvalidArgument(f"{name} is not valid unicode: {exc}") from None
    if n > MAX_KEY_BYTES:
        raise MetaInvalidArgument(f"{name} is {n} bytes, the limit is {MAX_KEY_BYTES}")
    if not allow_empty and n == 0:
        raise MetaInvalidArgument(f"{name} must not be empty")
    return key


def check_value(value, name: str = "value") -> bytes:
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise MetaInvalidArgument(f"{name} must be bytes, got {type(value).__name__}")
    if len(value) > MAX_VALUE_BYTES:
        raise MetaInvalidArgument(f"{name} is {len(value)} bytes, the limit is {MAX_VALUE_BYTES}")
    return value


def check_optional_u64(name: str, v) -> Optional[int]:
    return None if v is None else check_u64(name, v)


def check_match_seq(m) -> MatchSeq:
    if m is None:
        return ANY
    if isinstance(m, (Exact, GE, _Any)):
        return m
    raise MetaInvalidArgument(f"match_seq must be Exact(n), GE(n) or ANY, got {m!r}")


def check_operator(o) -> str:
    if o not in OPERATORS:
        raise MetaInvalidArgument(f"operator must be one of {OPERATORS}, got {o!r}")
    return o


# ---------------------------------------------------------------- expiry spec

@dataclass(frozen=True)
class MetaSpec:
    """What the writer asked for: a ttl relative to the entry's time, or an absolute expire_at (s or ms)."""
    ttl_ms: Optional[int] = None
    expire_at: Optional[int] = None

    def __post_init__(self):
        check_optional_u64("ttl_ms", self.ttl_ms)
        check_optional_u64("expire_at", self.expire_at)
        if self.ttl_ms is not None and self.expire_at is not None:
            raise MetaInvalidArgument("give ttl_ms or expire_at, not both")


def make_spec(ttl_ms, expire_at) -> Optional[MetaSpec]:
    if ttl_ms is None and expire_at is None:
        return None
    return MetaSpec(ttl_ms, expire_at)


# ---------------------------------------------------------------- upsert

@dataclass(frozen=True)
class UpsertCmd:
    key: str
    value: Union[bytes, _ValueOp]
    match_seq: MatchSeq = ANY
    spec: Optional[MetaSpec] = None

    def __post_init__(self):
        check_key(self.key)
        if not isinstance(self.value, _ValueOp):
            object.__setattr__(self, "value", check_value(self.value))
        object.__setattr__(self, "match_seq", check_match_seq(self.match_seq))
        if self.spec is not None and not isinstance(self.spec, MetaSpec):
            raise MetaInvalidArgument("spec must be a MetaSpec")


# ---------------------------------------------------------------- conditions

@dataclass(frozen=True)
class Condition:
    """Compare a key's seq or value, or the number of keys under a prefix, with an operator."""
    key: str
    target: str
    op: str
    arg: Union[int, bytes]

    def __post_init__(self):
        check_key(self.key)
        check_operator(self.op)
        if self.target == TARGET_VALUE:
            object.__setattr__(self, "arg", check_value(self.arg, "condition value"))
        elif self.target in (TARGET_SEQ, TARGET_PREFIX_COUNT):
            check_u64(f"condition {self.target}", self.arg)
        else:
            raise MetaInvalidArgument(f"condition target must be seq, value or prefix_count, got {self.target!r}")


@dataclass(frozen=True)
class BoolExpr:
    """cond.all(...) / cond.any(...): a predicate over conditions and nested expressions."""
    kind: str
    items: Tuple[Union[Condition, "BoolExpr"], ...]

    def __post_init__(self):
        if self.kind not in (EXPR_ALL, EXPR_ANY):
            raise MetaInvalidArgument(f"expression kind must be all or any, got {self.kind!r}")
        items = tuple(self.items)
        for it in items:
            if not isinstance(it, (Condition, BoolExpr)):
                raise MetaInvalidArgument(f"cond.{self.kind} takes conditions or cond.all/cond.any, got {it!r}")
        object.__setattr__(self, "items", items)


class cond:
    """Condition builders: cond.seq, cond.value, cond.prefix_count, cond.all, cond.any."""

    @staticmethod
    def seq(key: str, operator: str, seq: int) -> Condition:
        return Condition(key, TARGET_SEQ, operator, seq)

    @staticmethod
    def value(key: str, operator: str, value: bytes) -> Condition:
        return Condition(key, TARGET_VALUE, operator, value)

    @staticmethod
    def prefix_count(prefix: str, operator: str, count: int) -> Condition:
        return Condition(prefix, TARGET_PREFIX_COUNT, operator, count)

    @staticmethod
    def all(*items) -> BoolExpr:
        return BoolExpr(EXPR_ALL, items)

    @staticmethod
    def any(*items) -> BoolExpr:
        return BoolExpr(EXPR_ANY, items)


# ---------------------------------------------------------------- ops

@dataclass(frozen=True)
class GetOp:
    key: str

    def __post_init__(self):
        check_key(self.key)


@dataclass(frozen=True)
class PutOp:
    key: str
    value: bytes
    spec: Optional[MetaSpec] = None
    match_seq: Optional[int] = None

    def __post_init__(self):
        check_key(self.key)
        object.__setattr__(self, "value", check_value(self.value))
        check_optional_u64("match_seq", self.match_seq)


@dataclass(frozen=True)
class DeleteOp:
    key: str
    match_seq: Optional[int] = None

    def __post_init__(self):
        check_key(self.key)
        check_optional_u64("match_seq", self.match_seq)


@dataclass(frozen=True)
class DeleteByPrefixOp:
    prefix: str

    def __post_init__(self):
        check_key(self.prefix, "prefix")


@dataclass(frozen=True)
class FetchAddU64Op:
    key: str
    delta: int
    match_seq: Optional[int] = None

    def __post_init__(self):
        check_key(self.key)
        if isinstance(self.delta, bool) or not isinstance(self.delta, int) or not -(1 << 63) <= self.delta < (1 << 63):
            raise MetaInvalidArgument(f"delta must be an int64, got {self.delta!r}")
        check_optional_u64("match_seq", self.match_seq)


@dataclass(frozen=True)
class PutSequentialOp:
    prefix: str
    sequence_key: str
    value: bytes
    spec: Optional[MetaSpec] = None

    def __post_init__(self):
        check_key(self.prefix, "prefix")
        if len(self.prefix.encode("utf-8")) + SEQUENTIAL_KEY_DIGITS > MAX_KEY_BYTES:
            # the key it makes (prefix + the counter's digits) must be a key get() accepts
            raise MetaInvalidArgument(f"prefix is {len(self.prefix.encode('utf-8'))} bytes: with the "
                                      f"{SEQUENTIAL_KEY_DIGITS} digits the key would pass the limit of {MAX_KEY_BYTES}")
        check_key(self.sequence_key, "sequence_key")
        object.__setattr__(self, "value", check_value(self.value))


TxnOp = Union[GetOp, PutOp, DeleteOp, DeleteByPrefixOp, FetchAddU64Op, PutSequentialOp]
_OP_TYPES = (GetOp, PutOp, DeleteOp, DeleteByPrefixOp, FetchAddU64Op, PutSequentialOp)


class op:
    """Txn op builders: op.get, op.put, op.delete, op.delete_by_prefix, op.fetch_add_u64, op.put_sequential."""

    @staticmethod
    def get(key: str) -> GetOp:
        return GetOp(key)

    @staticmethod
    def put(key: str, value: bytes, ttl_ms: Optional[int] = None, expire_at: Optional[int] = None,
            match_seq: Optional[int] = None) -> PutOp:
        return PutOp(key, value, make_spec(ttl_ms, expire_at), match_seq)

    @staticmethod
    def delete(key: str, match_seq: Optional[int] = None) -> DeleteOp:
        return DeleteOp(key, match_seq)

    @staticmethod
    def delete_by_prefix(prefix: str) -> DeleteByPrefixOp:
        return DeleteByPrefixOp(prefix)

    @staticmethod
    def fetch_add_u64(key: str, delta: int, match_seq: Optional[int] = None) -> FetchAddU64Op:
        return FetchAddU64Op(key, delta, match_seq)

    @staticmethod
    def put_sequential(prefix: str, sequence_key: str, value: bytes, ttl_ms: Optional[int] = None,
                       expire_at: Optional[int] = None) -> PutSequentialOp:
        return PutSequentialOp(prefix, sequence_key, value, make_spec(ttl_ms, expire_at))


def _check_ops(name: str, ops) -> Tuple[TxnOp, ...]:
    if ops is None:
        return ()
    if isinstance(ops, (str, bytes)) or not isinstance(ops, (list, tuple)):
        raise MetaInvalidArgument(f"{name} must be a list of ops, got {type(ops).__name__}")
    for o in ops:
        if not isinstance(o, _OP_TYPES):
            raise MetaInvalidArgument(f"{name} holds {o!r}, which is not an op (use op.get, op.put, ...)")
    return tuple(ops)


@dataclass(frozen=True)
class Branch:
    """Run `ops` if `predicate` holds (None: always). The first branch that holds wins."""
    predicate: Optional[Union[BoolExpr, Condition]]
    ops: Sequence[TxnOp] = field(default_factory=tuple)

    def __post_init__(self):
        p = self.predicate
        if isinstance(p, Condition):
            p = BoolExpr(EXPR_ALL, (p,))
        if p is not None and not isinstance(p, BoolExpr):
            raise MetaInvalidArgument(f"a branch predicate is cond.all/cond.any or a condition, got {p!r}")
        object.__setattr__(self, "predicate", p)
        object.__setattr__(self, "ops", _check_ops("branch ops", self.ops))


@dataclass(frozen=True)
class TxnCmd:
    conditions: Tuple[Condition, ...] = ()
    if_then: Tuple[TxnOp, ...] = ()
    else_then: Tuple[TxnOp, ...] = ()
    branches: Tuple[Branch, ...] = ()

    def __post_init__(self):
        conds = self.conditions or ()
        if isinstance(conds, (str, bytes)) or not isinstance(conds, (list, tuple)):
            raise MetaInvalidArgument(f"conditions must be a list, got {type(conds).__name__}")
        for c in conds:
            if not isinstance(c, Condition):
                raise MetaInvalidArgument(f"conditions holds {c!r}, which is not a condition (use cond.seq, ...)")
        branches = self.branches or ()
        if isinstance(branches, (str, bytes)) or not isinstance(branches, (list, tuple)):
            raise MetaInvalidArgument(f"branches must be a list, got {type(branches).__name__}")
        for b in branches:
            if not isinstance(b, Branch):
                raise MetaInvalidArgument(f"branches holds {b!r}, which is not a Branch")
        object.__setattr__(self, "conditions", tuple(conds))
        object.__setattr__(self, "if_then", _check_ops("if_then", self.if_then))
        object.__setattr__(self, "else_then", _check_ops("else_then", self.else_then))
        object.__setattr__(self, "branches", tuple(branches))
        size = (len(self.conditions) + len(self.if_then) + len(self.else_then)
                + sum(1 + len(b.ops) for b in self.branches))
        if size > MAX_OPS_PER_TXN:
            raise MetaInvalidArgument(f"a transaction holds {size} conditions/ops, the limit is {MAX_OPS_PER_TXN}")


from logtide.engine.meta.node_info import AddNodeCmd, RemoveNodeCmd  # noqa: E402 - commands of their own file

Command = Union[UpsertCmd, TxnCmd, AddNodeCmd, RemoveNodeCmd]
