"""PostgreSQL WAL segment files as independent tasks: one segment per task.

A task decodes its segment with the Cython WalPageDecoder. A record that starts in this segment
and runs into the next is completed from the start of the next segment only (its continuation
pages, the rest zeroed so the decoder stops there); a record that started in the previous
segment is skipped, its owner completes it. Records are kept when they start in this segment.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from logtide._ext.xlogreader import RecordBatch, WalPageDecoder
from logtide.errors import CorruptionError
from logtide.logindex.pgwal import PgWalReader, format_lsn
from logtide.spark.errors import SegmentCorruptError

XLOG_BLCKSZ = 8192
LONG_HEADER, SHORT_HEADER = 40, 24


@dataclass(frozen=True)
class PgSegment:
    segno: int
    path: str
    next_path: str | None       # the following segment file, when the archive has it
    seg_size: int

    @property
    def start_lsn(self) -> int:
        return self.segno * self.seg_size

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def list_pg_segments(wal_dir: str, timeline: int | None = None) -> list[PgSegment]:
    """The segment files of one timeline of a pg_wal directory or WAL archive, in order."""
    r = PgWalReader(wal_dir, timeline=timeline)
    segs = r.segments
    out = []
    for i, (segno, path) in enumerate(segs):
        nxt = segs[i + 1][1] if i + 1 < len(segs) and segs[i + 1][0] == segno + 1 else None
        out.append(PgSegment(segno, str(path), None if nxt is None else str(nxt), r.seg_size))
    return out


def _continuation_prefix(data: bytes, seg_size: int) -> bytearray:
    """The pages of `data` (the next segment) that hold the continued record, the rest zero."""
    out = bytearray(seg_size)
    rem = int.from_bytes(data[16:20], "little")   # xlp_rem_len of the long page header
    room = XLOG_BLCKSZ - LONG_HEADER
    pages = 1
    while rem > room and pages * XLOG_BLCKSZ < seg_size:
        rem -= room
        room = XLOG_BLCKSZ - SHORT_HEADER
        pages += 1
    n = min(seg_size, pages * XLOG_BLCKSZ)
    out[:n] = data[:n]
    return out


def decode_segment(seg: PgSegment) -> RecordBatch:
    """Every record that starts in `seg`, as a RecordBatch (numpy arrays)."""
    dec = WalPageDecoder(seg.seg_size, strict=True)
    end = seg.start_lsn + seg.seg_size
    try:
        with open(seg.path, "rb") as f:
            b = dec.feed(f.read(), seg.start_lsn)
        parts = [b]
        if not dec.done and dec.end_lsn < end and seg.next_path is not None:
            with open(seg.next_path, "rb") as f:
                nxt = f.read()
            if len(nxt) == seg.seg_size:
                parts.append(dec.feed(_continuation_prefix(nxt, seg.seg_size), end))
    except CorruptionError as exc:
        raise SegmentCorruptError(f"WAL segment {seg.name}: {exc}") from None
    b = RecordBatch.concat(parts) if len(parts) > 1 else parts[0]
    if len(b) and b.rec_lsn[-1] >= end:
        b = keep_records(b, b.rec_lsn < end)
    return b


def keep_records(b: RecordBatch, keep: np.ndarray) -> RecordBatch:
    """The records of b where keep (per record) is true, with their block rows."""
    out = RecordBatch.__new__(RecordBatch)
    rows = np.repeat(keep, b.rec_nblocks.astype(np.int64))
    for name in RecordBatch.__slots__[:-1]:
        arr = getattr(b, name)
        setattr(out, name, arr[keep] if name.startswith("rec_") else arr[rows])
    nb = out.rec_nblocks.astype(np.int64)
    out.rec_first = np.cumsum(nb) - nb
    out.end_offset = b.end_offset
    return out


def where(seg: PgSegment, lsn: int) -> str:
    return f"segment {seg.name} at {format_lsn(lsn)}"
