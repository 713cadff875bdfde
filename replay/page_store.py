"""PageStore: the shared page files of a primary and its RO nodes, safe against torn writes.

Each relation fork is one file of 8 KiB pages (block n at offset n * 8192); a block past the end
reads as a new (all-zero) page. Every page carries a checksum. Torn writes are repaired from a
double-write area: a batch of pages is first written and fsynced there, then in place. A torn
in-place page is therefore always matched by an intact copy in the double-write area (and a torn
double-write slot means the in-place page was not touched yet). A read after a torn write
returns the last complete write or a newer intact copy; the writer's open restores the newest
(docs/page_format.md says why redo needs no more). Layout: docs/page_format.md.
"""
from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from logtide.fsync_dir import fsync_dir
from logtide._ext import page as pg
from logtide._ext.crc32c import crc32c
from logtide.errors import CorruptPageError, LogtideError
from logtide.pagetag import tag_array

PAGE_SIZE = 8192
DW_MAGIC = 0x5744544C          # "LTDW"
DW_HEADER = struct.Struct("<IIQ20sIQ16x")  # magic, crc32c, batch seq, tag, reserved, page LSN; 64 bytes
DW_HEADER_SIZE = DW_HEADER.size
DW_SLOT = DW_HEADER_SIZE + PAGE_SIZE
DW_SLOTS = 4096   # pages per batch: one fsync of the area and one per file for each (a 33 MiB area)
DW_FILE = "doublewrite"
# the slot header as an array row (DW_HEADER's fields)
_DW_DTYPE = np.dtype([("magic", "<u4"), ("crc", "<u4"), ("seq", "<u8"), ("tag", "<u4", (5,)), ("res", "<u4"),
                      ("lsn", "<u8"), ("pad", "V16")])
assert _DW_DTYPE.itemsize == DW_HEADER_SIZE
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16)


def _pwrite_all(fd: int, bufs: list, offset: int) -> None:
    """Write the buffers back to back at `offset`, all of them (a short write is continued)."""
    want = sum(memoryview(b).nbytes for b in bufs)
    done = os.pwritev(fd, bufs, offset)
    if done < want:
        rest = b"".join(bytes(memoryview(b).cast("B")) for b in bufs)[done:]
        while rest:
            k = os.pwrite(fd, rest, offset + done)
            done += k
            rest = rest[k:]


def _rel_name(spc: int, db: int, rel: int, fork: int) -> str:
    return f"{spc}_{db}_{rel}_{fork}"


