"""Recovery at open: scan every segment, rebuild the LSN -> offset index, cut a torn tail.

A segment's zero-filled (pre-allocated, never written) rest is its clean end. A bad frame at the end
of the last segment (nothing valid after it) is a torn write: it is cut off and logged. A bad frame
anywhere else is corruption of acknowledged data: CorruptLogError.

With `records` (a log whose user records are PostgreSQL WAL records: the primary's), each record's
own CRC-32C is checked too, in the same pass over its bytes as its frame's (_ext/record_checks):
a record that fails, in an intact frame, is CorruptLogError, and the primary's redo need not sum
the records again.
"""
from __future__ import annotations

import logging
import mmap
import os

from logtide._ext import wal
from logtide._ext.record_checks import scan_checked
from logtide.engine.logservice.log_format import parse_segment_name
from logtide.engine.logservice.segment import Segment
from logtide.engine.logservice.tail_cut import cut_tail
from logtide.errors import CorruptLogError

log = logging.getLogger("logtide.logservice")


def list_segments(dirpath: str) -> list[int]:
    """First LSNs of the segment files in dirpath, ascending."""
    return sorted(f for f in (parse_segment_name(n) for n in os.listdir(dirpath)) if f is not None)


def _scan_file(path: str, first_lsn: int, max_length: int, records: bool):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return wal.scan(b"", 0, first_lsn), -1
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if records:
                *res, bad = scan_checked(m, first_lsn, max_length)
                if bad >= 0:
                    name, at = os.path.basename(path), int(res[0][bad])
                    raise CorruptLogError(f"corrupt log: the WAL record at LSN {first_lsn + bad} in segment {name} "
                                          f"(frame at offset {at}) fails its own CRC-32C: incorrect resource "
                                          "manager data checksum", segment=name, offset=at)
            else:
                res = wal.scan(m, 0, first_lsn, max_length=max_length)
            follow = -1
            if res[4] != wal.OK:  # is anything valid after the bad frame?
                follow = wal.find_frame(m, res[3] + 1, first_lsn + len(res[0]), max_length)
            return res, follow


def recover(dirpath: str, max_length: int, records: bool = False) -> list[Segment]:
    """Open every segment of the log in dirpath; the last one is left ready for appends. A frame
    longer than `max_length` is a bad frame. records: check the WAL records' own CRC-32C too."""
    segments: list[Segment] = []
    firsts = list_segments(dirpath)
    expected = None
    for idx, first in enumerate(firsts):
        seg = Segment(dirpath, first)
        name = os.path.basename(seg.path)
        if expected is not None and first != expected:
            raise CorruptLogError(f"log segment {name} starts at LSN {first} but the previous segment "
                                  f"ends at LSN {expected - 1}: records are missing", segment=name, offset=0)
        (starts, _types, _lengths, end, status), follow = _scan_file(seg.path, first, max_length, records)
        n = len(starts)
        if status != wal.OK:
            what = wal.STATUS_NAMES[status]
            if idx != len(firsts) - 1:
                raise CorruptLogError(f"corrupt log: {what} in segment {name} at offset {end} (LSN {first + n}), "
                                      "which is not the last segment", segment=name, offset=end)
            if follow >= 0:
                raise CorruptLogError(f"corrupt log: {what} in segment {name} at offset {end} (LSN {first + n}), "
                                      f"followed by a valid record at offset {follow}: corruption in the middle "
                                      "of the log, not a torn tail", segment=name, offset=end)
            size = os.path.getsize(seg.path)
            log.warning("log segment %s: cut a torn tail at offset %d (%s; the file had %d bytes); last good LSN %d",
                        name, end, what, size, first + n - 1)
            cut_tail(seg.path, end)
        seg = Segment(dirpath, first, starts, end)
        segments.append(seg)
        expected = first + n
    return segments
