"""The simulated disk of one node: what survives a crash.

`live` is the storage the running node reads (everything written, synced or not); `durable` is
what a crash leaves. A Ready is written in the real storage's order (snapshot, then hard state,
then entries) and becomes durable only when its write completes; a crash before that keeps a
random prefix of those steps. A Ready that needs no sync (only the commit index moved) reaches
`live` only, so a crash forgets it.
"""
from __future__ import annotations

import random

from logtide.engine.raft.storage import MemoryStorage


def write_ready(store: MemoryStorage, rd, steps: int = 3, n_entries: int | None = None) -> None:
    if steps >= 1 and rd.snapshot is not None:
        store.apply_snapshot(rd.snapshot)
    if steps >= 2 and rd.hard_state is not None:
        store.set_hard_state(rd.hard_state)
    if steps >= 3 and rd.entries:
        ents = rd.entries if n_entries is None else rd.entries[:n_entries]
        store.append(ents)


class SimDisk:
    def __init__(self, durable: MemoryStorage, rng: random.Random, delay: tuple[int, int]) -> None:
        self.durable = durable
        self.rng = rng
        self.delay = delay  # (lo, hi) time units per synced write: a slow disk has a large range

    def write_time(self, rd) -> int:
        return self.rng.randint(*self.delay) if rd.must_sync else 0

    def complete(self, live: MemoryStorage, rd) -> None:
        """The write of rd finished: it is in the live storage, and durable when it was synced."""
        write_ready(live, rd)
        if rd.must_sync:
            write_ready(self.durable, rd)

    def torn(self, rd) -> None:
        """A crash during the write of rd: some prefix of it may have reached the platter."""
        steps = self.rng.randint(0, 3)
        n = self.rng.randint(0, len(rd.entries)) if rd.entries else None
        write_ready(self.durable, rd, steps, n)
