"""The object store: immutable named objects (Parquet tables, checkpoint files) under one root.

The root is a local directory by default; any URI pyarrow.fs understands (s3://bucket/prefix?...)
goes through the same code. Objects are written to a temporary name and renamed into place on local
stores, so a reader never sees half an object.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from logtide.errors import CorruptionError, LogtideError

BLOCK_ROWS = 8192  # rows per block: one Parquet row group, the smallest unit a reader loads


class ObjectStoreError(LogtideError):
    """An object is missing or cannot be read or written."""


class ObjectStore:
    """Named immutable objects under `root` (a directory path or a pyarrow.fs URI)."""

    def __init__(self, root: str | os.PathLike) -> None:
        root = os.fspath(root)
        if "://" in root:
            self.fs, self.root = pafs.FileSystem.from_uri(root)
            self.local = isinstance(self.fs, pafs.LocalFileSystem)
        else:
            Path(root).mkdir(parents=True, exist_ok=True)
            self.fs, self.root, self.local = pafs.LocalFileSystem(), os.path.abspath(root), True
        self.fs.create_dir(self.root, recursive=True)
        self.uri = root

    def path(self, name: str) -> str:
        if not name or "/" in name or name.startswith("."):
            raise ObjectStoreError(f"bad object name {name!r}")
        return f"{self.root}/{name}"

    def _commit(self, tmp: str, final: str) -> None:
        if self.local:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.fs.move(tmp, final)
        if self.local:
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _write(self, name: str, write) -> str:
        """write(path) the object under a temporary name, then move it into place (local stores);
        its final path. An OSError is ObjectStoreError, and what the write left is removed."""
        final = self.path(name)
        tmp = f"{final}.{uuid.uuid4().hex}.tmp" if self.local else final
        try:
            write(tmp)
            if self.local:
                self._commit(tmp, final)
        except OSError as exc:
            if self.local:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            raise ObjectStoreError(f"object {name!r} could not be written: {exc}") from exc
        return final

    def write_blocks(self, name: str, blocks: list[pa.Table]) -> int:
        """Write one Parquet object whose row groups are `blocks` (each at most BLOCK_ROWS rows).
        Returns the object size in bytes."""
        if not blocks:
            raise ObjectStoreError(f"object {name!r} needs at least one block")
        for b in blocks:
            if b.num_rows > BLOCK_ROWS:
                raise ObjectStoreError(f"a block has {b.num_rows} rows, more than {BLOCK_ROWS}")

        def parquet(path: str) -> None:
            with pq.ParquetWriter(path, blocks[0].schema, filesystem=self.fs) as w:
                for b in blocks:
                    w.write_table(b, row_group_size=BLOCK_ROWS)
        return self.fs.get_file_info(self._write(name, parquet)).size

    def read_block(self, name: str, block: int) -> pa.Table:
        """One row group of an object."""
        return self._parquet(name).read_row_group(block)

    def read_all(self, name: str) -> pa.Table:
        return self._parquet(name).read()

    def num_blocks(self, name: str) -> int:
        return self._parquet(name).num_row_groups

    def _parquet(self, name: str) -> pq.ParquetFile:
        try:
            f = self.fs.open_input_file(self.path(name))
        except (FileNotFoundError, OSError) as exc:
            raise ObjectStoreError(f"object {name!r} is missing: {exc}") from exc
        try:
            return pq.ParquetFile(f)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptionError(f"object {name!r} is not a readable Parquet file: {exc}") from exc

    def put(self, name: str, data: bytes) -> None:
        """Write a small object (a checkpoint) atomically."""
        def raw(path: str) -> None:
            with self.fs.open_output_stream(path) as out:
                out.write(data)
        self._write(name, raw)

    def get(self, name: str) -> bytes:
        try:
            with self.fs.open_input_stream(self.path(name)) as f:
                return f.read()
        except (FileNotFoundError, OSError) as exc:
            raise ObjectStoreError(f"object {name!r} is missing: {exc}") from exc

    def exists(self, name: str) -> bool:
        return self.fs.get_file_info(self.path(name)).type == pafs.FileType.File

    def list(self, prefix: str = "") -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        names = [i.base_name for i in infos if i.type == pafs.FileType.File and not i.base_name.endswith(".tmp")]
        return sorted(n for n in names if n.startswith(prefix))

    def delete(self, name: str) -> None:
        self.fs.delete_file(self.path(name))
