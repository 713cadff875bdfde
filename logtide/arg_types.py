"""argparse `type=` checks for numeric options (seconds, counts, sizes) where zero, a negative
number, NaN or infinity makes no sense: a bad value becomes argparse's usage error naming the option.

(Not in logtide.commands: every module there is loaded as a subcommand group.)"""
from __future__ import annotations

import argparse
import math
from typing import Callable


def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return v


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds of a tick, an interval, a timeout)."""
    v = _number(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return v


def tick_seconds(text: str) -> float:
    """A Raft tick in seconds: finite and at least nodehost.node.MIN_TICK_INTERVAL (a shorter one
    only spins the driver)."""
    from logtide.engine.nodehost.node import MIN_TICK_INTERVAL    # on use: it loads the Raft driver
    v = _number(text)
    if v < MIN_TICK_INTERVAL:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= {MIN_TICK_INTERVAL:g}, got {text!r}")
    return v


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (where 0 has a documented meaning, such as "none" or "never")."""
    v = _number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return v


def int_at_least(low: int) -> Callable[[str], int]:
    """The argparse type of an integer >= `low`."""
    def check(text: str) -> int:
        v = _integer(text)
        if v < low:
            raise argparse.ArgumentTypeError(f"must be an integer at least {low}, got {text!r}")
        return v
    return check


positive_int = int_at_least(1)        # a count of entries, processes, shards
non_negative_int = int_at_least(0)    # a count or rate where 0 means "none"
# a Raft election timeout: more ticks than the leader's heartbeat interval (nodehost.node.HEARTBEAT_TICK, 1)
election_tick = int_at_least(2)


def lsn(text: str) -> int:
    """An LSN as X/X in hex or a u64 integer (logindex.pgwal.parse_lsn)."""
    from logtide.logindex.pgwal import parse_lsn    # on use: it loads the WAL decoder
    try:
        return parse_lsn(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
