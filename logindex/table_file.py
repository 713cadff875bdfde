"""Table files: flushed memtables in fixed slots, 64 per file, with a Bloom4K block per table."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from logtide import Bloom4K, crc32c
from logtide.errors import CorruptBlockError
from logtide._ext.memtable import Memtable
from logtide._ext.table_writer import write_tables
from logtide.logindex.table_format import (BLOOM_BLOCK, BLOOM_EXPECTED, MAX_IMAGE, SLOT_SIZE, TABLE_HEADER,
                                           TABLE_MAGIC, TABLES_PER_FILE, bloom_file_name, table_file_name)


class TableStore:
    """Reads and (in primary mode) writes the table and bloom files of one LogIndex directory."""

    def __init__(self, directory: Path, writable: bool, bloom_expected: int = BLOOM_EXPECTED):
        self.dir = Path(directory)
        self.writable = writable
        self.bloom_expected = bloom_expected
        self._fds: dict[tuple[int, str], int] = {}
        self._fds_lock = threading.Lock()  # the LogIndex's background flush opens files beside lookups

    # -- files --

    def _fd(self, segment: int, kind: str, create: bool) -> tuple[int, bool]:
        key = (segment, kind)
        fd = self._fds.get(key)
        if fd is not None:
            return fd, False
        with self._fds_lock:
            fd = self._fds.get(key)
            if fd is not None:
                return fd, False
            return self._open(segment, kind, create)

    def _open(self, segment: int, kind: str, create: bool) -> tuple[int, bool]:
        key = (segment, kind)
        name = table_file_name(segment) if kind == "tbl" else bloom_file_name(segment)
        path = self.dir / name
        created = False
        if create:
            created = not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        else:
            fd = os.open(path, os.O_RDWR if self.writable else os.O_RDONLY)
        self._fds[key] = fd
        return fd, created

    def close(self) -> None:
        with self._fds_lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def forget(self, segment: int) -> None:
        """Close the descriptors of a segment (before removing it, or to see a rewritten file)."""
        for kind in ("tbl", "bloom"):
            with self._fds_lock:
                fd = self._fds.pop((segment, kind), None)
            if fd is not None:
                os.close(fd)

    # -- write --

    def write(self, memtables: list[Memtable]) -> list[Bloom4K]:
        """Write each memtable into its table slot and its bloom block, then fsync; returns the blooms."""
        assert self.writable
        touched, created = set(), False
        places = np.empty((len(memtables), 4), np.int64)
        for i, m in enumerate(memtables):
            seg, slot = divmod(m.table_id, TABLES_PER_FILE)
            fd, new = self._fd(seg, "tbl", True)
            created |= new
            bfd, new = self._fd(seg, "bloom", True)
            created |= new
            places[i] = (fd, slot * SLOT_SIZE, bfd, slot * BLOOM_BLOCK)
            touched.add(seg)
        fsyncs = np.array([self._fds[(seg, kind)] for seg in sorted(touched) for kind in ("tbl", "bloom")], np.int64)
        # one pass without the GIL: writes, fsyncs and the directory's fsync
        return write_tables(memtables, places, self.bloom_expected, fsyncs, self.dir if created else None)

    # -- read --

    def read_table(self, table_id: int) -> Memtable:
        """The saved memtable of table_id; CorruptBlockError when its slot is damaged or missing."""
        seg, slot = divmod(table_id, TABLES_PER_FILE)
        try:
            fd, _ = self._fd(seg, "tbl", False)
        except FileNotFoundError:
            raise CorruptBlockError(f"LogIndex table {table_id}: table file {table_file_name(seg)} is missing") from None
        off = slot * SLOT_SIZE
        where = f"{self.dir / table_file_name(seg)} at offset {off}"   # the file to look at
        head = os.pread(fd, TABLE_HEADER.size, off)
        if len(head) < TABLE_HEADER.size:
            raise CorruptBlockError(f"LogIndex table {table_id}: table file {table_file_name(seg)} is truncated")
        magic, length, tid = TABLE_HEADER.unpack(head)
        if magic != TABLE_MAGIC or tid != table_id or length > MAX_IMAGE:
            raise CorruptBlockError(f"LogIndex table {table_id}: bad slot header (magic {magic:#x}, id {tid}, "
                                    f"length {length}) in {where}")
        rest = os.pread(fd, length + 4, off + TABLE_HEADER.size)
        if len(rest) != length + 4:
            raise CorruptBlockError(f"LogIndex table {table_id}: table file {table_file_name(seg)} is truncated")
        if crc32c(head + rest[:length]) != int.from_bytes(rest[length:], "little"):
            raise CorruptBlockError(f"LogIndex table {table_id}: CRC mismatch in {where}")
        m = Memtable.from_bytes(rest[:length])
        if m.table_id != table_id:
            raise CorruptBlockError(f"LogIndex table {table_id}: image holds table {m.table_id} ({where})")
        return m

    def read_bloom(self, table_id: int) -> Bloom4K:
        """The bloom block of table_id; CorruptBlockError when damaged or missing."""
        seg, slot = divmod(table_id, TABLES_PER_FILE)
        try:
            fd, _ = self._fd(seg, "bloom", False)
        except FileNotFoundError:
            raise CorruptBlockError(f"LogIndex table {table_id}: bloom file {bloom_file_name(seg)} is missing") from None
        data = os.pread(fd, BLOOM_BLOCK, slot * BLOOM_BLOCK)
        b = Bloom4K.from_bytes(data, expected_elements=self.bloom_expected)
        if b.table_id != table_id:
            raise CorruptBlockError(f"bloom block of table {table_id} names table {b.table_id}")
        return b

    def remove_segment(self, segment: int) -> None:
        self.forget(segment)
        for name in (table_file_name(segment), bloom_file_name(segment)):
            try:
                (self.dir / name).unlink()
            except FileNotFoundError:
                pass

