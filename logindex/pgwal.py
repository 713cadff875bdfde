"""Read PostgreSQL 15 WAL segment files: (lsn, [PageTag...], rmid, info, xid) per record.

    r = PgWalReader("/path/to/pg_wal")
    for batch in r.batches():              # one RecordBatch (numpy arrays) per segment
        index.insert_many(batch.tags, batch.lsn)
    r.end_lsn, r.end_reason                # where and why the WAL ended

The page and record decoding is the Cython WalPageDecoder (logtide._ext.xlogreader).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

from logtide.errors import CorruptWalPageError
from logtide.pagetag import PageTag
from logtide._ext.xlogreader import RecordBatch, WalPageDecoder

_NAME = re.compile(r"^([0-9A-F]{8})([0-9A-F]{8})([0-9A-F]{8})$")


def format_lsn(lsn: int) -> str:
    """PostgreSQL's X/X form."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:08X}"


def parse_lsn(text: str) -> int:
    """Parse X/X (or a plain integer): a u64; ValueError for anything else."""
    text = text.strip()
    if "/" in text:
        hi, lo = text.split("/", 1)
        try:
            high, low = int(hi, 16), int(lo, 16)
        except ValueError:
            raise ValueError(f"an LSN is X/X in hex, got {text!r}") from None
        if not (0 <= high <= 0xFFFFFFFF and 0 <= low <= 0xFFFFFFFF):
            raise ValueError(f"LSN halves are 32-bit, got {text!r}")
        return (high << 32) | low
    try:
        v = int(text, 0)
    except ValueError:
        raise ValueError(f"an LSN is X/X in hex or an integer, got {text!r}") from None
    if not 0 <= v < 1 << 64:
        raise ValueError(f"an LSN is a u64, got {text!r}")
    return v


class PgWalReader:
    """The records of consecutive WAL segment files of one timeline in a pg_wal directory."""

    def __init__(self, wal_dir, *, timeline: int | None = None, strict: bool = False):
        self.dir = Path(wal_dir)
        if not self.dir.is_dir():
            raise FileNotFoundError(f"WAL directory {self.dir} does not exist")
        files = []
        for p in self.dir.iterdir():
            m = _NAME.match(p.name)
            if m and p.is_file():
                files.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), p))
        if not files:
            raise FileNotFoundError(f"no WAL segment files in {self.dir}")
        self.timeline = min(f[0] for f in files) if timeline is None else timeline
        files = sorted(f for f in files if f[0] == self.timeline)
        if not files:
            raise FileNotFoundError(f"no WAL segment files of timeline {self.timeline} in {self.dir}")
        self.seg_size = self._segment_size(files[0][3])
        per_log = 0x100000000 // self.seg_size
        self.segments = [(log * per_log + seg, p) for _, log, seg, p in files]
        self.strict = strict
        self.end_lsn = 0
        self.end_reason = ""
        self.records = 0
        self.segments_read = 0

    @staticmethod
    def _segment_size(path: Path) -> int:
        with open(path, "rb") as f:
            head = f.read(40)
        if len(head) < 40:
            raise CorruptWalPageError(f"{path.name}: shorter than a long page header")
        size = int.from_bytes(head[32:36], "little")
        if size < 1 << 20 or size > 1 << 30 or size & (size - 1):
            raise CorruptWalPageError(f"{path.name}: implausible WAL segment size {size} in its long page header")
        return size

    def batches(self, start_lsn: int = 0) -> Iterator[RecordBatch]:
        """One RecordBatch per segment until the end of WAL or a missing segment; records before
        start_lsn are left out (decoding starts at the segment holding start_lsn)."""
        dec = WalPageDecoder(self.seg_size, strict=self.strict)
        expect = None
        for segno, path in self.segments:
            if (segno + 1) * self.seg_size <= start_lsn:
                continue  # wholly before start_lsn
            if expect is not None and segno != expect:
                self.end_reason = f"missing segment {format_lsn(expect * self.seg_size)}"
                break
            b = dec.feed(path.read_bytes(), segno * self.seg_size)
            self.segments_read += 1
            expect = segno + 1
            self.end_lsn = dec.end_lsn
            if start_lsn and len(b) and b.rec_lsn[0] < start_lsn:
                b = _from_lsn(b, start_lsn)
            self.records += len(b)
            yield b
            if dec.done:
                break
        self.end_reason = dec.end_reason or self.end_reason or "end of the last segment file"
        self.end_lsn = dec.end_lsn if dec.end_lsn else self.end_lsn

    def read_all(self, start_lsn: int = 0) -> RecordBatch:
        """Every record as one RecordBatch."""
        return RecordBatch.concat(list(self.batches(start_lsn)))

    def __iter__(self) -> Iterator[tuple[int, list[PageTag], int, int, int]]:
        """(lsn, [PageTag...], rmid, info, xid) per record."""
        for b in self.batches():
            yield from b.records()


def _from_lsn(b: RecordBatch, lsn: int) -> RecordBatch:
    r = int(np.searchsorted(b.rec_lsn, lsn, "left"))
    row = int(b.rec_first[r]) if r < len(b.rec_lsn) else len(b.lsn)
    out = RecordBatch.__new__(RecordBatch)
    for name in RecordBatch.__slots__[:-1]:
        arr = getattr(b, name)
        setattr(out, name, arr[r:] if name.startswith("rec_") else arr[row:])
    out.rec_first = b.rec_first[r:] - row
    out.end_offset = b.end_offset
    return out


def build_index(wal_dir, index, *, start_lsn: int = 0, progress=None) -> PgWalReader:
    """Insert every block reference of the WAL in wal_dir into a LogIndex; returns the reader."""
    reader = PgWalReader(wal_dir)
    for b in reader.batches(start_lsn):
        index.insert_many(b.tags, b.lsn)
        if progress is not None:
            progress(reader)
    return reader
