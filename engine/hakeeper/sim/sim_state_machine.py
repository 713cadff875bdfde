"""HAKeeperSimStateMachine: a HAKeeperStateMachine as the simulator's replicas run it.

Entries are `p<N>;` + a HAKeeper command (the simulator's proposal id, then the command bytes).
The digest after each entry is the CRC of the whole HAKeeper state's snapshot bytes, so the
simulator's state-machine safety check compares HAKeeper states at every applied index, across
snapshots too. A refused command (a typed HAKeeper error) is applied as a no-op, the same on
every replica; the count of each is part of the digest.
"""
from __future__ import annotations

import io
import struct
import zlib

from logtide.engine.hakeeper.state_machine import HAKeeperStateMachine
from logtide.engine.raft.messages import ENTRY_NORMAL, Entry
from logtide.engine.statemachine import Entry as SMEntry
from logtide.errors import HAKeeperError

_HEAD = struct.Struct(">QQ")   # index, refused commands


class HAKeeperSimStateMachine:
    __slots__ = ("index", "digest", "hk", "refused", "last_result")

    def __init__(self, index: int = 0, hk: HAKeeperStateMachine | None = None, refused: int = 0) -> None:
        self.index = index
        self.hk = hk or HAKeeperStateMachine()
        self.refused = refused
        self.last_result = None
        self.digest = self.state_digest()

    def state_digest(self) -> int:
        return zlib.crc32(self.hk.snapshot_bytes(), self.refused)

    def apply(self, e: Entry) -> None:
        if e.index != self.index + 1:
            raise AssertionError(f"applied entry {e.index} after {self.index}: a gap or a repeat")
        self.index = e.index
        if e.type == ENTRY_NORMAL and e.data:
            _pid, _, cmd = e.data.partition(b";")
            try:
                self.last_result = self.hk.update(SMEntry(e.index, cmd))
            except HAKeeperError as exc:
                self.refused += 1
                self.last_result = exc
            self.digest = self.state_digest()

    def save(self) -> bytes:
        buf = io.BytesIO()
        self.hk.save_snapshot(buf)
        return _HEAD.pack(self.index, self.refused) + buf.getvalue()

    @classmethod
    def restore(cls, data: bytes, index: int) -> "HAKeeperSimStateMachine":
        if not data:
            return cls(index)
        i, refused = _HEAD.unpack_from(data)
        hk = HAKeeperStateMachine()
        hk.recover_from_snapshot(io.BytesIO(data[_HEAD.size:]))
        return cls(i, hk, refused)
