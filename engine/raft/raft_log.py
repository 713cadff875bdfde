"""RaftLog: the node's view of its log = stable storage + the unstable tail not yet persisted.

Entries enter the unstable tail (proposed, or received from the leader), go out in a Ready, and
become stable when the driver calls advance() after persisting them. A received snapshot is
unstable the same way until it is persisted.
"""
from __future__ import annotations

from logtide.engine.raft.errors import CompactedError, UnavailableError
from logtide.engine.raft.messages import Entry, Snapshot
from logtide.engine.raft.storage import limit_size


class RaftLog:
    __slots__ = ("storage", "unstable", "offset", "pending_snapshot", "committed", "applied", "max_apply_size")

    def __init__(self, storage, max_apply_size: int = 1 << 62) -> None:
        self.storage = storage
        self.unstable: list[Entry] = []
        self.offset = storage.last_index() + 1  # index of unstable[0]
        self.pending_snapshot: Snapshot | None = None
        first = storage.first_index()
        self.committed = first - 1
        self.applied = first - 1
        self.max_apply_size = max_apply_size

    # --- bounds --------------------------------------------------------------------------------

    def first_index(self) -> int:
        if self.pending_snapshot is not None:
            return self.pending_snapshot.meta.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        if self.unstable:
            return self.offset + len(self.unstable) - 1
        if self.pending_snapshot is not None:
            return self.pending_snapshot.meta.index
        return self.storage.last_index()

    def stable_last_index(self) -> int:
        """The last index that is durable (the leader's own match counts only these)."""
        if self.pending_snapshot is not None:
            return self.pending_snapshot.meta.index
        return min(self.storage.last_index(), self.offset - 1)

    def last_term(self) -> int:
        return self.term(self.last_index())

    def term(self, i: int) -> int:
        """The term of entry i; raises CompactedError / UnavailableError outside the log."""
        off = self.offset
        if i >= off:
            k = i - off
            if k < len(self.unstable):
                return self.unstable[k].term
            raise UnavailableError(f"index {i} is beyond the last index {self.last_index()}")
        snap = self.pending_snapshot
        if snap is not None:
            if i == snap.meta.index:
                return snap.meta.term
            if i < snap.meta.index:
                raise CompactedError(f"index {i} is below the pending snapshot at {snap.meta.index}")
            raise UnavailableError(f"index {i} is beyond the pending snapshot at {snap.meta.index}")
        return self.storage.term(i)

    def term_or_zero(self, i: int) -> int:
        try:
            return self.term(i)
        except (CompactedError, UnavailableError):
            return 0

    def match_term(self, i: int, t: int) -> bool:
        return self.term_or_zero(i) == t

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Is a candidate's log (last_index, last_term) at least as up-to-date as ours (Raft §5.4.1)?"""
        lt = self.last_term()
        return last_term > lt or (last_term == lt and last_index >= self.last_index())

    # --- reading entries -------------------------------------------------------------------------

    def slice(self, lo: int, hi: int, max_size: int = 1 << 62) -> list[Entry]:
        """Entries [lo, hi) (at least one if lo < hi), at most max_size bytes."""
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise CompactedError(f"index {lo} is compacted (first index {self.first_index()})")
        if hi > self.last_index() + 1:
            raise UnavailableError(f"slice [{lo}, {hi}) beyond the last index {self.last_index()}")
        off = self.offset
        ents: list[Entry] = []
        if lo < off:
            ents = self.storage.entries(lo, min(hi, off), max_size)
            if len(ents) < min(hi, off) - lo:  # cut by the size limit
                return ents
        if hi > off:
            ents = ents + self.unstable[max(lo, off) - off: hi - off]
        return limit_size(ents, max_size)

    def entries_from(self, i: int, max_size: int) -> list[Entry]:
        if i > self.last_index():
            return []
        return self.slice(i, self.last_index() + 1, max_size)

    # --- appending -------------------------------------------------------------------------------

    def append(self, ents: list[Entry]) -> int:
        """Append (possibly replacing a conflicting unstable/stable suffix); returns the last index."""
        if not ents:
            return self.last_index()
        after = ents[0].index - 1
        if after < self.committed:
            raise AssertionError(f"append after {after} would overwrite committed entries (commit {self.committed})")
        off = self.offset
        if after + 1 == off + len(self.unstable):
            self.unstable.extend(ents)
        elif after + 1 <= off:
            # replacing part of the stable log: the new tail starts at after + 1
            self.offset = after + 1
            self.unstable = list(ents)
        else:
            del self.unstable[after + 1 - off:]
            self.unstable.extend(ents)
        return self.last_index()

    def find_conflict(self, ents: list[Entry]) -> int:
        """The index of the first entry whose term differs from ours (or which we lack); 0 if none."""
        for e in ents:
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest (i, term(i)) with i <= index and term(i) <= term: where a leader may retry."""
        first = self.first_index()
        while index >= first - 1:
            try:
                t = self.term(index)
            except (CompactedError, UnavailableError):
                return index, 0
            if t <= term:
                return index, t
            index -= 1
        return index, 0

    def commit_to(self, c: int) -> None:
        if c > self.committed:
            if c > self.last_index():
                raise AssertionError(f"commit {c} is beyond the last index {self.last_index()}")
            self.committed = c

    def maybe_commit(self, index: int, term: int) -> bool:
        """Commit up to index if it is from `term` (a leader commits only entries of its own term)."""
        if index > self.committed and self.term_or_zero(index) == term:
            self.committed = index
            return True
        return False

    # --- persistence hand-off ----------------------------------------------------------------------

    def stable_to(self, last: int) -> None:
        """The unstable entries up to `last` are durable and in storage now."""
        n = last + 1 - self.offset
        if n > 0:
            del self.unstable[:n]
            self.offset = last + 1

    def restore(self, snap: Snapshot) -> None:
        """Replace the whole log with a received snapshot (persisted with the next Ready)."""
        self.pending_snapshot = snap
        self.unstable = []
        self.offset = snap.meta.index + 1
        self.committed = snap.meta.index

    def snapshot_stable(self) -> None:
        self.pending_snapshot = None

    def next_committed(self, hi: int) -> list[Entry]:
        """Committed entries after applied, up to min(committed, hi), to hand to the state machine."""
        lo = self.applied + 1
        hi = min(self.committed, hi)
        if lo > hi:
            return []
        return self.slice(lo, hi + 1, self.max_apply_size)

    def applied_to(self, i: int) -> None:
        if i > self.applied:
            self.applied = i
