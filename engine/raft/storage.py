"""The stable log a Raft node reads: the Storage interface and MemoryStorage.

The core only reads storage. The driver writes it: after making a Ready durable it appends the
Ready's entries (and installs its snapshot) here, then calls advance(). MemoryStorage is the
simulator's copy of what is on disk; the disk-backed storage implements the same methods.
Index 0 is a sentinel: a fresh log has first_index 1 and last_index 0.
"""
from __future__ import annotations

from typing import Protocol

from logtide.engine.raft.errors import CompactedError, UnavailableError
from logtide.engine.raft.messages import ENTRY_CONF, ConfState, Entry, HardState, Snapshot, SnapshotMeta


class Storage(Protocol):
    def initial_state(self) -> tuple[HardState, ConfState]:
        """The persisted hard state, and the membership at the snapshot (first_index - 1)."""

    def conf_entries(self) -> list[Entry]:
        """The membership-change entries in the log (after the snapshot), oldest first. The log is
        the only record of changes after the snapshot, so no separate file can disagree with it."""

    def entries(self, lo: int, hi: int, max_size: int) -> list[Entry]:
        """Entries [lo, hi), at least one, at most max_size bytes after the first."""

    def term(self, index: int) -> int:
        """The term of entry `index` (also of the snapshot's last index)."""

    def first_index(self) -> int:
        """The first index still available (snapshot index + 1)."""

    def last_index(self) -> int:
        ...

    def snapshot(self) -> Snapshot:
        """The latest snapshot (to send to a follower that is behind the compaction point)."""


def limit_size(ents: list[Entry], max_size: int) -> list[Entry]:
    """The longest prefix of ents within max_size bytes, but never empty."""
    if len(ents) <= 1:
        return ents
    size = ents[0].size()
    for i in range(1, len(ents)):
        size += ents[i].size()
        if size > max_size:
            return ents[:i]
    return ents


def founding_entries(voters) -> list[Entry]:
    """Entries 1..n of a new group: ADD_VOTER of each founder, in id order, at term 1."""
    from logtide.engine.raft.messages import ADD_VOTER, ConfChange
    return [Entry(1, k + 1, ENTRY_CONF, ConfChange(ADD_VOTER, v).encode()) for k, v in enumerate(sorted(voters))]


class MemoryStorage:
    """An in-memory Storage. ents[0] is a dummy entry at the snapshot's (index, term)."""

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snap = Snapshot()
        self.ents: list[Entry] = [Entry(0, 0)]

    @classmethod
    def bootstrap(cls, voters) -> "MemoryStorage":
        """The log every founding member starts with: one committed ADD_VOTER entry per founder
        (term 1). The founders' membership is in the log itself, so a member added later learns
        it by replication like any other change."""
        st = cls()
        st.ents.extend(founding_entries(voters))
        st.hard_state = HardState(1, 0, len(st.ents) - 1)
        return st

    def copy(self) -> "MemoryStorage":
        st = MemoryStorage()
        st.hard_state = HardState(self.hard_state.term, self.hard_state.vote, self.hard_state.commit)
        st.snap = self.snap
        st.ents = list(self.ents)
        return st

    def initial_state(self) -> tuple[HardState, ConfState]:
        return self.hard_state, self.snap.meta.conf

    def conf_entries(self) -> list[Entry]:
        return [e for e in self.ents[1:] if e.type == ENTRY_CONF]

    def set_hard_state(self, hs: HardState) -> None:
        self.hard_state = HardState(hs.term, hs.vote, hs.commit)

    def first_index(self) -> int:
        return self.ents[0].index + 1

    def last_index(self) -> int:
        return self.ents[0].index + len(self.ents) - 1

    def term(self, index: int) -> int:
        off = self.ents[0].index
        if index < off:
            raise CompactedError(f"index {index} is compacted (first index {off + 1})")
        if index - off >= len(self.ents):
            raise UnavailableError(f"index {index} is beyond the last index {self.last_index()}")
        return self.ents[index - off].term

    def entries(self, lo: int, hi: int, max_size: int = 1 << 62) -> list[Entry]:
        off = self.ents[0].index
        if lo <= off:
            raise CompactedError(f"index {lo} is compacted (first index {off + 1})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"entries [{lo}, {hi}) go beyond the last index {self.last_index()}")
        return limit_size(self.ents[lo - off: hi - off], max_size)

    def snapshot(self) -> Snapshot:
        return self.snap

    def append(self, ents: list[Entry]) -> None:
        """Append entries, replacing any conflicting suffix (ents are contiguous)."""
        if not ents:
            return
        first = self.first_index()
        if ents[-1].index < first:
            return
        if ents[0].index < first:  # already compacted part
            ents = ents[first - ents[0].index:]
        off = ents[0].index - self.ents[0].index
        if off > len(self.ents):
            raise UnavailableError(f"missing log entry: last index {self.last_index()}, appending at {ents[0].index}")
        del self.ents[off:]
        self.ents.extend(ents)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Install a received snapshot: the whole log is replaced by it."""
        if snap.meta.index <= self.snap.meta.index:
            return
        self.snap = snap
        self.ents = [Entry(snap.meta.term, snap.meta.index)]

    def create_snapshot(self, index: int, conf: ConfState, data: bytes) -> Snapshot:
        """Record a snapshot of the state machine at `index` (<= the applied index)."""
        if index <= self.snap.meta.index:
            return self.snap
        if index > self.last_index():
            raise UnavailableError(f"snapshot index {index} is beyond the last index {self.last_index()}")
        self.snap = Snapshot(SnapshotMeta(index, self.term(index), conf), data)
        return self.snap

    def compact(self, index: int) -> None:
        """Drop entries up to `index` (which must be covered by a snapshot)."""
        off = self.ents[0].index
        if index <= off:
            return
        if index > self.last_index():
            raise UnavailableError(f"compact({index}) is beyond the last index {self.last_index()}")
        self.ents = self.ents[index - off:]
        self.ents[0] = Entry(self.ents[0].term, self.ents[0].index)  # the dummy keeps only (index, term)
