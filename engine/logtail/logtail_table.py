"""The logtail table: committed transaction handles in commit-ts order, in pages keyed by born_ts.

A range (from_ts, to_ts] is found by two binary searches: over the pages' born_ts, then inside a page.
Readers work on a snapshot (the page list and the last page's length at that moment); appends never
change what a snapshot covers, and truncation replaces the page list.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field



@dataclass(slots=True)      # no __dict__: one object fewer per commit for the cyclic GC to walk
class Handle:
    """One committed transaction (or flush): its ts and its entries per table."""
    ts: int
    tables: dict = field(default_factory=dict)    # table -> [Entry]


class OneEntryHandle:
    """A committed transaction with one entry of one table (the commonest commit, a small insert):
    what a Handle of {table: [entry]} holds, as one object instead of three for the cyclic GC to
    walk while the commit stays in memory."""
    __slots__ = ("ts", "table", "entry")

    def __init__(self, ts: int, table: str, entry) -> None:
        self.ts = ts
        self.table = table
        self.entry = entry

    @property
    def tables(self) -> dict:
        return {self.table: [self.entry]}


class Page:
    __slots__ = ("born_ts", "handles", "ts")

    def __init__(self, first: Handle | OneEntryHandle) -> None:
        self.born_ts = first.ts
        self.handles = [first]
        self.ts = [first.ts]


class LogtailTable:
    def __init__(self, page_size: int = 256) -> None:
        self.page_size = page_size
        self._pages: list[Page] = []
        self._born: list[int] = []
        self._lock = threading.Lock()

    def append(self, h: Handle | OneEntryHandle) -> None:
        """Add a handle; ts must grow (the TN appends under its commit lock)."""
        with self._lock:
            if self._pages and self._pages[-1].ts[-1] >= h.ts:
                raise ValueError(f"logtail handle ts {h.ts} is not above {self._pages[-1].ts[-1]}")
            if not self._pages or len(self._pages[-1].handles) >= self.page_size:
                self._pages = self._pages + [Page(h)]
                self._born = self._born + [h.ts]
            else:
                p = self._pages[-1]
                p.handles.append(h)
                p.ts.append(h.ts)

    def append_many(self, hs: list[Handle | OneEntryHandle]) -> None:
        """Add handles in ts order (a group of commits) under one lock; ts must grow."""
        with self._lock:
            last = self._pages[-1].ts[-1] if self._pages else None
            for h in hs:
                if last is not None and last >= h.ts:
                    raise ValueError(f"logtail handle ts {h.ts} is not above {last}")
                last = h.ts
            k = 0
            while k < len(hs):
                if not self._pages or len(self._pages[-1].handles) >= self.page_size:
                    h = hs[k]
                    self._pages = self._pages + [Page(h)]
                    self._born = self._born + [h.ts]
                    k += 1
                    continue
                p = self._pages[-1]
                take = hs[k:k + self.page_size - len(p.handles)]
                p.ts.extend([h.ts for h in take])
                p.handles.extend(take)
                k += len(take)

    def snapshot(self):
        with self._lock:
            pages, born = self._pages, self._born
            return pages, born, (len(pages[-1].handles) if pages else 0)

    def visit(self, from_ts: int, to_ts: int, table: str | None = None):
        """Yield (ts, table, entries) for handles with from_ts < ts <= to_ts, in ts order."""
        pages, born, last_len = self.snapshot()
        if not pages:
            return
        p = max(0, bisect.bisect_right(born, from_ts) - 1)       # first level: pages by born_ts
        for pi in range(p, len(pages)):
            page = pages[pi]
            if page.born_ts > to_ts:
                break
            n = last_len if pi == len(pages) - 1 else len(page.handles)
            lo = bisect.bisect_right(page.ts, from_ts, 0, n)     # second level: inside the page
            hi = bisect.bisect_right(page.ts, to_ts, lo, n)
            for h in page.handles[lo:hi]:
                if h.__class__ is OneEntryHandle:
                    if table is None or table == h.table:
                        yield h.ts, h.table, [h.entry]
                elif table is None:
                    for tb, es in h.tables.items():
                        yield h.ts, tb, es
                elif table in h.tables:
                    yield h.ts, table, h.tables[table]

    def truncate(self, ts: int) -> int:
        """Drop handles with ts <= ts; returns how many were dropped."""
        with self._lock:
            dropped, keep = 0, []
            for page in self._pages:
                if page.ts[-1] <= ts:
                    dropped += len(page.handles)
                    continue
                if page.born_ts <= ts:
                    k = bisect.bisect_right(page.ts, ts)
                    np_ = Page(page.handles[k])
                    np_.handles = page.handles[k:]
                    np_.ts = page.ts[k:]
                    dropped += k
                    page = np_
                keep.append(page)
            self._pages = keep
            self._born = [p.born_ts for p in keep]
            return dropped

    def __len__(self) -> int:
        pages, _, last = self.snapshot()
        return sum(len(p.handles) for p in pages[:-1]) + last

    def first_ts(self) -> int | None:
        pages, _, _ = self.snapshot()
        return pages[0].born_ts if pages else None
