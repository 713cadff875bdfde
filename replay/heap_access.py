"""HeapAccess: the primary's tuple operations on its buffered heap pages, and the free-space choice.

Inserts, updates and deletes change the page(s) under the WAL insert lock and the page lock(s),
stamp them with the record's LSN and queue the record (wal_insert.py); each returns once its record
is durable. A new tuple goes to its relation's last block when it fits there, else to a new block
(the relation grows by one). A page may carry a change whose record is not durable yet: a read of
such a page on the primary waits until it is, so no read sees a record that is not durable.
"""
from __future__ import annotations

from typing import Iterator

from logtide._ext import page as pg
from logtide._ext import xlogwriter as xw
from logtide._ext.heap_insert import apply_insert
from logtide.errors import InvalidArgument, LogtideError
from logtide.replay.buffer_pool import BufferPool
from logtide.replay.meta_queue import MetaQueue
from logtide.replay.mini_trans import MiniTransLocks
from logtide.replay.page_index import PageIndex
from logtide.replay.page_store import PageStore
from logtide.replay.row_address import DB, SPC, check_page_tag, check_rel, check_tid, rel_tag
from logtide.replay.wal_insert import WalInsert
from logtide.replay.wal_log import WalLog


class TupleNotFoundError(LogtideError, KeyError):
    """No live tuple at that (block, slot)."""


