"""Batch replay of a run of full WAL records into a buffer pool (crash recovery and promotion).

The records' block references come from the Cython meta decoder as arrays; pages are pinned once
per chunk (not once per record), and Cython redo applies every (page, record) entry of the chunk
without the GIL. No Python object is made per record.
"""
from __future__ import annotations

import numpy as np

from logtide._ext import redo
from logtide._ext import xlogwriter as xw


def block_refs(blob: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tags (k, 5) uint32, record index (k,)) of every block reference of back-to-back records."""
    metas, moffs = xw.wal_meta_many(blob, offsets)
    return redo.meta_tags(metas, moffs)


def replay_into_pool(pool, load, blob: np.ndarray, offsets: np.ndarray, lsns: np.ndarray,
                     tags: np.ndarray, rec: np.ndarray) -> int:
    """Apply every block reference (tags[i] of record rec[i]) to its page in `pool`, in order.

    Pages are loaded with `load(tag, frame)` on a miss and marked dirty with the LSN that first
    changed them. Returns the number of (page, record) entries applied (the rest were skipped by
    page LSN). Raises CorruptWALRecordError / RedoError on the first bad entry.
    """
    n = len(tags)
    if not n:
        return 0
    chunk = max(1, pool.capacity // 2)  # each entry pins at most one new page
    starts = offsets[:-1].astype(np.int64)[rec]
    ends = offsets[1:].astype(np.int64)[rec]
    elsn = lsns[rec].astype(np.uint64)
    applied = 0
    for a in range(0, n, chunk):
        z = min(n, a + chunk)
        t = np.ascontiguousarray(tags[a:z])
        uniq, inv = np.unique(t, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        frames = []
        try:
            for u in uniq.tolist():
                frames.append(pool.pin(tuple(u), load)[0])
            rows = np.asarray(frames, dtype=np.int64)[inv]
            res, k, bad = redo.apply_ranges(pool.frames, rows, t, blob, starts[a:z], ends[a:z], elsn[a:z])
            if bad >= 0:
                redo.raise_for(int(res[bad]), int(elsn[a + bad]))
            applied += k
            done = res == redo.APPLIED
            if done.any():
                first = np.full(len(uniq), np.iinfo(np.uint64).max, dtype=np.uint64)
                np.minimum.at(first, inv[done], elsn[a:z][done])
                for j in np.nonzero(first != np.iinfo(np.uint64).max)[0].tolist():
                    pool.mark_dirty(frames[j], int(first[j]))
        finally:
            for f in frames:
                pool.unpin(f)
    return applied
