"""The pages plan's lookup: which (tag, LSN, record location) rows a partition owns.

LSNs come from the LogIndex's saved tables where they cover the range (PolarDB's page -> LSN
index, read in RO mode), and from a scan of the WAL meta of the remaining log segments with the
Cython decoder. Record locations come from the segments' frame index (`wal.scan`).
"""
from __future__ import annotations

import os

import numpy as np

from logtide.logindex.table_format import META_NAME
from logtide.spark.log_segments import WAL_DATA_OFFSET, block_refs, scan_segment
from logtide.spark.page_owner import owners


def index_coverage(index_dir: str, first_needed: int) -> int:
    """The highest LSN up to which the saved LogIndex tables hold every entry from first_needed on
    (0: none)."""
    if not os.path.isdir(index_dir) or not os.path.exists(os.path.join(index_dir, META_NAME)):
        return 0
    from logtide.logindex import LogIndex
    li = LogIndex.open(index_dir, mode="ro")
    try:
        # entries at the saved max LSN itself may be split across the last table and the next
        # memtable (replay_needed_from() is inclusive): the tables are complete only below it
        if li.max_saved_lsn and li.start_lsn <= first_needed:
            return int(li.max_saved_lsn) - 1
        return 0
    finally:
        li.close()


def _index_rows(index_dir: str, first_needed: int, upto: int, part: int, partitions: int):
    from logtide.logindex import LogIndex
    li = LogIndex.open(index_dir, mode="ro")
    ls, ts = [], []
    try:
        for lsns, tags in li.iter_lsn_arrays(first_needed):
            keep = lsns <= upto
            if keep.any():
                t = np.ascontiguousarray(tags[keep], dtype=np.uint32)
                mine = owners(t, partitions) == part
                ls.append(lsns[keep][mine])
                ts.append(t[mine])
            if not keep.all():
                break
    finally:
        li.close()
    if not ls:
        return np.empty(0, np.uint64), np.empty((0, 5), np.uint32)
    return np.concatenate(ls).astype(np.uint64), np.concatenate(ts)


def owned_rows(ctx, segments, index_dir: str, first_needed: int, base_tags: np.ndarray, part: int):
    """(tags, lsn, seg, off, len) of partition `part`, sorted by tag then LSN."""
    P, target = ctx.partitions, ctx.target_lsn
    upto = min(index_coverage(index_dir, first_needed), target)
    tl, ll, sl, ol, nl = [], [], [], [], []
    if upto >= first_needed:
        lsns, tags = _index_rows(index_dir, first_needed, upto, part, P)
        firsts = np.array([s.first_lsn for s in segments], np.uint64)
        seg = np.searchsorted(firsts, lsns, "right").astype(np.int32) - 1
        off = np.empty(len(lsns), np.int64)
        ln = np.empty(len(lsns), np.int32)
        for k in np.unique(seg).tolist():
            s = scan_segment(segments[k])
            mask = seg == k
            frame = (lsns[mask] - np.uint64(s.seg.first_lsn)).astype(np.int64)
            if len(frame) and frame.max() >= len(s.starts):
                raise ValueError(f"the LogIndex names LSN {int(lsns[mask].max())}, past segment {s.seg.name}")
            off[mask] = s.starts[frame].astype(np.int64) + WAL_DATA_OFFSET
            ln[mask] = s.lengths[frame].astype(np.int32) - (WAL_DATA_OFFSET - 20)
        tl.append(tags); ll.append(lsns); sl.append(seg); ol.append(off); nl.append(ln)
    for k, seg in enumerate(segments):
        if seg.next_first is not None and seg.next_first - 1 <= upto:
            continue   # wholly covered by the LogIndex
        r = block_refs(scan_segment(seg), target)
        keep = (r["lsn"] > upto) & (r["lsn"] >= first_needed)
        tags = r["tags"][keep]
        mine = owners(tags, P) == part
        n = int(mine.sum())
        tl.append(tags[mine]); ll.append(r["lsn"][keep][mine]); sl.append(np.full(n, k, np.int32))
        ol.append(r["rec_off"][keep][mine]); nl.append(r["rec_len"][keep][mine].astype(np.int32))
    bt = base_tags[owners(base_tags, P) == part] if len(base_tags) else base_tags
    n = len(bt)
    tl.append(bt); ll.append(np.zeros(n, np.uint64)); sl.append(np.full(n, -1, np.int32))
    ol.append(np.zeros(n, np.int64)); nl.append(np.zeros(n, np.int32))
    tags = np.concatenate(tl).astype(np.uint32)
    lsn = np.concatenate(ll).astype(np.uint64)
    order = np.lexsort((lsn, tags[:, 4], tags[:, 3], tags[:, 2], tags[:, 1], tags[:, 0]))
    return (np.ascontiguousarray(tags[order]), lsn[order], np.concatenate(sl)[order], np.concatenate(ol)[order],
            np.concatenate(nl)[order])