class HeapAccess(WalInsert):
    """Tuple inserts, updates, deletes and reads over the buffer pool, logged through the WAL insert
    path it extends: one object, because the single-tuple insert in C (_ext/primary_insert.pyx)
    works on both halves' state (`pool`, `locks`, `_rel_blocks`, `_load`, `_check` here)."""

    def __init__(self, log, wal: WalLog, index: PageIndex, queue: MetaQueue, pool: BufferPool,
                 locks: MiniTransLocks, store: PageStore) -> None:
        super().__init__(log, wal, index, queue)
        self.pool, self.locks = pool, locks
        self._load = store.read_into
        self._rel_blocks: dict[int, int] = {}   # relation -> blocks (never rebound: the C insert holds it)

    def resume(self, rel_blocks: dict[int, int], next_xid: int) -> None:
        """Take writes from where recovery left off: the relations' sizes and the next xid."""
        self._rel_blocks.update(rel_blocks)
        self._xid = next_xid

    # ------------------------------------------------------------------ free space
    def _target_block(self, rel: int, size: int, avoid: int = -1) -> tuple[int, bool]:
        """The block a new tuple of `size` bytes goes to: the relation's last block if it fits, else a new one."""
        n = self._rel_blocks.get(rel, 0)
        if n and n - 1 != avoid:
            tag = rel_tag(rel, n - 1)
            f, _ = self.pool.pin(tag, self._load)
            try:
                page = self.pool.frames[f]
                if not pg.is_new(page) and pg.fits(page, size):
                    return n - 1, False
            finally:
                self.pool.unpin(f)
        self._rel_blocks[rel] = n + 1
        return n, True

    def _target_frame(self, rel: int, size: int) -> tuple[int, bool, int]:
        """_target_block for one tuple, keeping the last block's frame pinned when the tuple goes
        there: (block, new block?, pinned frame or -1 for a new block, which the caller pins)."""
        n = self._rel_blocks.get(rel, 0)
        if n:
            f, _ = self.pool.pin((SPC, DB, rel, 0, n - 1), self._load)
            page = self.pool.frames[f]
            if not pg.is_new(page) and pg.fits(page, size):
                return n - 1, False, f
            self.pool.unpin(f)
        self._rel_blocks[rel] = n + 1
        return n, True, -1

    # ------------------------------------------------------------------ writes
    def _check(self, rel: int, data) -> bytes:
        if self._closed:
            raise LogtideError("the primary is closed")
        check_rel(rel)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidArgument(f"a tuple is bytes, not {type(data).__name__}")
        data = bytes(data)
        if not 1 <= len(data) <= pg.MAX_TUPLE:
            raise InvalidArgument(f"a tuple is 1..{pg.MAX_TUPLE} bytes, got {len(data)}")
        return data

    def insert(self, rel: int, data: bytes) -> tuple[int, int]:
        """Insert a tuple in Python steps (the C insert does the same in one call); its tid."""
        data = self._check(rel, data)
        with self._wal_lock:
            block, init, f = self._target_frame(rel, len(data))   # pinned from here (f >= 0)
            tag = (SPC, DB, rel, 0, block)
            try:
                with self.locks.page_lock(tag):
                    if f < 0:
                        f, _ = self.pool.pin(tag, self._load)
                    lsn = self._assigned_lsn + 1
                    off, rec = apply_insert(self.pool.frames, f, tag, data, self._next_xid(), lsn, init)
                    self.pool.mark_dirty(f, lsn)
                    ticket = self._queue(lsn, rec, [tag])
            finally:
                if f >= 0:
                    self.pool.unpin(f)
        self.committer.wait(ticket)   # durable: no lock held while the group's fsync runs
        return block, off

    def insert_many(self, rel: int, tuples) -> list[tuple[int, int]]:
        """One WAL record per tuple, their LSNs following the last queued one, appended in one group
        commit; their tids. The pages are changed first, stamped with those LSNs (they may not be
        flushed before the append is durable)."""
        datas = [self._check(rel, d) for d in tuples]
        if not datas:
            return []
        with self._wal_lock:
            base = self._assigned_lsn
            recs, tags, tids = [], [], []
            for i, data in enumerate(datas):
                lsn = base + 1 + i
                block, init = self._target_block(rel, len(data))
                tag = rel_tag(rel, block)
                with self.locks.page(tag):
                    f, _ = self.pool.pin(tag, self._load)
                    try:
                        off, rec = apply_insert(self.pool.frames, f, tag, data, self._next_xid(), lsn, init)
                        recs.append(rec)
                        self.pool.mark_dirty(f, lsn)
                    finally:
                        self.pool.unpin(f)
                tags.append([tag])
                tids.append((block, off))
            ticket = self._queue_many(base + 1, recs, tags)
        self.committer.wait(ticket)
        return tids

    def _live(self, rel: int, tid) -> tuple[tuple, int]:
        check_rel(rel)
        block, off = check_tid(tid)
        if block >= self._rel_blocks.get(rel, 0):
            raise TupleNotFoundError(f"no tuple {rel}:{tid}")
        return rel_tag(rel, block), off

    def update(self, rel: int, tid, data: bytes) -> tuple[int, int]:
        """Replace the tuple at `tid` (on its page if it fits, else on the free-space choice); the new tid."""
        data = self._check(rel, data)
        with self._wal_lock:
            otag, ooff = self._live(rel, tid)
            f, _ = self.pool.pin(otag, self._load)
            try:
                opage = self.pool.frames[f]
                if pg.get(opage, ooff) is None:
                    raise TupleNotFoundError(f"no live tuple {rel}:{tuple(tid)}")
                same = pg.fits(opage, len(data))
            finally:
                self.pool.unpin(f)
            if same:
                nblock, init = otag[4], False
            else:
                nblock, init = self._target_block(rel, len(data), avoid=otag[4])
            ntag = rel_tag(rel, nblock)
            tags = [ntag] if same else [ntag, otag]
            with self.locks.record(tags):
                fn, _ = self.pool.pin(ntag, self._load)
                fo = fn if same else self.pool.pin(otag, self._load)[0]
                try:
                    npage = self.pool.frames[fn]
                    noff = 1 if init else pg.nslots(npage) + 1
                    lsn = self._assigned_lsn + 1
                    rec = xw.heap_update(ntag, noff, data, otag, ooff, xid=self._next_xid(), prev=lsn - 1,
                                         init=init)
                    pg.kill(self.pool.frames[fo], ooff)
                    if init:
                        pg.init(npage)
                    pg.add(npage, noff, data)
                    for fr in {fn, fo}:
                        pg.set_lsn(self.pool.frames[fr], lsn)
                        self.pool.mark_dirty(fr, lsn)
                    ticket = self._queue(lsn, rec, tags)
                finally:
                    self.pool.unpin(fn)
                    if fo != fn:
                        self.pool.unpin(fo)
        self.committer.wait(ticket)
        return nblock, noff

    def delete(self, rel: int, tid) -> None:
        """Kill the tuple at `tid`, durable on return."""
        if self._closed:
            raise LogtideError("the primary is closed")
        with self._wal_lock:
            tag, off = self._live(rel, tid)
            with self.locks.page(tag):
                f, _ = self.pool.pin(tag, self._load)
                try:
                    page = self.pool.frames[f]
                    if pg.get(page, off) is None:
                        raise TupleNotFoundError(f"no live tuple {rel}:{tuple(tid)}")
                    lsn = self._assigned_lsn + 1
                    rec = xw.heap_delete(tag, off, xid=self._next_xid(), prev=lsn - 1)
                    pg.kill(page, off)
                    pg.set_lsn(page, lsn)
                    self.pool.mark_dirty(f, lsn)
                    ticket = self._queue(lsn, rec, [tag])
                finally:
                    self.pool.unpin(f)
        self.committer.wait(ticket)

    # ------------------------------------------------------------------ reads
    def read_page(self, tag) -> tuple[bytes, int]:
        """The page's bytes and the write LSN they reflect, once any change in flight on it is durable."""
        tag = check_page_tag(tag)
        with self.locks.page(tag):
            lsn = self.write_lsn
            f, _ = self.pool.pin(tag, self._load)
            try:
                page = self.pool.frames[f].tobytes()
            finally:
                self.pool.unpin(f)
        if pg.get_lsn(page) > lsn:
            with self._wal_lock:
                pass               # the writer that changed the page has queued its record
            self.committer.drain()
            lsn = self.write_lsn
        return page, lsn

    def get(self, rel: int, tid) -> bytes | None:
        """The live tuple at `tid`, or None."""
        check_rel(rel)
        block, off = check_tid(tid)
        if block >= self._rel_blocks.get(rel, 0):
            return None
        return pg.get(self.read_page(rel_tag(rel, block))[0], off)

    def scan(self, rel: int) -> Iterator[tuple[tuple[int, int], bytes]]:
        """Every live tuple of `rel` as ((block, slot), bytes)."""
        check_rel(rel)          # now, not at the first next(): "16384" is no relation, not an empty one
        return (((b, off), t) for b in range(self._rel_blocks.get(rel, 0))
                for off, t in pg.items(self.read_page(rel_tag(rel, b))[0]).items())

    def nblocks(self, rel: int) -> int:
        check_rel(rel)
        return self._rel_blocks.get(rel, 0)

    def relations(self) -> dict[int, int]:
        return dict(self._rel_blocks)
