"""Primary crash recovery: at open, the WAL after the last checkpoint is redone onto the stored pages.

The control file holds the consistent LSN of the last checkpoint (every change at or below it is
on storage) and the next xid. The log after it is read in big runs and redone into the buffer
pool (page_redo.py: each page is pinned once per run); the WAL the LogIndex has not saved yet is
indexed again. The whole log is durable at open, so recovered pages may be flushed (evicted)
during the redo like any other.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from logtide.replay.buffer_pool import BufferPool
from logtide.replay.control_file import Control
from logtide.replay.page_index import PageIndex
from logtide.replay.page_redo import redo_pages
from logtide.replay.page_store import PageStore
from logtide.replay.row_address import DB, SPC
from logtide.replay.wal_log import WalLog

RECOVERY_RUN_BYTES = 64 << 20   # WAL read and redone at a time at open
RECOVERY_RUN_MAPPED = 1 << 30   # the same when the log is read in place: no copy held, fewer pins per page


@dataclass
class Recovered:
    records: int                  # WAL records redone
    consistent_lsn: int           # every change at or below it is on storage
    next_xid: int                 # above every xid in the control file and the log
    rel_blocks: dict[int, int]    # relation -> blocks, stored or referenced by the log


def recover(ctl: Control, store: PageStore, wal: WalLog, index: PageIndex, pool: BufferPool,
            latest: int, checked_through: int = 0) -> Recovered:
    """Redo the WAL after the checkpoint's consistent LSN up to `latest` (the log's newest LSN) onto
    the stored pages in `pool`, and index the WAL the LogIndex has not saved yet. checked_through:
    the log's open checked the records up to this LSN against their own CRC-32C (LogService
    check_records); the redo checks only those after it."""
    rel_blocks: dict[int, int] = {}
    for spc, db, rel, fork in store.relations():
        if (spc, db, fork) == (SPC, DB, 0):
            rel_blocks[rel] = store.nblocks(spc, db, rel, fork)
    next_xid = ctl.next_xid
    first = wal.first_lsn()
    index_from = max(index.replay_needed_from(), first)
    redo_from = max(ctl.consistent_lsn + 1, first)
    n = 0
    lsn = min(index_from, redo_from)
    run = RECOVERY_RUN_MAPPED if wal.reads_in_place else RECOVERY_RUN_BYTES
    while lsn <= latest:
        # big runs: each page is pinned once per run (page_redo.py), so fewer runs, fewer pins
        refs = wal.read_refs(lsn, run)
        if refs is None:
            break
        tags, rl = refs.tags, refs.lsn
        keep = rl >= index_from
        index.add(tags[keep], rl[keep])
        next_xid = max(next_xid, refs.max_xid + 1)
        ours = (tags[:, 0] == SPC) & (tags[:, 1] == DB) & (tags[:, 3] == 0)
        for r in np.unique(tags[ours, 2]).tolist():
            top = int(tags[ours & (tags[:, 2] == r), 4].max()) + 1
            rel_blocks[r] = max(rel_blocks.get(r, 0), top)
        todo = rl >= redo_from
        redo_pages(pool, store.read_into, refs.bufs, refs.buf_id[todo], tags[todo], rl[todo], refs.rec_off[todo],
                   refs.rec_len[todo], checked_through=checked_through)
        n += max(0, min(refs.next_lsn - 1, latest) - max(lsn, redo_from) + 1)
        lsn = refs.next_lsn
    low = pool.min_rec_lsn()
    return Recovered(n, max(ctl.consistent_lsn, latest if low == 0 else low - 1), next_xid, rel_blocks)
