"""The LogIndex meta file: the commit point of flushed tables, replaced atomically."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from logtide._ext.durable_io import replace_file_durably
from logtide import crc32c
from logtide.errors import CorruptionError
from logtide.logindex.table_format import (BLOOM_EXPECTED, META, META_CRC, META_MAGIC, META_NAME, META_SIZE,
                                           META_VERSION, TABLES_PER_FILE)


class CorruptMetaError(CorruptionError):
    """The LogIndex meta file is damaged (size, magic or CRC)."""


@dataclass(frozen=True)
class Meta:
    """What is durably saved: tables min_table_id..max_table_id (max_table_id -1: none)."""
    max_table_id: int = -1
    min_table_id: int = 0
    min_segment: int = 0
    start_lsn: int = 0          # smallest LSN still indexed on disk
    max_lsn: int = 0            # largest LSN of the last saved table
    tables_per_file: int = TABLES_PER_FILE
    bloom_expected: int = BLOOM_EXPECTED

    @property
    def has_tables(self) -> bool:
        return self.max_table_id >= self.min_table_id and self.max_table_id >= 0

    def with_(self, **kw) -> "Meta":
        return replace(self, **kw)

    def to_bytes(self) -> bytes:
        body = META.pack(META_MAGIC, META_VERSION, 0, self.max_table_id, self.min_table_id, self.min_segment,
                         self.start_lsn, self.max_lsn, self.tables_per_file, self.bloom_expected)
        return body + META_CRC.pack(crc32c(body))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Meta":
        if len(data) != META_SIZE:
            raise CorruptMetaError(f"LogIndex meta file is {len(data)} bytes, expected {META_SIZE}")
        body = data[:META.size]
        (stored,) = META_CRC.unpack_from(data, META.size)
        if crc32c(body) != stored:
            raise CorruptMetaError("LogIndex meta file: CRC mismatch")
        magic, version, _, max_id, min_id, min_seg, start, max_lsn, per_file, expected = META.unpack(body)
        if magic != META_MAGIC or version != META_VERSION:
            raise CorruptMetaError(f"not a LogIndex meta file (magic {magic:#x}, version {version})")
        if per_file != TABLES_PER_FILE or not 0 < expected < 1 << 20 or min_seg != min_id // per_file:
            raise CorruptMetaError(f"LogIndex meta file: inconsistent fields ({per_file} tables per file, "
                                   f"min segment {min_seg}, min table {min_id})")
        return cls(max_id, min_id, min_seg, start, max_lsn, per_file, expected)


def read_meta(directory: Path) -> Meta | None:
    """The committed meta, or None when the directory has none yet."""
    path = Path(directory) / META_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return Meta.from_bytes(data)
    except CorruptMetaError as exc:     # name the file: the format's own message cannot
        raise CorruptMetaError(f"{path}: {exc}") from None


def write_meta(directory: Path, meta: Meta) -> None:
    """Commit meta: write a temp file, fsync it, rename it over the meta file, fsync the directory
    (in one call without the GIL: a flush thread runs this beside inserts)."""
    directory = Path(directory)
    replace_file_durably(directory / (META_NAME + ".tmp"), directory / META_NAME, meta.to_bytes())
