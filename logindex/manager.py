"""LogIndex: PolarDB's page -> LSN index over a memtable ring, table files and a meta file.

    li = LogIndex.open(dir, mode="primary")        # or mode="ro": never writes
    li.insert(tag, lsn); li.insert_many(tags, lsns)
    li.lsns(tag, min_lsn, max_lsn) -> uint64 array, ascending
    li.iter_lsn(from_lsn) -> (lsn, PageTag) in LSN order
    li.flush(); li.truncate(lsn); li.replay_needed_from(); li.stats()
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import numpy as np

from logtide import Bloom4K
from logtide.errors import CorruptBlockError, LogtideError, LsnOrderError, ReadOnlyError
from logtide.pagetag import PageTag, tag_array, tags_from_array
from logtide._ext import memtable as _mt
from logtide._ext.insert_path import InsertPath
from logtide._ext.lookup import TableLookup
from logtide.logindex.memtable_ring import MemtableRing
from logtide.fsync_dir import fsync_dir
from logtide.logindex.meta_file import Meta, read_meta, write_meta
from logtide.logindex.table_file import TableStore
from logtide.logindex.table_format import BLOOM_EXPECTED, META_NAME, TABLES_PER_FILE, parse_segment

MAX_LSN = (1 << 64) - 1


def _index_lsn(lsn) -> int:
    """An LSN given as another integer type (numpy); ValueError for anything else: a float or a str,
    and a bool (True is not LSN 1)."""
    if isinstance(lsn, (bool, np.bool_)) or not hasattr(lsn, "__index__"):
        raise ValueError(f"an LSN is a u64, got {lsn!r}")
    return int(lsn.__index__())


def _checked_lsn(lsn) -> int:
    """An LSN argument (a bound, a truncation point) as an int in [0, 2**64), or ValueError."""
    if lsn.__class__ is not int:
        lsn = _index_lsn(lsn)
    if not 0 <= lsn <= MAX_LSN:
        raise ValueError(f"an LSN is a u64, got {lsn}")
    return lsn
_BITS = 4064
_NBITS = _BITS * 8


class LogIndex:
    """The LogIndex of one directory. Use LogIndex.open()."""

    def __init__(self, directory: Path, mode: str, ring_size: int, max_segments: int, table_cache: int,
                 background_flush: bool = True):
        self.dir = Path(directory)
        self._meta_path = str(self.dir / META_NAME)
        self.mode = mode
        self.primary = mode == "primary"
        self.ring = MemtableRing(ring_size, max_segments)
        self.table_cache = max(1, table_cache)
        self.meta = Meta()
        self.store = TableStore(self.dir, writable=self.primary)
        # the per-call insert: one Cython call; insert() below documents it, this attribute serves it
        self._ins = InsertPath(self._insert_slow)
        self.insert = self._ins.insert
        # a flush of inactive memtables running in the background: (future, memtables, new meta)
        self._bg: tuple[Future, list, Meta] | None = None
        self._background = background_flush and self.primary
        self._pool: ThreadPoolExecutor | None = None
        self._k = Bloom4K(expected_elements=BLOOM_EXPECTED).k
        # the saved tables meta.min_table_id + j, j < self._n
        self._n = 0
        self._tmin = np.zeros(16, np.uint64)
        self._tmax = np.zeros(16, np.uint64)
        self._bits = np.zeros((16, _BITS), np.uint8)
        self._slices = np.zeros((_NBITS, 1), np.uint64)   # the blooms bit-sliced: bit p of table j
        self._has_bloom = np.zeros(16, np.uint8)
        self._ref = np.zeros(16, np.uint8)   # the table cache's clock: set on each use of table j
        self._loaded: list = []
        self._cached: dict[int, None] = {}
        self._meta_stat = None
        self._boundary: set | None = None
        self._carry: tuple[int, set] | None = None   # (lsn, tags) of a record split by a memtable switch
        self._next_table_id = 0
        # the LSN from which the memtables hold every row this index inserted (None: none inserted).
        # Lookups take LSNs up to the split (see _split) from the saved tables and from there on from
        # the memtables; rows skipped as saved, and memtables released for reuse, raise it.
        self._mem_from: int | None = None
        self._counts = [0, 0, 0, 0]   # lsns_many: lookups, tables read, skipped by bloom, skipped by LSN range
        self._gen = 0                 # bumped whenever the saved tables or their arrays change
        self._lookup = TableLookup(self._table)   # the per-call lsns() path
        self._lookup_ring = self._lookup_gen = -1
        self._lookup_split = MAX_LSN
        self._stats = dict(tables_loaded=0, corrupt_blooms=0, flushes=0, tables_flushed=0, truncated_files=0,
                           skipped_saved=0)
        self._closed = False

    # -- open / close --

    @classmethod
    def open(cls, directory, mode: str = "primary", *, ring_size: int = 32,
             max_segments: int = _mt.USABLE_SEGMENTS, table_cache: int = 256,
             background_flush: bool = True) -> "LogIndex":
        """Open (primary: create) a LogIndex directory and load its committed state.

        ring_size memtables are kept in memory (282 KB each, 9 MB for the default 32, so a background
        flush's fsyncs overlap the filling of the next memtables); max_segments below 4095 makes memtables
        fill sooner (tests). A primary saves sealed memtables on a background thread while inserts go
        on (background_flush=False: only when the ring is exhausted, on the inserting thread).
        An RO index follows the primary's meta file and never writes.
        """
        if mode not in ("primary", "ro"):
            raise ValueError(f"mode must be 'primary' or 'ro', got {mode!r}")
        directory = Path(directory)
        if mode == "primary":
            directory.mkdir(parents=True, exist_ok=True)
        elif not directory.is_dir():
            raise FileNotFoundError(f"LogIndex directory {directory} does not exist")
        li = cls(directory, mode, ring_size, max_segments, table_cache, background_flush)
        li._load_meta(read_meta(directory))
        if li.primary:
            li._clean_leftovers()
        return li

    def close(self) -> None:
        """Flush inactive memtables (primary) and release files. The active memtable is not flushed:
        its LSNs are re-inserted after reopen from replay_needed_from()."""
        if self._closed:
            return
        try:
            if self.primary:
                self.flush()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            self.store.close()
            self._closed = True
            self._ins.arm(None, -1)

    def abandon(self) -> None:
        """Stop without flushing, as a crash would: a background flush already running finishes (the
        crash then happened just after it), nothing new is saved, files are released."""
        if self._closed:
            return
        try:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        finally:
            self.store.close()
            self._closed = True
            self._ins.arm(None, -1)

    def __enter__(self) -> "LogIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- committed state --

    def _load_meta(self, meta: Meta | None) -> None:
        meta = meta or Meta()
        self._meta_stat = self._stat_meta()
        old = self.meta
        if meta.max_table_id < old.max_table_id or meta.min_table_id < old.min_table_id:
            self._shift(self._n)  # the directory was replaced: start over
        elif self._n and meta.min_table_id > old.min_table_id:
            self._shift(min(self._n, meta.min_table_id - old.min_table_id))
        start = meta.min_table_id + self._n
        self.meta = meta
        for tid in range(start, meta.max_table_id + 1):
            self._append_table(tid, None)
        self._boundary = None
        if meta.has_tables:
            self._next_table_id = max(self._next_table_id, meta.max_table_id + 1)
            self._last_lsn = max(self._last_lsn, meta.max_lsn)
        self.ring.drop_below(meta.min_table_id)
        if not self.primary:
            # memtables whose rows the primary has all saved are FLUSHED: reusable
            self.ring.mark_flushed_covered(self._covered)
        self._gen += 1
        self._arm()

    @property
    def _last_lsn(self) -> int:
        return self._ins.last_lsn

    @_last_lsn.setter
    def _last_lsn(self, lsn: int) -> None:
        self._ins.last_lsn = lsn

    def _arm(self) -> None:
        """Hand the per-call insert the state it may rely on: the active memtable (once this index
        has inserted at all) and the LSN at or below which inserts must take the slow path (rows
        already saved, or the record a memtable switch split)."""
        if self._closed or self._mem_from is None:
            self._ins.arm(None, -1)
            return
        guard = self.meta.max_lsn if self.meta.has_tables else -1
        if self._carry is not None:
            guard = max(guard, self._carry[0])
        self._ins.arm(self.ring.active(), guard)

    def _covered(self, m: _mt.Memtable) -> bool:
        """RO: every row of memtable m is in the saved tables this index has loaded. The RO's memtables
        do not line up with the primary's tables (the primary may save a memtable before it is full,
        or an RO may start anywhere), so this is decided by LSN, never by table id."""
        if not len(m):
            return True
        if not self.meta.has_tables or not self._n or m.max_lsn > self.meta.max_lsn:
            return False
        if m.max_lsn < self.meta.max_lsn:
            return True
        # the last saved record may be split: only its pages in the saved tables are covered
        _, arr = m.order_arrays(m.max_lsn)
        return set(map(tuple, arr.tolist())) <= self._boundary_tags()

    def _split(self) -> int:
        """Lookups serve LSNs <= split from the saved tables and LSNs >= split from the memtables
        (a tag's LSN at the split, found in both, is kept once). The saved tables hold every row up to
        the meta's max LSN; the memtables every row this index inserted from the split on."""
        if self._mem_from is None:
            return MAX_LSN
        return max(self._mem_from, self.ring.released_lsn)

    def _note_skipped(self, lsn: int) -> None:
        """A row at lsn (<= the saved max LSN) was not put in a memtable: the tables serve it."""
        if self._mem_from is not None and lsn > self._mem_from:
            self._mem_from = lsn
            self._gen += 1

    def _note_inserted(self, lsn: int) -> None:
        if self._mem_from is None:
            self._mem_from = lsn
            self._gen += 1

    def _stat_meta(self):
        try:
            st = os.stat(self._meta_path)
            return st.st_ino, st.st_mtime_ns, st.st_size
        except FileNotFoundError:
            return None

    def _ensure_capacity(self, n: int) -> None:
        cap = len(self._tmin)
        if n <= cap:
            return
        cap = max(n, 2 * cap)
        self._tmin = np.resize(self._tmin, cap)
        self._tmax = np.resize(self._tmax, cap)
        self._has_bloom = np.resize(self._has_bloom, cap)
        self._ref = np.resize(self._ref, cap)
        bits = np.zeros((cap, _BITS), np.uint8)
        bits[:self._n] = self._bits[:self._n]
        self._bits = bits
        slices = np.zeros((_NBITS, (cap + 63) // 64), np.uint64)
        slices[:, :self._slices.shape[1]] = self._slices
        self._slices = slices

    def _append_table(self, tid: int, bloom: Bloom4K | None) -> None:
        """Register saved table tid, with its bloom block (read from disk when not given)."""
        j = self._n
        self._ensure_capacity(j + 1)
        if bloom is None:
            try:
                bloom = self.store.read_bloom(tid)
            except (CorruptBlockError, FileNotFoundError, OSError):
                bloom = None  # safe: the table is then always read, and its own CRC guards it
                self._stats["corrupt_blooms"] += 1
        if bloom is not None:
            raw = bloom.to_bytes()
            self._bits[j] = np.frombuffer(raw, np.uint8, _BITS, 32)
            _mt.slices_add(self._slices, self._bits[j], j)
            self._has_bloom[j] = 1
            self._tmin[j], self._tmax[j] = bloom.min_lsn, bloom.max_lsn
        else:
            self._has_bloom[j] = 0
            self._tmin[j], self._tmax[j] = 0, MAX_LSN
        self._ref[j] = 0
        self._loaded.append(None)
        self._n += 1
        self._gen += 1

    def _shift(self, drop: int) -> None:
        """Forget the first drop saved tables (truncated)."""
        n = self._n - drop
        self._tmin[:n] = self._tmin[drop:self._n].copy()
        self._tmax[:n] = self._tmax[drop:self._n].copy()
        self._has_bloom[:n] = self._has_bloom[drop:self._n].copy()
        self._ref[:n] = self._ref[drop:self._n].copy()
        self._bits[:n] = self._bits[drop:self._n].copy()
        self._bits[n:self._n] = 0
        self._slices[:] = 0
        for j in range(n):
            if self._has_bloom[j]:
                _mt.slices_add(self._slices, self._bits[j], j)
        base = self.meta.min_table_id
        for j in range(drop):
            self._cached.pop(base + j, None)
        self._loaded = self._loaded[drop:]
        self._n = n
        self._gen += 1

    def _clean_leftovers(self) -> None:
        """Primary: remove files a crash left behind (truncated segments, a temp meta file)."""
        (self.dir / (META_NAME + ".tmp")).unlink(missing_ok=True)
        removed = False
        for p in self.dir.iterdir():
            seg = parse_segment(p.name)
            if seg is not None and seg < self.meta.min_segment:
                p.unlink(missing_ok=True)
                removed = True
        if removed:
            fsync_dir(self.dir)

    def refresh(self, force: bool = False) -> bool:
        """RO: re-read the meta file if the primary replaced it (force: even if its stat looks the
        same, as a replaced file may reuse the inode within one timestamp tick); True when it changed."""
        st = self._stat_meta()
        if st == self._meta_stat and not force:
            return False
        meta = read_meta(self.dir)
        if force and (meta or Meta()) == self.meta:
            self._meta_stat = st
            return False
        self._load_meta(meta)
        return True

    def _table(self, j: int) -> _mt.Memtable:
        m = self._loaded[j]
        if m is not None:
            tid = self.meta.min_table_id + j
            self._cached.pop(tid, None)  # most recently used goes last
            self._cached[tid] = None
        else:
            tid = self.meta.min_table_id + j
            m = self.store.read_table(tid)
            self._stats["tables_loaded"] += 1
            if len(self._cached) >= self.table_cache:
                self._evict()
            self._loaded[j] = m
            self._cached[tid] = None
        return m

    def _evict(self) -> None:
        """Drop one table from the cache: the oldest not used since the clock last passed it
        (lsns() marks use in _ref from C, without touching this dict)."""
        base = self.meta.min_table_id
        for _ in range(2 * len(self._cached)):
            old = next(iter(self._cached))
            oj = old - base
            del self._cached[old]
            if 0 <= oj < self._n and self._ref[oj]:
                self._ref[oj] = 0   # a second chance: go round once more
                self._cached[old] = None
                continue
            if 0 <= oj < self._n:
                self._loaded[oj] = None
            return

    # -- insert --

    def _boundary_tags(self) -> set:
        """Tags saved at the last saved LSN (a record may be split across two tables)."""
        if self._boundary is None:
            x = self.meta.max_lsn
            tags = set()
            for j in range(self._n - 1, -1, -1):
                if self._tmax[j] < x:
                    break
                _, arr = self._table(j).order_arrays(x)
                tags.update(map(tuple, arr.tolist()))
            self._boundary = tags
        return self._boundary

    def _switch(self) -> _mt.Memtable:
        """Seal the active memtable and activate the next one."""
        # The per-call insert must never hold a memtable that is no longer ACTIVE: an insert through it
        # would land in a sealed memtable (out of LSN order with the ones after it, and under a
        # background flush that is reading it). Whoever switched re-arms it when done.
        self._ins.arm(None, -1)
        self.ring.seal()
        if not self.primary:
            self.ring.mark_flushed_covered(self._covered)
        elif self._background:
            self._collect(wait=False)
            self._start_flush()  # save the inactive memtables while inserts go on (if none is in flight)
        m = self.ring.take(self._next_table_id)
        if m is None:
            if self.primary:
                # the ring is exhausted: wait for the flush in flight, then save what is left
                self._collect(wait=True)
                m = self.ring.take(self._next_table_id)
                if m is None:
                    self._flush_tables(self.ring.inactive())
            else:
                self.refresh(force=True)  # the primary may have saved some: they become reusable
            if m is None:
                m = self.ring.take(self._next_table_id)
            if m is None:  # an RO node ahead of the primary's flushes keeps its memtables
                self.ring.grow()
                m = self.ring.take(self._next_table_id)
        self._next_table_id += 1
        return m

    def _active(self) -> _mt.Memtable:
        m = self.ring.active()
        return m if m is not None else self._switch()

    def insert(self, tag, lsn: int) -> bool:
        """Index that the record at lsn touched page tag. False when it was already indexed or saved.
        (Each instance serves this with one Cython call, InsertPath.insert, which falls back to
        _insert_slow for everything but the common case.)"""
        return self._ins.insert(tag, lsn)

    def _insert_slow(self, tag, lsn: int) -> bool:
        """insert() when the fast path cannot: validation, saved rows, memtable switches; re-arms it."""
        try:
            return self._insert_checked(tag, lsn)
        finally:
            if not self._closed:
                self._arm()

    def _insert_checked(self, tag, lsn: int) -> bool:
        self._check_open()
        lsn = _checked_lsn(lsn)
        if self.meta.has_tables and lsn <= self.meta.max_lsn:
            if lsn < self.meta.max_lsn or tuple(tag) in self._boundary_tags():
                self._stats["skipped_saved"] += 1
                self._note_skipped(lsn)
                return False
        if lsn < self._last_lsn:
            raise LsnOrderError(f"LSN {lsn} is below the last indexed LSN {self._last_lsn}")
        carry = self._carry
        if carry is not None and carry[0] == lsn and tuple(tag) in carry[1]:
            return False  # this record already put the page into the previous memtable
        m = self._active()
        if self._mem_from is None:
            self._note_inserted(lsn)
        st = m.insert(tag, lsn)
        while st == _mt.FULL or st == _mt.PREFIX_CHANGE:
            self._seal_carry(m, lsn)
            m = self._switch()
            st = m.insert(tag, lsn)
        self._last_lsn = lsn
        if st == _mt.INSERTED:
            self._ins.inserted += 1
        return st == _mt.INSERTED

    def insert_many(self, tags, lsns) -> int:
        """Insert rows (tags[i], lsns[i]) in order; LSNs must be non-decreasing. Returns rows skipped as saved."""
        try:
            return self._insert_many(tags, lsns)
        finally:
            if not self._closed:
                self._arm()

    def _insert_many(self, tags, lsns) -> int:
        self._check_open()
        tags = tag_array(tags)
        lsns = _mt._lsn_array(lsns)
        if len(tags) != len(lsns):
            raise ValueError(f"tags and lsns differ in length: {len(tags)} vs {len(lsns)}")
        if not len(lsns):
            return 0
        # every check before the first change: a refused call indexes nothing and counts nothing
        bad = np.flatnonzero(lsns[1:] < lsns[:-1])
        if len(bad):
            i = int(bad[0]) + 1
            raise LsnOrderError(f"row {i}: LSN {int(lsns[i])} is below the previous LSN {int(lsns[i - 1])}")
        keep = None
        if self.meta.has_tables and lsns[0] <= self.meta.max_lsn:
            x = self.meta.max_lsn
            keep = lsns > x
            at = np.flatnonzero(lsns == x)
            if len(at):
                bt = self._boundary_tags()
                for i in at:
                    keep[i] = tuple(tags[i].tolist()) not in bt
        first_kept = lsns[int(np.argmax(keep))] if keep is not None and keep.any() else lsns[0]
        if (keep is None or keep.any()) and first_kept < self._last_lsn:
            row = int(np.argmax(keep)) if keep is not None else 0
            raise LsnOrderError(f"row {row}: LSN {int(first_kept)} is below the last indexed LSN {self._last_lsn}")
        skipped = 0
        if keep is not None:
            skipped = int(len(lsns) - keep.sum())
            if skipped:
                self._note_skipped(int(lsns[~keep].max()))
            tags, lsns = tags[keep], lsns[keep]
            self._stats["skipped_saved"] += skipped
            if not len(lsns):
                return skipped
        i, n = 0, len(lsns)
        while i < n:
            carry = self._carry
            if carry is not None and lsns[i] == carry[0]:
                # rows of a record split by a memtable switch go one by one, through the checked path
                self._insert_checked(tuple(tags[i].tolist()), int(lsns[i]))
                i += 1
                continue
            m = self._active()
            self._note_inserted(int(lsns[i]))
            before = len(m)
            j, st = m.insert_many(tags, lsns, i)
            self._ins.inserted += len(m) - before
            if st != _mt.INSERTED:
                self._seal_carry(m, int(lsns[j]))
                self._switch()
            self._last_lsn = int(lsns[j - 1]) if j > i else self._last_lsn
            i = j
        self._last_lsn = int(lsns[-1])
        return skipped

    def _seal_carry(self, m, lsn: int) -> None:
        """Before switching memtables at lsn: remember which pages the record at lsn already has."""
        if len(m) and m.max_lsn == lsn:
            _, arr = m.order_arrays(lsn)
            tags = set(map(tuple, arr.tolist()))
            if self._carry is not None and self._carry[0] == lsn:
                tags |= self._carry[1]  # a record spread over three or more memtables
            self._carry = (lsn, tags)
        else:
            self._carry = None

    # -- flush --

    def flush(self, include_active: bool = False) -> int:
        """Primary: save every INACTIVE memtable (and the active one if asked); returns tables written."""
        self._check_open()
        if not self.primary:
            raise ReadOnlyError("an RO LogIndex never writes tables")
        self._collect(wait=True)
        done = self._stats["tables_flushed"]
        if include_active:
            m = self.ring.active()
            if m is not None and len(m):
                self.ring.seal()
                self._arm()
        todo = self.ring.inactive()
        if todo:
            self._flush_tables(todo)
        return self._stats["tables_flushed"] - done

    def _flush_tables(self, memtables: list) -> None:
        """Save memtables now (after any background flush), under one commit of the meta file."""
        if not memtables:
            return
        if not self.primary:
            raise ReadOnlyError("an RO LogIndex never writes tables")
        self._collect(wait=True)
        new = self._meta_after(memtables)
        self._commit_tables(memtables, new, self._write_tables(memtables, new))

    def _meta_after(self, memtables: list) -> Meta:
        """The meta file that commits memtables (the next table ids) after the current one."""
        ids = [m.table_id for m in memtables]
        assert ids == sorted(ids) and ids[0] == self.meta.max_table_id + 1, (ids, self.meta)
        last = memtables[-1]
        meta = self.meta
        start = meta.start_lsn if meta.has_tables else memtables[0].min_lsn
        return meta.with_(max_table_id=last.table_id, max_lsn=last.max_lsn, start_lsn=start,
                          min_table_id=meta.min_table_id if meta.has_tables else memtables[0].table_id,
                          min_segment=(meta.min_table_id if meta.has_tables else memtables[0].table_id)
                          // TABLES_PER_FILE)

    def _write_tables(self, memtables: list, new: Meta) -> list:
        """The I/O of a flush (tables and blooms fsynced, then the meta file: the commit point).
        Runs on the flush thread too: it reads only INACTIVE memtables, which nothing changes."""
        blooms = self.store.write(memtables)
        write_meta(self.dir, new)
        return blooms

    def _commit_tables(self, memtables: list, new: Meta, blooms: list) -> None:
        """After the meta file is written: serve the tables from the files, free their memtables."""
        self.meta = new
        self._meta_stat = self._stat_meta()
        for m, b in zip(memtables, blooms):
            self._append_table(m.table_id, b)
        self.ring.mark_flushed(memtables[-1].table_id)
        self._boundary = None
        self._stats["flushes"] += 1
        self._stats["tables_flushed"] += len(memtables)
        self._arm()

    def _start_flush(self) -> None:
        """Save every inactive memtable on the flush thread (one at a time); _collect commits it."""
        if self._bg is not None:
            return
        todo = self.ring.inactive()
        if not todo:
            return
        new = self._meta_after(todo)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logindex-flush")
        self._bg = (self._pool.submit(self._write_tables, todo, new), todo, new)

    def _collect(self, wait: bool) -> None:
        """Commit the background flush once its files are written (wait: block until then).
        Its error (a failed write or fsync) is raised here; its memtables stay INACTIVE and unsaved."""
        bg = self._bg
        if bg is None or not (wait or bg[0].done()):
            return
        self._bg = None
        blooms = bg[0].result()
        self._commit_tables(bg[1], bg[2], blooms)

    # -- truncation --

    def truncate(self, lsn: int) -> int:
        """Primary: remove whole table files whose max LSN is below lsn (never the one holding the
        last saved table). The meta file is updated first, then files are deleted. Returns files removed."""
        self._check_open()
        lsn = _checked_lsn(lsn)
        if not self.primary:
            raise ReadOnlyError("an RO LogIndex never truncates")
        self._collect(wait=True)
        meta = self.meta
        if not meta.has_tables:
            return 0
        last_seg = meta.max_table_id // TABLES_PER_FILE
        seg = meta.min_segment
        while seg < last_seg:
            last_j = (seg + 1) * TABLES_PER_FILE - 1 - meta.min_table_id
            if self._tmax[last_j] >= lsn:
                break
            seg += 1
        removed = seg - meta.min_segment
        if not removed:
            return 0
        new_min = seg * TABLES_PER_FILE
        drop = new_min - meta.min_table_id
        start = int(self._tmin[drop]) if self._has_bloom[drop] else int(self._table(drop).min_lsn)
        new = meta.with_(min_table_id=new_min, min_segment=seg, start_lsn=start)
        write_meta(self.dir, new)
        self._shift(drop)
        self.meta = new
        self._meta_stat = self._stat_meta()
        self.ring.drop_below(new_min)
        for s in range(meta.min_segment, seg):
            self.store.remove_segment(s)
        fsync_dir(self.dir)
        self._stats["truncated_files"] += removed
        return removed

    # -- lookup --

    def _served_tables(self, split: int) -> int:
        """Saved tables 0..n-1 that may hold LSNs <= split (a table without a bloom may hold any)."""
        n = self._n
        while n and self._tmin[n - 1] > split:
            n -= 1
        return n

    def lsns(self, tag, min_lsn: int = 0, max_lsn: int = MAX_LSN) -> np.ndarray:
        """Every LSN that touched tag within [min_lsn, max_lsn], ascending (uint64)."""
        if min_lsn.__class__ is not int or max_lsn.__class__ is not int:   # C would truncate 20.5 to 20
            min_lsn, max_lsn = _checked_lsn(min_lsn), _checked_lsn(max_lsn)
        if self._closed or not self.primary:
            self._check_open()
            self.refresh()
        if self._lookup_ring != self.ring.version or self._lookup_gen != self._gen:
            self._sync_lookup()
        try:
            return self._lookup.lsns(tag, min_lsn, max_lsn)
        except OverflowError:
            _checked_lsn(min_lsn)    # an int bound out of range: the same ValueError as any bad LSN
            _checked_lsn(max_lsn)
            raise                    # else a tag field out of range

    def _sync_lookup(self) -> None:
        """Hand the per-call lookup the current saved tables and memtables."""
        split = self._split()
        self._lookup.set_tables(self._slices, self._has_bloom, self._tmin, self._tmax, self._served_tables(split),
                                self._loaded, self.ring.live_tables(), self._k, self._ref, split)
        self._lookup_ring, self._lookup_gen = self.ring.version, self._gen

    def lsns_many(self, tags, min_lsn: int = 0, max_lsn: int = MAX_LSN) -> tuple[np.ndarray, np.ndarray]:
        """lsns() for many tags: (offsets int64[n+1], lsns uint64); tag i owns lsns[offsets[i]:offsets[i+1]]."""
        min_lsn, max_lsn = _checked_lsn(min_lsn), _checked_lsn(max_lsn)
        self._check_open()
        if not self.primary:
            self.refresh()
        tags = tag_array(tags)
        split = self._split()
        n = self._served_tables(split)
        live = self.ring.live_tables()
        tables = self._loaded
        while True:
            res = _mt.lookup_tables(tags, self._slices, self._has_bloom, self._k, self._tmin, self._tmax, n,
                                    tables, live, min_lsn, max_lsn, split)
            if res[0] == "ok":
                break
            # load the candidate tables; a private copy of the list keeps all of them for this call
            tables = list(tables)
            for j in res[1].tolist():
                tables[j] = self._table(j)
        _, offsets, out, counts = res
        c = self._counts
        c[0] += len(tags)
        c[1] += int(counts[0])
        c[2] += int(counts[1])
        c[3] += int(counts[2])
        return offsets, out

    def iter_lsn(self, from_lsn: int = 0) -> Iterator[tuple[int, PageTag]]:
        """(lsn, PageTag) in LSN order from the first LSN >= from_lsn, across tables and memtables."""
        arrays = self.iter_lsn_arrays(from_lsn)     # checks from_lsn now, not at the first next()
        return (pair for lsns, tags in arrays for pair in zip(lsns.tolist(), tags_from_array(tags)))

    iter_from = iter_lsn   # the DESIGN's name for the LSN iterator

    def iter_lsn_arrays(self, from_lsn: int = 0) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """iter_lsn() as (lsns, tags) arrays, one pair per table or memtable."""
        from_lsn = _checked_lsn(from_lsn)
        self._check_open()
        return self._lsn_arrays(from_lsn)

    def _lsn_arrays(self, from_lsn: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        self._check_open()
        if not self.primary:
            self.refresh()
        split = self._split()
        at_split = set()   # pages the tables gave at the split LSN: the memtables do not repeat them
        for j in range(self._served_tables(split)):
            if self._tmax[j] < from_lsn:
                continue
            lsns, tags = self._table(j).order_arrays(from_lsn)
            k = int(np.searchsorted(lsns, split, "right"))
            lsns, tags = lsns[:k], tags[:k]
            if len(lsns) and lsns[-1] == split:
                at_split.update(map(tuple, tags[lsns == split].tolist()))
            if len(lsns):
                yield lsns, tags
        for m in self.ring.live_tables():
            if len(m) and m.max_lsn >= from_lsn and m.max_lsn >= split:
                lsns, tags = m.order_arrays(max(from_lsn, split))
                if at_split and len(lsns) and lsns[0] == split:
                    keep = np.array([not (l == split and tuple(t) in at_split)
                                     for l, t in zip(lsns.tolist(), tags.tolist())], bool)
                    lsns, tags = lsns[keep], tags[keep]
                if len(lsns):
                    yield lsns, tags

    # -- state --

    def replay_needed_from(self) -> int:
        """The LSN from which the caller must re-insert after open (inclusive); saved entries are skipped."""
        return self.meta.max_lsn if self.meta.has_tables else 0

    @property
    def start_lsn(self) -> int:
        """The smallest LSN still indexed on disk (rises with truncation)."""
        return self.meta.start_lsn

    @property
    def max_saved_lsn(self) -> int:
        return self.meta.max_lsn if self.meta.has_tables else 0

    def stats(self) -> dict:
        """Counters: lookups, tables read / skipped by bloom / skipped by LSN range, flushes, ..."""
        st = dict(self._stats)
        st["inserted"] = self._ins.inserted
        counts = [a + b for a, b in zip(self._counts, self._lookup.counters())]
        st["lookups"], st["tables_read"], st["tables_skipped_bloom"], st["tables_skipped_range"] = counts
        walked = st["tables_read"] + st["tables_skipped_bloom"]
        st["bloom_skip_rate"] = st["tables_skipped_bloom"] / walked if walked else 0.0
        st["saved_tables"] = self._n
        st["memtables"] = self.ring.states()
        st["meta"] = self.meta
        return st

    def _check_open(self) -> None:
        if self._closed:
            raise LogtideError("this LogIndex is closed")

    def __repr__(self) -> str:
        return (f"LogIndex({str(self.dir)!r}, mode={self.mode!r}, saved tables {self.meta.min_table_id}.."
                f"{self.meta.max_table_id}, memtables {self.ring.states()})")
