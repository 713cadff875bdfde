"""Redo of a run of WAL page by page into a buffer pool: the recovery path.

The block references of the run are sorted by page (LSN order kept within each page), so each page
is pinned once per run rather than once per chunk of references in LSN order, and one Cython call
applies every reference of a chunk of pages, each to its own page only (the per-page redo filter
the Spark tasks use). Python works per page and per chunk, never per record. A record's CRC is
checked once, at the first of its references to be applied, not once per page it touches.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from logtide._ext import redo
from logtide._ext.located_redo import apply_located

_NONE = np.iinfo(np.uint64).max


def page_order(tags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): `order` sorts the (n, 5) tags by page, stably (a page's references keep
    their LSN order); page j's references are order[starts[j]:starts[j + 1]]."""
    n = len(tags)
    if not n:
        return np.empty(0, np.int64), np.zeros(1, np.int64)
    t = np.ascontiguousarray(tags, dtype=np.uint32)
    order = np.lexsort((t[:, 4], t[:, 3], t[:, 2], t[:, 1], t[:, 0]))   # lexsort is stable
    s = t[order]
    new = np.ones(n, bool)
    new[1:] = np.any(s[1:] != s[:-1], axis=1)
    return order, np.append(np.nonzero(new)[0], n).astype(np.int64)


def first_applied(order: np.ndarray, lsns: np.ndarray) -> np.ndarray:
    """uint8 flags over the page-ordered references: 1 at the first one of each record (the
    references of a record are consecutive in `lsns`, which is in LSN order)."""
    n = len(order)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    rec = np.flatnonzero(np.r_[True, lsns[1:] != lsns[:-1]])
    first = np.zeros(n, np.uint8)
    first[np.minimum.reduceat(pos, rec)] = 1
    return first


def redo_pages(pool, load: Callable[[tuple, np.ndarray], None], bufs: list, buf_id: np.ndarray, tags: np.ndarray,
               lsns: np.ndarray, rec_off: np.ndarray, rec_len: np.ndarray, *, checked_through: int = 0) -> int:
    """Apply block reference i (the record at bufs[buf_id[i]][rec_off[i]:rec_off[i] + rec_len[i]],
    LSN lsns[i], in LSN order) to page tags[i] in `pool`; pages are loaded with `load(tag, frame)`
    on a miss and marked dirty with the first LSN that changed them. Returns the references applied
    (the rest were skipped by page LSN). Raises CorruptWALRecordError / RedoError on the first bad one.
    Records up to `checked_through` were checked against their CRC-32C already (the log's open)."""
    order, starts = page_order(tags)
    if not len(order):
        return 0
    t = np.ascontiguousarray(tags[order], dtype=np.uint32)
    b_all = np.ascontiguousarray(buf_id[order], dtype=np.int32)
    o_all = np.ascontiguousarray(rec_off[order], dtype=np.int64)
    n_all = np.ascontiguousarray(rec_len[order], dtype=np.int64)
    l_all = np.ascontiguousarray(lsns[order], dtype=np.uint64)
    if checked_through and int(l_all.max()) <= checked_through:    # the log's open summed them all
        check = np.zeros(len(l_all), np.uint8)
    else:
        check = first_applied(order, np.asarray(lsns))
        if checked_through:                      # those the open summed with their frames
            check[l_all <= checked_through] = 0
    npages = len(starts) - 1
    chunk = max(1, pool.capacity // 2)   # pages pinned at once: the pool keeps room for others
    applied = 0
    for p0 in range(0, npages, chunk):
        p1 = min(npages, p0 + chunk)
        a, z = int(starts[p0]), int(starts[p1])
        frames = []
        try:
            for tag in t[starts[p0:p1]].tolist():
                frames.append(pool.pin(tuple(tag), load)[0])
            counts = np.diff(starts[p0:p1 + 1])
            rows = np.repeat(np.asarray(frames, np.int64), counts)
            res, k, bad = apply_located(pool.frames, rows, t[a:z], bufs, b_all[a:z], o_all[a:z], n_all[a:z],
                                        l_all[a:z], check[a:z])
            if bad >= 0:
                redo.raise_for(int(res[bad]), int(l_all[a + bad]))
            applied += k
            # a page's first applied reference is its smallest applied LSN (LSN order within a page)
            first = np.minimum.reduceat(np.where(res == redo.APPLIED, l_all[a:z], _NONE), starts[p0:p1] - a)
            for j in np.nonzero(first != _NONE)[0].tolist():
                pool.mark_dirty(frames[j], int(first[j]))
        finally:
            for f in frames:
                pool.unpin(f)
    return applied