class PageStore:
    """Shared page files plus a double-write area.

    One writer (the primary) and any number of readers (RO nodes, other processes) may use the
    same directory. `writer=True` repairs torn pages from the double-write area on open.
    """

    def __init__(self, path: str | os.PathLike, writer: bool = False, dw_slots: int = DW_SLOTS,
                 read_retries: int = 20):
        self.path = Path(path)
        self.writer = writer
        self.dw_slots = dw_slots
        self.read_retries = read_retries
        self._fds: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._seq = 0
        self.repaired = 0            # torn pages fixed from the double-write area
        self.pages_written = 0
        self.pages_read = 0
        if writer:
            self.path.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_dir():
            raise LogtideError(f"no page store at {self.path}")
        dw = self.path / DW_FILE
        if writer:
            self._dw_fd = os.open(dw, os.O_RDWR | os.O_CREAT, 0o644)
            fsync_dir(self.path)
            self._recover()
        else:
            self._dw_fd = os.open(dw, os.O_RDONLY) if dw.exists() else -1

    # ------------------------------------------------------------------ files
    def _fd(self, spc: int, db: int, rel: int, fork: int) -> int:
        key = (spc, db, rel, fork)
        fd = self._fds.get(key)
        if fd is not None:
            return fd
        with self._lock:
            fd = self._fds.get(key)
            if fd is None:
                name = self.path / _rel_name(*key)
                if self.writer:
                    existed = name.exists()
                    fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644)
                    if not existed:
                        fsync_dir(self.path)
                else:
                    try:
                        fd = os.open(name, os.O_RDONLY)
                    except FileNotFoundError:
                        return -1  # not created yet: every block of it reads as new
                self._fds[key] = fd
            return fd

    def nblocks(self, spc: int, db: int, rel: int, fork: int = 0) -> int:
        """Blocks in the relation fork file (a block past this reads as a new page)."""
        fd = self._fd(spc, db, rel, fork)
        return 0 if fd < 0 else os.fstat(fd).st_size // PAGE_SIZE

    def relations(self) -> list[tuple[int, int, int, int]]:
        """(spc, db, rel, fork) of every relation fork file in the store."""
        out = []
        for name in os.listdir(self.path):
            parts = name.split("_")
            if len(parts) == 4 and all(p.isdigit() for p in parts):
                out.append(tuple(int(p) for p in parts))
        return sorted(out)

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            if self._dw_fd >= 0:
                os.close(self._dw_fd)
                self._dw_fd = -1

    def __enter__(self) -> "PageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ reads
    def _pread_page(self, fd: int, block: int, out) -> None:
        if fd < 0:
            out[:] = 0
            return
        data = os.pread(fd, PAGE_SIZE, block * PAGE_SIZE)
        if len(data) == PAGE_SIZE:
            out[:] = np.frombuffer(data, dtype=np.uint8)
        elif not data:
            out[:] = 0
        else:  # a partly extended file: the page write itself is torn
            buf = np.zeros(PAGE_SIZE, dtype=np.uint8)
            buf[:len(data)] = np.frombuffer(data, dtype=np.uint8)
            out[:] = buf

    def read_into(self, tag: Sequence[int], out) -> None:
        """Read page `tag` into the writable 8192-byte buffer `out`, verified.

        A page that fails its checksum is taken from the double-write area when an intact copy is
        there; a reader that raced the primary's in-place write retries. Raises CorruptPageError
        when no intact copy exists.
        """
        spc, db, rel, fork, block = (int(v) for v in tag)
        view = np.frombuffer(memoryview(out).cast("B"), dtype=np.uint8)
        if view.shape[0] != PAGE_SIZE:
            raise ValueError(f"a page buffer is {PAGE_SIZE} bytes")
        fd = self._fd(spc, db, rel, fork)
        for attempt in range(self.read_retries + 1):
            self._pread_page(fd, block, view)
            if pg.verify(view, block) == 0:
                self.pages_read += 1
                return
            copy = self._dw_lookup((spc, db, rel, fork, block))
            if copy is not None:
                view[:] = np.frombuffer(copy, dtype=np.uint8)
                self.repaired += 1
                self.pages_read += 1
                if self.writer:
                    self._write_in_place([(spc, db, rel, fork, block)], [copy])
                return
            time.sleep(0.002 * (attempt + 1))  # the writer may be between its two writes
            fd = self._fd(spc, db, rel, fork) if fd < 0 else fd
        raise CorruptPageError(f"page {spc}/{db}/{rel}/{fork}/{block} fails its checksum and the "
                               f"double-write area holds no intact copy")

    def read(self, tag: Sequence[int]) -> bytearray:
        """Page `tag` as a new bytearray (see read_into)."""
        out = bytearray(PAGE_SIZE)
        self.read_into(tag, out)
        return out

    def read_many(self, tags, out: np.ndarray | None = None) -> np.ndarray:
        """Batch read: the pages of an (n, 5) tag array as an (n, 8192) uint8 array."""
        arr = tag_array(tags)
        if out is None:
            out = np.empty((len(arr), PAGE_SIZE), dtype=np.uint8)
        for i, t in enumerate(arr.tolist()):
            self.read_into(t, out[i])
        return out

    # ------------------------------------------------------------------ writes
    def write_many(self, tags: Iterable[Sequence[int]], pages: Iterable) -> None:
        """Durably write pages: double-write area first (fsynced), then in place (fsynced), up to
        `dw_slots` pages at a time.

        Checksums are stamped into the written copies; the caller's buffers are not changed.
        """
        if not self.writer:
            raise LogtideError("this PageStore was opened read-only")
        tags = [tuple(int(v) for v in t) for t in tags]
        views = []
        for p in pages:
            v = memoryview(p).cast("B")
            if v.nbytes != PAGE_SIZE:
                raise ValueError(f"a page is {PAGE_SIZE} bytes, got {v.nbytes}")
            views.append(v)
        if len(views) != len(tags):
            raise ValueError("as many pages as tags")
        with self._write_lock:
            for i in range(0, len(tags), self.dw_slots):
                self._write_batch(tags[i:i + self.dw_slots], views[i:i + self.dw_slots])

    def write(self, tag: Sequence[int], page) -> None:
        self.write_many([tag], [page])

    def _write_batch(self, tags: list[tuple], pages: list) -> None:
        """One batch: its slots in one write and one fsync of the double-write area, then its pages
        in place with one fsync per file."""
        self._seq += 1
        n = len(tags)
        slots = np.zeros((n, DW_SLOT), np.uint8)
        body = slots[:, DW_HEADER_SIZE:]
        for k, p in enumerate(pages):
            body[k] = np.frombuffer(p, np.uint8)
        stamped = np.ascontiguousarray(body)
        pg.set_checksum_many(stamped, np.array([t[4] for t in tags], np.uint32))
        body[:] = stamped
        head = slots[:, :DW_HEADER_SIZE].view(_DW_DTYPE)[:, 0]
        head["magic"] = DW_MAGIC
        head["seq"] = self._seq
        head["tag"] = np.array(tags, np.uint32).reshape(n, 5)
        head["lsn"] = pg.lsn_many(stamped)
        for k in range(n):
            head["crc"][k] = crc32c(slots[k, 8:])
        _pwrite_all(self._dw_fd, [slots], 0)
        os.fdatasync(self._dw_fd)
        self._write_in_place(tags, list(stamped))

    def _write_in_place(self, tags: list[tuple], pages: list) -> None:
        """Write pages at their blocks, adjacent blocks of a file in one write, then fsync each file once."""
        touched = set()
        run: list = []
        fd = start = -1
        for k in sorted(range(len(tags)), key=tags.__getitem__):   # stable: a repeated tag's last copy wins
            t = tags[k]
            f = self._fd(*t[:4])
            if run and (f != fd or t[4] != start + len(run) or len(run) >= _IOV_MAX):
                _pwrite_all(fd, run, start * PAGE_SIZE)
                run = []
            if not run:
                fd, start = f, t[4]
            run.append(pages[k])
            touched.add(f)
        if run:
            _pwrite_all(fd, run, start * PAGE_SIZE)
        for f in touched:
            os.fdatasync(f)
        self.pages_written += len(tags)

    # ------------------------------------------------------------------ double-write area
    def _dw_slots(self) -> list[tuple[int, tuple, int, bytes]]:
        """Every intact slot as (seq, tag, lsn, page)."""
        if self._dw_fd < 0:
            dw = self.path / DW_FILE
            if not dw.exists():
                return []
            self._dw_fd = os.open(dw, os.O_RDONLY)
        # the whole area: a writer with larger batches may have filled more slots than dw_slots
        raw = os.pread(self._dw_fd, max(os.fstat(self._dw_fd).st_size, DW_SLOT * self.dw_slots), 0)
        out = []
        for off in range(0, len(raw) - DW_SLOT + 1, DW_SLOT):
            magic, crc, seq, tagb, _, lsn = DW_HEADER.unpack_from(raw, off)
            if magic != DW_MAGIC:
                continue
            page = raw[off + DW_HEADER_SIZE: off + DW_SLOT]
            if crc32c(raw[off + 8: off + DW_HEADER_SIZE] + page) != crc:
                continue  # torn slot: the in-place page was not written after it
            tag = struct.unpack("<5I", tagb)
            if pg.verify(page, tag[4]) != 0:
                continue
            out.append((seq, tag, lsn, page))
        return out

    def _dw_lookup(self, tag: tuple) -> bytes | None:
        best = None
        for seq, t, lsn, page in self._dw_slots():
            if t == tuple(tag) and (best is None or seq > best[0]):
                best = (seq, page)
        return None if best is None else best[1]

    def _recover(self) -> None:
        """On open by the writer: put back every double-written page whose in-place copy is torn or older."""
        fixes: dict[tuple, tuple[int, bytes]] = {}
        for seq, tag, lsn, page in self._dw_slots():
            if tag not in fixes or seq > fixes[tag][0]:
                fixes[tag] = (seq, page)
        last = max((s for s, _ in fixes.values()), default=0)
        todo_t, todo_p = [], []
        cur = np.empty(PAGE_SIZE, dtype=np.uint8)
        for tag, (seq, page) in fixes.items():
            self._pread_page(self._fd(*tag[:4]), tag[4], cur)
            lsn, copy_lsn = pg.get_lsn(cur), pg.get_lsn(page)
            # Only the last batch's in-place writes can have been torn by a crash. A torn page passes
            # its 16-bit checksum once in 65,536 tears; at the copy's LSN it must also be the copy.
            torn = pg.verify(cur, tag[4]) != 0 or (seq == last and lsn == copy_lsn and cur.tobytes() != page)
            if torn or lsn < copy_lsn:
                todo_t.append(tag)
                todo_p.append(page)
        if todo_t:
            self._write_in_place(todo_t, todo_p)
            self.repaired += len(todo_t)
        self._seq = max([s for s, *_ in fixes.values()], default=0)
