"""The timestamp oracle: hands out disjoint, increasing ranges of u64 timestamps.

It reserves a window ahead through the state machine (persisted) and serves from memory inside
it, so a restart resumes above everything it may have handed out. The counter is in C
(_ext/tso_window.pyx): the TN's commits take their ts without a Python frame.
"""
from __future__ import annotations

from typing import Callable

from logtide._ext.tso_window import TsoWindow

TSO_WINDOW = 1 << 16


class TSO(TsoWindow):
    """`get(count)`: the first of `count` timestamps now owned by the caller; `close()`: no more."""

    def __init__(self, limit: int, reserve: Callable[[int], None], window: int = TSO_WINDOW) -> None:
        super().__init__(limit, reserve, window)
