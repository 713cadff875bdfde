"""PageIndex: replay's use of the LogIndex, serialized for the threads that share it.

The primary keeps the LogIndex of the shared directory in primary mode (it flushes full memtables
to table files and the meta file, and truncates whole table files). An RO node opens the same
directory in RO mode: it indexes the WAL meta it receives into its own memtables, reads the
primary's table files for older entries, never writes tables, and reuses a memtable once the
primary's meta file shows every LSN of it saved (matched by LSN coverage, not by table id, so the
node's memtables need not line up with the primary's tables).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np


class PageIndex:
    def __init__(self, logindex):
        self.li = logindex
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str | os.PathLike, mode: str, max_segments: int | None = None) -> "PageIndex":
        from logtide.logindex import LogIndex
        kw = {} if max_segments is None else {"max_segments": max_segments}
        if mode == "ro":
            Path(path).mkdir(parents=True, exist_ok=True)  # the primary may not have created it yet
        return cls(LogIndex.open(path, mode=mode, **kw))

    def replay_needed_from(self) -> int:
        """Rows from this LSN on (inclusive) must be indexed again after open; 0 means from the start."""
        with self._lock:
            return self.li.replay_needed_from()

    @property
    def max_saved_lsn(self) -> int:
        with self._lock:
            return self.li.max_saved_lsn

    def add(self, tags: np.ndarray, lsns: np.ndarray) -> None:
        """Index block references (tags (n, 5) uint32, lsns (n,) uint64, non-decreasing)."""
        if len(lsns):
            with self._lock:
                self.li.insert_many(tags, lsns)

    def add_rows(self, tags: list[tuple], lsns: list[int]) -> None:
        """add() for a small group given as lists (non-decreasing LSNs): one LogIndex.insert per row,
        which costs less than building the arrays for a few rows."""
        with self._lock:
            insert = self.li.insert
            for tag, lsn in zip(tags, lsns):
                insert(tag, lsn)

    def lsns(self, tag, min_lsn: int, max_lsn: int) -> np.ndarray:
        """The page's LSNs in [min_lsn, max_lsn], ascending."""
        if max_lsn < min_lsn:
            return np.empty(0, dtype=np.uint64)
        with self._lock:
            return self.li.lsns(tuple(tag), min_lsn, max_lsn)

    def range(self, min_lsn: int, max_lsn: int) -> tuple[np.ndarray, np.ndarray]:
        """(lsns, tags) of every block reference with min_lsn <= LSN <= max_lsn, in LSN order."""
        outl, outt = [], []
        with self._lock:
            for lsns, tags in self.li.iter_lsn_arrays(min_lsn):
                if len(lsns) and lsns[0] > max_lsn:
                    break
                keep = lsns <= max_lsn
                outl.append(lsns[keep])
                outt.append(tags[keep])
                if not keep.all():
                    break
        if not outl:
            return np.empty(0, dtype=np.uint64), np.empty((0, 5), dtype=np.uint32)
        return np.concatenate(outl), np.concatenate(outt)

    def refresh(self) -> bool:
        """RO: re-read the primary's meta file; True when it changed (saved memtables become reusable)."""
        if self.li.primary:
            return False
        with self._lock:
            return self.li.refresh()

    def truncate(self, lsn: int) -> int:
        """Primary: remove table files whose entries are all below `lsn`; returns files removed."""
        if lsn <= 0 or not self.li.primary:
            return 0
        with self._lock:
            return self.li.truncate(lsn)

    def flush(self) -> int:
        """Primary: save every full (inactive) memtable; returns tables written."""
        if not self.li.primary:
            return 0
        with self._lock:
            return self.li.flush()

    def stats(self) -> dict:
        with self._lock:
            return self.li.stats()

    def close(self) -> None:
        with self._lock:
            self.li.close()

    def abandon(self) -> None:
        """Stop without flushing, as a crash would (LogIndex.abandon)."""
        with self._lock:
            self.li.abandon()
