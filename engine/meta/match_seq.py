"""MatchSeq (the CAS condition of an upsert) and the value operations DELETE and AS_IS."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from logtide.engine.meta.meta_format import U64_MAX
from logtide.errors import MetaInvalidArgument


def check_u64(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise MetaInvalidArgument(f"{name} must be an int, got {type(v).__name__}")
    if not 0 <= v <= U64_MAX:
        raise MetaInvalidArgument(f"{name} must be a u64, got {v}")
    return v


@dataclass(frozen=True)
class Exact:
    """Match only if the key's seq is exactly `seq`; a missing key has seq 0, so Exact(0) = insert-if-absent."""
    seq: int

    def __post_init__(self):
        check_u64("Exact seq", self.seq)

    def matches(self, cur_seq: int) -> bool:
        return cur_seq == self.seq


@dataclass(frozen=True)
class GE:
    """Match if the key's seq is >= `seq`; GE(1) means the key exists."""
    seq: int

    def __post_init__(self):
        check_u64("GE seq", self.seq)

    def matches(self, cur_seq: int) -> bool:
        return cur_seq >= self.seq


class _Any:
    """Match whatever the key's seq is."""
    _inst = None

    def __new__(cls):
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def matches(self, cur_seq: int) -> bool:
        return True

    def __repr__(self) -> str:
        return "ANY"

    def __reduce__(self):
        return (_Any, ())


ANY = _Any()


class _ValueOp:
    """A value that is an operation rather than bytes."""
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self):
        return (_value_op, (self.name,))


DELETE = _ValueOp("DELETE")   # remove the key (takes no seq)
AS_IS = _ValueOp("AS_IS")     # keep the value, rewrite only the meta (takes a seq)


def _value_op(name: str) -> _ValueOp:
    return DELETE if name == "DELETE" else AS_IS


MatchSeq = Union[Exact, GE, _Any]
