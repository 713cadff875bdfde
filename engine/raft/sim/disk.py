"""The simulated disk of one node: what survives a crash.

`live` is the storage the running node reads (everything written, synced or not); `durable` is
what a crash leaves. A Ready is written in DiskStorage.save's order, and a crash during the write
keeps a prefix of its steps (docs/raft.md, "What a crash leaves"):

    SNAP_STATE   a received snapshot's image and state file (term, vote, commit = its index);
                 the old log stays, and is kept on restart only if it continues the snapshot
    SNAP_LOG     the fresh, empty log after the snapshot
    ENTRIES      the conflicting suffix cut, then some prefix of the entries (all of them once
                 the step completes)
    HARD_STATE   the state file, when the term or vote changed

A Ready that needs no sync (only the commit index moved) reaches `live` only, so a crash forgets
it. bug="state-before-entries" writes the hard state (with its commit index) before the entries,
as DiskStorage once did: the simulator must catch it (docs/raft.md, cause 2).
"""
from __future__ import annotations

import random

from logtide.engine.raft.errors import CompactedError, UnavailableError
from logtide.engine.raft.messages import Entry, HardState
from logtide.engine.raft.storage import MemoryStorage

SNAP_STATE, SNAP_LOG, ENTRIES, HARD_STATE = 1, 2, 3, 4
ALL_STEPS = HARD_STATE
DISK_BUGS = ("state-before-entries",)


def _snapshot_state(store: MemoryStorage, rd) -> None:
    """The snapshot's image and state file are written; the old log is still there."""
    meta = rd.snapshot.meta
    if meta.index <= store.snap.meta.index:
        return
    try:
        continues = store.term(meta.index) == meta.term
    except (CompactedError, UnavailableError):
        continues = False
    store.snap = rd.snapshot
    if continues:  # what DiskStorage.open keeps: a log that holds the snapshot's last entry
        store.compact(meta.index)
    else:
        store.ents = [Entry(meta.term, meta.index)]
    hs = rd.hard_state or store.hard_state
    store.hard_state = HardState(hs.term, hs.vote, meta.index)


def _entries(store: MemoryStorage, ents: list[Entry], n: int) -> None:
    """Cut the suffix the entries replace, then append the first n of them."""
    first = ents[0].index
    if first <= store.last_index():
        off = first - store.ents[0].index
        if off >= 1:
            del store.ents[off:]
    store.append(ents[:n])


def _hard_state(store: MemoryStorage, hs: HardState) -> None:
    """DiskStorage writes its state file only when the term or the vote changed."""
    old = store.hard_state
    if hs.term != old.term or hs.vote != old.vote:
        store.set_hard_state(hs)


def write_ready(store: MemoryStorage, rd, steps: int = ALL_STEPS, n_entries: int | None = None,
                bug: str | None = None, torn_cut: int | None = None) -> None:
    """Write rd to `store` up to `steps` (and the first n_entries of ENTRIES when it is cut there).
    torn_cut: stopped inside the cut of the suffix rd's entries replace, with the old log kept
    below index torn_cut (DiskStorage removes a replaced tail segment by segment, the last first).
    Those old entries are uncommitted (a leader is replacing them), so keeping a prefix of them
    is a state a follower may have had; the simulator does not draw it yet."""
    if bug == "state-before-entries":
        _write_state_first(store, rd, steps, n_entries)
        return
    if rd.snapshot is not None:
        if steps < SNAP_STATE:
            return
        _snapshot_state(store, rd)
        if steps < SNAP_LOG:
            return
        meta = rd.snapshot.meta
        store.ents = [Entry(meta.term, meta.index)]
    if steps < ENTRIES:
        return
    if rd.entries and steps == ENTRIES and torn_cut is not None:
        first = rd.entries[0].index
        if first <= torn_cut <= store.last_index() and torn_cut - store.ents[0].index >= 1:
            del store.ents[torn_cut - store.ents[0].index:]
        return
    if rd.entries:
        n = len(rd.entries) if steps > ENTRIES or n_entries is None else n_entries
        _entries(store, rd.entries, n)
    if steps >= HARD_STATE and rd.hard_state is not None:
        _hard_state(store, rd.hard_state)


def _write_state_first(store: MemoryStorage, rd, steps: int, n_entries: int | None) -> None:
    """The old order: snapshot, the hard state with the Ready's commit index, then the entries."""
    if steps >= SNAP_STATE and rd.snapshot is not None:
        store.apply_snapshot(rd.snapshot)
    if steps >= SNAP_LOG and rd.hard_state is not None:
        store.set_hard_state(rd.hard_state)
    if steps >= ENTRIES and rd.entries:
        n = len(rd.entries) if steps > ENTRIES or n_entries is None else n_entries
        _entries(store, rd.entries, n)


class SimDisk:
    def __init__(self, durable: MemoryStorage, rng: random.Random, delay: tuple[int, int],
                 bug: str | None = None) -> None:
        self.durable = durable
        self.rng = rng
        self.delay = delay  # (lo, hi) time units per synced write: a slow disk has a large range
        self.bug = bug

    def write_time(self, rd) -> int:
        return self.rng.randint(*self.delay) if rd.must_sync else 0

    def complete(self, live: MemoryStorage, rd) -> None:
        """The write of rd finished: it is in the live storage, and durable when it was synced."""
        write_ready(live, rd)
        if rd.hard_state is not None:  # what DiskStorage keeps in memory (and writes with its next state file)
            live.set_hard_state(rd.hard_state)
        if rd.must_sync:
            write_ready(self.durable, rd, bug=self.bug)

    def torn(self, rd) -> None:
        """A crash during the write of rd: a prefix of its steps reached the platter."""
        steps = self.rng.randint(0, ALL_STEPS)
        n = self.rng.randint(0, len(rd.entries)) if rd.entries else None
        write_ready(self.durable, rd, steps, n, bug=self.bug)
