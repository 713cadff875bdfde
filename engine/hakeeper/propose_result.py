"""The bytes of a proposal's result, as HAKeeper's Propose reply carries it.

`kind u8 | body`, in hakeeper_format's integers and lists: 1 a number (sign u8, magnitude u64:
a tick, the commands a batch took, or STALE_BATCH), 2 a flag (InitialCluster), 3 a heartbeat's
schedule commands (a list of schedule commands, their bytes as in a ScheduleCommandBatch).
"""
from __future__ import annotations

from typing import Any

from logtide.engine.hakeeper.hakeeper_format import Reader, Writer
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.errors import MalformedCommandError

NUMBER, FLAG, COMMANDS = 1, 2, 3


def encode_result(value: Any) -> bytes:
    w = Writer()
    if isinstance(value, bool):
        w.u8(FLAG, "kind")
        w.boolean(value, "flag")
    elif isinstance(value, int):
        w.u8(NUMBER, "kind")
        w.u8(1 if value < 0 else 0, "sign")
        w.u64(abs(value), "number")
    elif isinstance(value, (tuple, list)) and all(isinstance(c, ScheduleCommand) for c in value):
        w.u8(COMMANDS, "kind")
        w.count(len(value), "commands")
        for c in value:
            c.encode_to(w)
    else:
        raise MalformedCommandError(f"not a HAKeeper result: {type(value).__name__}")
    return w.getvalue()


def decode_result(data: bytes) -> Any:
    """An int, a bool or a tuple of ScheduleCommand; MalformedCommandError on bad bytes."""
    r = Reader(bytes(data))
    kind = r.u8("kind")
    if kind == FLAG:
        out: Any = r.boolean("flag")
    elif kind == NUMBER:
        sign = r.u8("sign")
        out = -r.u64("number") if sign else r.u64("number")
    elif kind == COMMANDS:
        out = tuple(ScheduleCommand.decode_from(r) for _ in range(r.count("commands")))
    else:
        raise MalformedCommandError(f"unknown HAKeeper result kind {kind}")
    r.end()
    return out
