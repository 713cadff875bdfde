"""The simulator's state machine: a running digest of every applied command, snapshot-able.

Two replicas that applied the same commands in the same order have the same (index, digest), so
comparing digests per index checks state-machine safety through snapshots too.
"""
from __future__ import annotations

import struct
import zlib

from logtide.engine.raft.messages import ENTRY_NORMAL, Entry

_SNAP = struct.Struct(">QI")


class SimStateMachine:
    __slots__ = ("index", "digest")

    def __init__(self, index: int = 0, digest: int = 0) -> None:
        self.index = index
        self.digest = digest

    def apply(self, e: Entry) -> None:
        if e.index != self.index + 1:
            raise AssertionError(f"applied entry {e.index} after {self.index}: a gap or a repeat")
        self.index = e.index
        if e.type == ENTRY_NORMAL and e.data:
            self.digest = zlib.crc32(e.data, self.digest ^ e.index)

    def save(self) -> bytes:
        return _SNAP.pack(self.index, self.digest)

    @classmethod
    def restore(cls, data: bytes, index: int) -> "SimStateMachine":
        if not data:
            return cls(index, 0)
        i, d = _SNAP.unpack(data)
        return cls(i, d)
