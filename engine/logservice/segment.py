"""Segment: one log file named by its first LSN, with its LSN -> offset index.

LSNs inside a segment are dense, so the index is an array: frame k (LSN first_lsn + k) starts at
starts[k] and ends at starts[k + 1]; starts[count] is the end of the last good frame. The count lives
in a one-element array so that the log writer's Cython queue can index frames without the GIL
(entries first, then the count: a reader that sees a count sees its entries).
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from logtide.engine.logservice.log_format import segment_name


class Segment:
    __slots__ = ("first_lsn", "path", "_n", "_starts", "_rfd", "wfd", "prefilled", "__weakref__")

    def __init__(self, dirpath: str, first_lsn: int, starts: np.ndarray | None = None, end: int = 0) -> None:
        self.first_lsn = first_lsn
        self.path = os.path.join(dirpath, segment_name(first_lsn))
        n = 0 if starts is None else len(starts)
        self._starts = np.empty(max(16, 2 * (n + 1)), dtype=np.uint64)
        if n:
            self._starts[:n] = starts
        self._starts[n] = end
        self._n = np.array([n], dtype=np.uint64)
        self._rfd = -1
        self.wfd = -1
        self.prefilled = 0  # bytes of zeros a new segment file came with (the prepared next segment)

    @property
    def count(self) -> int:
        """Frames indexed."""
        return int(self._n[0])

    def index_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole offset array (its capacity) and the count cell, for the writer's queue, which
        appends entries in place while they fit (extend() replaces a full array by a larger one)."""
        return self._starts, self._n

    @property
    def last_lsn(self) -> int:
        return self.first_lsn + self.count - 1

    @property
    def size(self) -> int:
        """Bytes of good frames in the file: its logical end (pre-allocated zeros may follow)."""
        return int(self._starts[self.count])

    @property
    def starts(self) -> np.ndarray:
        """A view of count + 1 offsets; only grows, so a view taken under the lock stays valid."""
        return self._starts[: self.count + 1]

    def extend(self, starts, end: int) -> None:
        """Index frames just written: their absolute offsets and the new end of the file."""
        n = len(starts)
        count = self.count
        need = count + n + 1
        if need > len(self._starts):
            grown = np.empty(max(need, 2 * len(self._starts)), dtype=np.uint64)
            grown[: count + 1] = self._starts[: count + 1]
            self._starts = grown
        self._starts[count: count + n] = starts
        self._starts[count + n] = end
        self._n[0] = count + n

    def offset_of(self, lsn: int) -> int:
        return int(self._starts[lsn - self.first_lsn])

    def open_reader(self) -> None:
        """Open the read descriptor (under the service lock, so the file cannot vanish first)."""
        if self._rfd < 0:
            self._rfd = os.open(self.path, os.O_RDONLY)

    def pread(self, offset: int, size: int) -> bytes:
        self.open_reader()
        out = os.pread(self._rfd, size, offset)
        while len(out) < size:  # a short read only happens if the file shrank under us
            more = os.pread(self._rfd, size - len(out), offset + len(out))
            if not more:
                break
            out += more
        return out

    def map(self, offset: int, end: int) -> memoryview:
        """Bytes [offset, end) of the file as a read-only view of a mapping (unmapped once no view
        of it is left)."""
        self.open_reader()
        return memoryview(mmap.mmap(self._rfd, end, access=mmap.ACCESS_READ))[offset:end]

    def close(self) -> None:
        for name in ("_rfd", "wfd"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

    def __del__(self) -> None:  # readers may hold a segment the truncation worker already removed
        try:
            self.close()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"Segment({os.path.basename(self.path)}, lsns {self.first_lsn}..{self.last_lsn}, {self.size} bytes)"
