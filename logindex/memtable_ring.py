"""The ring of LogIndex memtables: FREE -> ACTIVE -> INACTIVE -> FLUSHED -> (reused) ACTIVE."""
from __future__ import annotations

from enum import Enum

from logtide._ext.memtable import Memtable


class State(str, Enum):
    FREE = "FREE"
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    FLUSHED = "FLUSHED"


class MemtableRing:
    """Fixed memtables reused in table-id order; at most one ACTIVE."""

    def __init__(self, size: int, max_segments: int):
        if size < 2:
            raise ValueError(f"the memtable ring needs at least 2 memtables, got {size}")
        self.max_segments = max_segments
        self.tables = [Memtable(0, max_segments) for _ in range(size)]
        self.state = [State.FREE] * size
        self.live: list[int] = []      # non-FREE slots, oldest table id first
        self.version = 0               # bumped on every change of states or of the live list
        self.released_lsn = 0          # the largest LSN of a memtable that left the live list

    def __len__(self) -> int:
        return len(self.tables)

    def active(self) -> Memtable | None:
        if self.live and self.state[self.live[-1]] is State.ACTIVE:
            return self.tables[self.live[-1]]
        return None

    def take(self, table_id: int) -> Memtable | None:
        """Make a FREE (or else the oldest FLUSHED) memtable ACTIVE under table_id; None if neither exists."""
        self.version += 1
        assert self.active() is None
        slot = next((i for i, s in enumerate(self.state) if s is State.FREE), None)
        if slot is None:
            slot = next((i for i in self.live if self.state[i] is State.FLUSHED), None)
            if slot is None:
                return None
            self._release(slot)
        self.tables[slot].reset(table_id)
        self.state[slot] = State.ACTIVE
        self.live.append(slot)
        return self.tables[slot]

    def grow(self) -> None:
        """Add one FREE memtable (RO nodes, which cannot flush, grow instead of waiting)."""
        self.version += 1
        self.tables.append(Memtable(0, self.max_segments))
        self.state.append(State.FREE)

    def seal(self) -> Memtable | None:
        """ACTIVE -> INACTIVE."""
        self.version += 1
        m = self.active()
        if m is not None:
            self.state[self.live[-1]] = State.INACTIVE
        return m

    def inactive(self) -> list[Memtable]:
        return [self.tables[i] for i in self.live if self.state[i] is State.INACTIVE]

    def _release(self, slot: int) -> None:
        """A FLUSHED memtable leaves the live list: its rows are now served by the saved tables only."""
        m = self.tables[slot]
        if len(m):
            self.released_lsn = max(self.released_lsn, m.max_lsn)
        self.live.remove(slot)

    def mark_flushed_covered(self, covered) -> None:
        """RO: the oldest INACTIVE memtables for which covered(memtable) holds become FLUSHED, in
        order, stopping at the first that is not covered."""
        self.version += 1
        for i in self.live:
            if self.state[i] is State.FLUSHED:
                continue
            if self.state[i] is not State.INACTIVE or not covered(self.tables[i]):
                return
            self.state[i] = State.FLUSHED

    def mark_flushed(self, upto_table_id: int) -> None:
        """INACTIVE memtables with table id <= upto_table_id become FLUSHED."""
        self.version += 1
        for i in self.live:
            if self.state[i] is State.INACTIVE and self.tables[i].table_id <= upto_table_id:
                self.state[i] = State.FLUSHED

    def drop_below(self, table_id: int) -> None:
        """FLUSHED memtables with a table id below table_id become FREE (their tables were truncated)."""
        self.version += 1
        for i in list(self.live):
            if self.state[i] is State.FLUSHED and self.tables[i].table_id < table_id:
                self._release(i)
                self.state[i] = State.FREE

    def live_tables(self) -> list[Memtable]:
        """Every non-FREE memtable, oldest table id first."""
        return [self.tables[i] for i in self.live]

    def states(self) -> list[tuple[int, str]]:
        return [(self.tables[i].table_id, self.state[i].value) for i in self.live]
