"""XlogBuffer: an LRU cache of full WAL records read from the shared log for replay, with counted hits.

A miss reads ahead: one log read fetches the record and those after it (up to `readahead_bytes`),
the way PolarDB's XLOG buffer caches whole WAL pages; backends replaying neighbouring LSNs then hit.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Iterable, Sequence

import numpy as np

from logtide.errors import WalGoneError

# fetch(first_lsn, max_bytes) -> [(lsn, record bytes), ...] in ascending LSN order, starting at first_lsn
Fetch = Callable[[int, int], Sequence[tuple[int, bytes]]]


class XlogBuffer:
    def __init__(self, fetch: Fetch, capacity_bytes: int = 64 << 20, readahead_bytes: int = 1 << 20):
        self._fetch = fetch
        self.capacity_bytes = capacity_bytes
        self.readahead_bytes = readahead_bytes
        self._lru: OrderedDict[int, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.reads = 0        # log reads issued

    def _put(self, lsn: int, rec: bytes) -> None:
        old = self._lru.pop(lsn, None)
        if old is not None:
            self._bytes -= len(old)
        self._lru[lsn] = rec
        self._bytes += len(rec)
        while self._bytes > self.capacity_bytes and len(self._lru) > 1:
            _, r = self._lru.popitem(last=False)
            self._bytes -= len(r)

    def get(self, lsn: int) -> bytes:
        """The full record at `lsn`; raises WalGoneError if the log no longer has it."""
        with self._lock:
            rec = self._lru.get(lsn)
            if rec is not None:
                self._lru.move_to_end(lsn)
                self.hits += 1
                return rec
            self.misses += 1
        got = self._fetch(lsn, self.readahead_bytes)
        with self._lock:
            self.reads += 1
            found = None
            for l, r in got:
                self._put(l, r)
                if l == lsn:
                    found = r
        if found is None:
            raise WalGoneError(f"WAL record at LSN {lsn} is not in the log")
        return found

    def get_many(self, lsns: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """Batch get: the records of `lsns` concatenated (uint8) and their offsets (int64, n + 1)."""
        recs = [self.get(int(l)) for l in lsns]
        offs = np.zeros(len(recs) + 1, dtype=np.int64)
        if recs:
            np.cumsum([len(r) for r in recs], out=offs[1:])
        return np.frombuffer(b"".join(recs), dtype=np.uint8), offs

    def drop_below(self, lsn: int) -> None:
        """Forget records below `lsn` (after truncation)."""
        with self._lock:
            for l in [l for l in self._lru if l < lsn]:
                self._bytes -= len(self._lru.pop(l))

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "reads": self.reads, "records": len(self._lru),
                "bytes": self._bytes}
