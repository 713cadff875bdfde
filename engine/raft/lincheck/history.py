"""A client history: each operation with its input, output, and the times it was called and returned.

An operation that timed out has output UNKNOWN and return time INF: it may have taken effect at any
point after its call, or never.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
INF = math.inf


@dataclass(frozen=True)
class Operation:
    client: int
    input: Any
    call: float
    output: Any = UNKNOWN
    ret: float = INF

    @property
    def timed_out(self) -> bool:
        return self.output is UNKNOWN
