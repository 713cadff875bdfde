"""The pages plan's lookup: which (tag, LSN, record location) rows a partition owns.

LSNs come from the LogIndex's saved tables where they cover the range (PolarDB's page -> LSN
index, read in RO mode), and from a scan of the WAL meta of the remaining log segments with the
Cython decoder. Record locations come from the segments' frame index (`wal.scan`).

Rows travel as a tuple of five arrays `(tags (n, 5) uint32, lsn uint64, seg int32, off int64,
len int32)`; a stored page without a record is a row with seg -1. `owned_rows` does the whole
lookup in one process; the Spark pages plan splits the scan across tasks (ref_exchange.py) and
joins the parts with `index_rows`, `base_rows` and `sorted_rows`.
"""
from __future__ import annotations

import os

import numpy as np

from logtide.logindex.table_format import META_NAME
from logtide.spark.log_segments import WAL_DATA_OFFSET, SegmentMaps, block_refs, scan_segment
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


def empty_rows() -> tuple:
    return (np.empty((0, 5), np.uint32), np.empty(0, np.uint64), np.empty(0, np.int32), np.empty(0, np.int64),
            np.empty(0, np.int32))


def select_rows(rows: tuple, which) -> tuple:
    """The rows picked by a boolean mask or an index array."""
    return tuple(a[which] for a in rows)


def _owned(tags: np.ndarray, part: int, partitions: int):
    """Mask of the tags `part` owns (None: all of them, with one partition)."""
    return None if partitions == 1 else owners(tags, partitions) == part


def index_rows(segments, index_dir: str, first_needed: int, upto: int, part: int, partitions: int,
               maps: SegmentMaps | None = None) -> tuple:
    """Rows of partition `part` from the LogIndex's saved tables, LSNs first_needed..upto, located
    in the segments."""
    from logtide.logindex import LogIndex
    if upto < first_needed:
        return empty_rows()
    li = LogIndex.open(index_dir, mode="ro")
    ls, ts = [], []
    try:
        for lsns, tags in li.iter_lsn_arrays(first_needed):
            keep = lsns <= upto
            if keep.any():
                t = np.ascontiguousarray(tags[keep], dtype=np.uint32)
                mine = _owned(t, part, partitions)
                ls.append(lsns[keep] if mine is None else lsns[keep][mine])
                ts.append(t if mine is None else t[mine])
            if not keep.all():
                break
    finally:
        li.close()
    if not ls:
        return empty_rows()
    lsns, tags = np.concatenate(ls).astype(np.uint64), np.concatenate(ts)
    firsts = np.array([s.first_lsn for s in segments], np.uint64)
    seg = np.searchsorted(firsts, lsns, "right").astype(np.int32) - 1
    off = np.empty(len(lsns), np.int64)
    ln = np.empty(len(lsns), np.int32)
    for k in np.unique(seg).tolist():
        s = scan_segment(segments[k], records=True, maps=maps)    # the redo applies these records unchecked
        mask = seg == k
        frame = (lsns[mask] - np.uint64(s.seg.first_lsn)).astype(np.int64)
        if len(frame) and frame.max() >= len(s.starts):
            raise ValueError(f"the LogIndex names LSN {int(lsns[mask].max())}, past segment {s.seg.name}")
        off[mask] = s.starts[frame].astype(np.int64) + WAL_DATA_OFFSET
        ln[mask] = s.lengths[frame].astype(np.int32) - (WAL_DATA_OFFSET - 20)
    return tags, lsns, seg, off, ln


def scanned_segments(segments, upto: int) -> list[int]:
    """Indexes of the segments whose WAL meta must be scanned: all but those the LogIndex's saved
    tables cover wholly (up to LSN `upto`)."""
    return [k for k, s in enumerate(segments) if s.next_first is None or s.next_first - 1 > upto]


def scan_rows(segments, indexes, target_lsn: int, upto: int, first_needed: int,
              maps: SegmentMaps | None = None) -> tuple:
    """Rows of every owner from the WAL meta of segments[k] for k in indexes (LSNs above upto, from
    first_needed on, up to the target). Each segment's frames and records are checked against their
    CRC-32C, in one pass (scan_segment, records=True): the redo does not sum them again."""
    tl, ll, sl, ol, nl = [], [], [], [], []
    for k in indexes:
        r = block_refs(scan_segment(segments[k], records=True, maps=maps), target_lsn)
        keep = (r["lsn"] > upto) & (r["lsn"] >= first_needed)
        n = int(keep.sum())
        tl.append(r["tags"][keep]); ll.append(r["lsn"][keep]); sl.append(np.full(n, k, np.int32))
        ol.append(r["rec_off"][keep]); nl.append(r["rec_len"][keep].astype(np.int32))
    if not tl:
        return empty_rows()
    return (np.concatenate(tl).astype(np.uint32), np.concatenate(ll).astype(np.uint64), np.concatenate(sl),
            np.concatenate(ol).astype(np.int64), np.concatenate(nl))


def base_rows(base_tags: np.ndarray, part: int, partitions: int) -> tuple:
    """One row (seg -1, no record) per stored page that `part` owns: every stored page is output,
    whether or not a record touches it."""
    mine = _owned(base_tags, part, partitions) if len(base_tags) else None
    bt = base_tags if mine is None else base_tags[mine]
    n = len(bt)
    return (np.ascontiguousarray(bt, dtype=np.uint32), np.zeros(n, np.uint64), np.full(n, -1, np.int32),
            np.zeros(n, np.int64), np.zeros(n, np.int32))


def sorted_rows(parts) -> tuple:
    """The parts' rows in one set, sorted by tag then LSN (what the redo task takes)."""
    tags = np.concatenate([p[0] for p in parts]).astype(np.uint32)
    lsn = np.concatenate([p[1] for p in parts]).astype(np.uint64)
    order = np.lexsort((lsn, tags[:, 4], tags[:, 3], tags[:, 2], tags[:, 1], tags[:, 0]))
    seg = np.concatenate([p[2] for p in parts]).astype(np.int32)
    off = np.concatenate([p[3] for p in parts]).astype(np.int64)
    ln = np.concatenate([p[4] for p in parts]).astype(np.int32)
    return np.ascontiguousarray(tags[order]), lsn[order], seg[order], off[order], ln[order]


def owned_rows(ctx, segments, index_dir: str, first_needed: int, base_tags: np.ndarray, part: int,
               maps: SegmentMaps | None = None) -> tuple:
    """(tags, lsn, seg, off, len) of partition `part`, sorted by tag then LSN, found in this process
    (LogIndex, then a scan of every segment it does not cover); `maps` keeps the scanned segments
    mapped for a redo in this process."""
    P, target = ctx.partitions, ctx.target_lsn
    upto = min(index_coverage(index_dir, first_needed), target)
    scanned = scan_rows(segments, scanned_segments(segments, upto), target, upto, first_needed, maps)
    mine = _owned(scanned[0], part, P)
    if mine is not None:
        scanned = select_rows(scanned, mine)
    return sorted_rows([index_rows(segments, index_dir, first_needed, upto, part, P, maps), scanned,
                        base_rows(base_tags, part, P)])
