"""logtide log segments as the Spark jobs see them: files named by first LSN, read with mmap.

A task validates its segment's frames with the Cython scan (`wal.scan`), checks that its LSNs run
into the next segment's first LSN (a gap is a missing segment), and decodes block references with
`segment_refs`. Every failure names the segment file and the LSN.

A replay scans with `records=True`: the frames' CRC-32C and their records' own are checked in one
pass over the bytes (`record_checks`), so the redo applies records that were checked once already.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np

from logtide._ext import wal
from logtide._ext.record_checks import scan_checked
from logtide._ext.segment_refs import VERIFY_EVERY, VERIFY_NONE, segment_refs
from logtide._ext.xlogreader import xl_error_text
from logtide.engine.logservice.log_format import MAX_FRAME_LENGTH, parse_segment_name
from logtide.spark.errors import SegmentCorruptError, SegmentMissingError

# a WAL record starts after the frame header (20 bytes) and the user-record data prefix (12 bytes)
WAL_DATA_OFFSET = wal.HEADER_SIZE + 12


@dataclass(frozen=True)
class LogSegment:
    """One segment file: its position in the directory listing, path and first LSN."""
    index: int
    path: str
    first_lsn: int
    next_first: int | None      # first LSN of the following segment (None for the last)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def list_log_segments(log_dir: str) -> list[LogSegment]:
    """The segment files of a log directory, ascending by first LSN."""
    if not os.path.isdir(log_dir):
        raise SegmentMissingError(f"no log directory at {log_dir}")
    firsts = sorted(f for f in (parse_segment_name(n) for n in os.listdir(log_dir)) if f is not None)
    if not firsts:
        raise SegmentMissingError(f"no log segment files in {log_dir}")
    out = []
    for i, f in enumerate(firsts):
        nxt = firsts[i + 1] if i + 1 < len(firsts) else None
        out.append(LogSegment(i, os.path.join(log_dir, f"{f:020d}.log"), f, nxt))
    return out


def open_buffer(path: str):
    """The file's bytes as a read-only mmap (an empty bytes object for an empty file)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class SegmentMaps:
    """The mmaps of one replay's segment files, opened once and shared by its scan and its redo in
    one process: a second mapping of a file faults each of its pages in again (0.46 s of system
    time for a 5.7 GB log), and the scan has just faulted them all in."""

    def __init__(self) -> None:
        self._bufs: dict[str, object] = {}

    def get(self, path: str):
        """The file's mmap (open_buffer), opened on first use."""
        b = self._bufs.get(path)
        if b is None:
            b = self._bufs[path] = open_buffer(path)
        return b

    def close(self) -> None:
        for b in self._bufs.values():
            if hasattr(b, "close"):
                b.close()
        self._bufs.clear()


@dataclass
class ScannedSegment:
    seg: LogSegment
    buf: object
    starts: np.ndarray
    types: np.ndarray
    lengths: np.ndarray
    records_checked: bool = False     # the user records' own CRC-32C was checked with the frames'

    @property
    def last_lsn(self) -> int:
        return self.seg.first_lsn + len(self.starts) - 1


def scan_segment(seg: LogSegment, *, verify: bool = True, records: bool = False,
                 maps: SegmentMaps | None = None) -> ScannedSegment:
    """Validate the segment's frames; a torn tail of the last segment ends it, any other damage
    raises SegmentCorruptError and a gap before the next segment raises SegmentMissingError.
    records: also check each user frame's XLogRecord against its own CRC-32C, in the same pass
    over its bytes as the frame's CRC (a record that fails raises SegmentCorruptError).
    maps: take the file's mmap from them (kept open for the redo), else map it for this scan."""
    try:
        buf = maps.get(seg.path) if maps is not None else open_buffer(seg.path)
    except FileNotFoundError:
        raise SegmentMissingError(f"log segment {seg.name} (LSN {seg.first_lsn}) disappeared") from None
    if records:
        starts, types, lengths, end, status, bad = scan_checked(buf, seg.first_lsn, MAX_FRAME_LENGTH)
        if bad >= 0:
            raise SegmentCorruptError(f"log segment {seg.name}: WAL record at LSN {seg.first_lsn + bad} "
                                      f"(offset {int(starts[bad])}): incorrect resource manager data checksum")
    else:
        starts, types, lengths, end, status = wal.scan(buf, 0, seg.first_lsn, max_length=MAX_FRAME_LENGTH,
                                                       verify=verify)
    n = len(starts)
    if status != wal.OK:
        torn = seg.next_first is None and wal.find_frame(buf, end + 1, seg.first_lsn + n,
                                                         MAX_FRAME_LENGTH) < 0
        if not torn:
            raise SegmentCorruptError(f"log segment {seg.name}: {wal.STATUS_NAMES[status]} at offset {end} "
                                      f"(LSN {seg.first_lsn + n})")
    if seg.next_first is not None and seg.first_lsn + n != seg.next_first:
        if seg.first_lsn + n < seg.next_first:
            raise SegmentMissingError(
                f"log segment {seg.name} ends at LSN {seg.first_lsn + n - 1} but the next segment starts at "
                f"LSN {seg.next_first}: the segment holding LSN {seg.first_lsn + n} is missing")
        raise SegmentCorruptError(f"log segment {seg.name} runs to LSN {seg.first_lsn + n - 1}, past the "
                                  f"next segment's first LSN {seg.next_first}")
    return ScannedSegment(seg, buf, starts, types, lengths, records)


def block_refs(s: ScannedSegment, max_lsn: int = 2**64 - 1, *, null_rows: bool = False) -> dict:
    """segment_refs of a scanned segment; a bad record raises SegmentCorruptError naming its LSN.
    Records whose CRC-32C the scan checked are not summed again."""
    verify = VERIFY_NONE if s.records_checked else VERIFY_EVERY
    cols, bad, code = segment_refs(s.buf, s.starts, s.types, s.lengths, s.seg.first_lsn, max_lsn,
                                   verify, null_rows)
    if bad >= 0:
        what = "frame too short for a record" if code == -2 else xl_error_text(code)
        raise SegmentCorruptError(f"log segment {s.seg.name}: WAL record at LSN {s.seg.first_lsn + bad} "
                                  f"(offset {int(s.starts[bad])}): {what}")
    return cols
