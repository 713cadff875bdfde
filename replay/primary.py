"""Primary: executes tuple writes, logs them as WAL on the log service, streams WAL meta to RO nodes.

Write path (group commit, as PostgreSQL's WAL insert + XLogFlush): under the WAL insert lock and
the page lock(s), the record takes the next LSN (the primary is its log's only writer), the change
is applied to the buffered page(s) with that LSN, and the record is queued. Then, with no lock held,
one writer at a time appends every queued record with one `append_many` (one fsync) and publishes
them in LSN order: LogIndex, meta queue, then the write LSN. A write returns once its record is
durable. Pages newer than the write LSN are never flushed, and reads of such a page on the primary
wait until it is durable. Checkpoints flush dirty pages through the double-write PageStore, but
only pages whose LSN every RO node has applied (an RO node must never read a page from its own
future), then advance the consistent LSN, and truncate the log and the LogIndex below
min(consistent LSN, every RO node's min used LSN).
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from logtide._ext import page as pg
from logtide._ext.heap_insert import apply_insert
from logtide._ext.primary_insert import SingleInsert
from logtide._ext import xlogwriter as xw
from logtide.engine.dir_lock import DirLock
from logtide.engine.group_commit import open_committer
from logtide.errors import InvalidArgument, LogtideError
from logtide.replay.buffer_pool import BufferPool
from logtide.replay.control_file import Control, read_control, write_control
from logtide.replay.meta_queue import MetaQueue
from logtide.replay.mini_trans import MiniTransLocks
from logtide.replay.page_index import PageIndex
from logtide.replay.page_redo import redo_pages
from logtide.replay.page_store import PageStore
from logtide.replay.replica_set import FRESH, REPLICA_TIMEOUT_S, ReplicaSet
from logtide.replay.row_address import DB, SPC, check_page_tag, check_rel, check_tid, rel_tag
from logtide.replay.wal_frames import FramedWal, needs_frames
from logtide.replay.wal_log import WalLog

log = logging.getLogger("logtide.replay.primary")

PAGES_DIR, LOG_DIR, INDEX_DIR = "pages", "log", "logindex"
PRIMARY_LOCK = "primary.lock"
RECOVERY_RUN_BYTES = 64 << 20   # WAL read and redone at a time at open
RECOVERY_RUN_MAPPED = 1 << 30   # the same when the log is read in place: no copy held, fewer pins per page
SMALL_GROUP = 64   # up to this many block references a group is indexed row by row, not through arrays


class TupleNotFoundError(LogtideError, KeyError):
    """No live tuple at that (block, slot)."""


class Primary:
    """The read-write node. `Primary.open(dir)` embeds the log service; pass `log=` to share one, or
    to write to a replicated log (`connect_logservice("h1:p1,h2:p2,h3:p3")`)."""

    # () -> the cluster's truncation LSN (engine/hakeeper/truncation_hold.py), or None: no cluster hold
    cluster_hold: Callable[[], int] | None = None

    def __init__(self, directory: str | os.PathLike, log=None, *, pool_pages: int = 2048,
                 checkpoint_interval: float = 1.0, logindex_segments: int | None = None, start: bool = True,
                 replica_timeout: float = REPLICA_TIMEOUT_S):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        # one primary per shared directory (RO nodes only read it); a dead process's lock is gone
        self._dir_lock = DirLock(self.dir, PRIMARY_LOCK, "replay directory (primary)")
        try:
            self._open(log, pool_pages, checkpoint_interval, logindex_segments, start, replica_timeout)
        except BaseException:
            self._dir_lock.release()
            raise

    def _open(self, log, pool_pages, checkpoint_interval, logindex_segments, start, replica_timeout) -> None:
        self._own_log = log is None
        if log is None:
            from logtide.engine.logservice import LogService
            log = LogService.open(self.dir / LOG_DIR)
        elif needs_frames(log):
            log = FramedWal(log, writer=True)   # a replicated log: WAL LSNs stay dense, in frames
        self.log_service = log
        self.wal = WalLog(log)
        self.store = PageStore(self.dir / PAGES_DIR, writer=True)
        self.logindex_segments = logindex_segments
        self.index = PageIndex.open(self.dir / INDEX_DIR, "primary", logindex_segments)
        self.pool = BufferPool(pool_pages, evict_dirty=self._write_out)
        self.locks = MiniTransLocks()
        self.queue = MetaQueue()
        self._wal_lock = threading.RLock()
        self._ckpt_lock = threading.Lock()
        self._rel_blocks: dict[int, int] = {}
        self.replica_set = ReplicaSet(log, self.wal.latest_lsn, replica_timeout)
        self.replicas = self.replica_set.states     # node id -> ReplicaState
        self._replica_lock = self.replica_set.lock
        # a write may wait in pin() for a dead RO node's pages until that node is dropped: never give up first
        self.pool.pin_wait_s = max(self.pool.pin_wait_s, 2 * self.replica_timeout)
        self.write_lsn = 0
        self.consistent_lsn = 0
        self.truncated_lsn = log.get_truncated_lsn()   # LSNs at or below it may be gone (log and LogIndex)
        self.checkpoints = 0
        self._closed = False     # no more writes: closed, crashed, or stopped by a failed log write
        self._released = False   # close()/crash() gave back the directory lock and the files
        ctl = read_control(self.dir)
        self._xid = ctl.next_xid
        self.consistent_lsn = ctl.consistent_lsn
        self.recovered_records = self._recover(ctl)
        self._assigned_lsn = self.write_lsn   # the LSN of the newest record queued (write LSN: durable)
        self.committer = open_committer(log, publish=self._publish_group, write_group=self._write_group,
                                        on_fail=self._stop_writes)
        self._pipelined = self.committer.pipelined
        # the whole single-tuple insert in one C call (a pipelined committer queues without waiting)
        self._single = SingleInsert(self) if self._pipelined else None
        self.replica_set.adopt_readers()
        self._stop = threading.Event()
        self._ckpt_thread = None
        if start and checkpoint_interval > 0:
            self._ckpt_thread = threading.Thread(target=_checkpoints, args=(weakref.ref(self), self._stop,
                                                                            checkpoint_interval),
                                                 name="checkpointer", daemon=True)
            self._ckpt_thread.start()

    @classmethod
    def open(cls, directory: str | os.PathLike, **options) -> "Primary":
        """Open (or create) the primary of `directory`, recovering from its log."""
        return cls(directory, **options)

    # ------------------------------------------------------------------ recovery
    def _load(self, tag, frame) -> None:
        self.store.read_into(tag, frame)

    def _recover(self, ctl: Control) -> int:
        """Redo the WAL after the checkpoint's consistent LSN onto the stored pages, and index the
        WAL the LogIndex has not saved yet. Returns the records redone."""
        for spc, db, rel, fork in self.store.relations():
            if (spc, db, fork) == (SPC, DB, 0):
                self._rel_blocks[rel] = self.store.nblocks(spc, db, rel, fork)
        latest = self.wal.latest_lsn()
        self.write_lsn = latest  # all of it is durable: recovered pages may be flushed
        first = self.wal.first_lsn()
        index_from = max(self.index.replay_needed_from(), first)
        redo_from = max(ctl.consistent_lsn + 1, first)
        n = 0
        lsn = min(index_from, redo_from)
        run = RECOVERY_RUN_MAPPED if self.wal.reads_in_place else RECOVERY_RUN_BYTES
        while lsn <= latest:
            # big runs: each page is pinned once per run (page_redo.py), so fewer runs, fewer pins
            refs = self.wal.read_refs(lsn, run)
            if refs is None:
                break
            tags, rl = refs.tags, refs.lsn
            keep = rl >= index_from
            self.index.add(tags[keep], rl[keep])
            self._xid = max(self._xid, refs.max_xid + 1)
            ours = (tags[:, 0] == SPC) & (tags[:, 1] == DB) & (tags[:, 3] == 0)
            for r in np.unique(tags[ours, 2]).tolist():
                top = int(tags[ours & (tags[:, 2] == r), 4].max()) + 1
                self._rel_blocks[r] = max(self._rel_blocks.get(r, 0), top)
            todo = rl >= redo_from
            redo_pages(self.pool, self._load, refs.bufs, refs.buf_id[todo], tags[todo], rl[todo], refs.rec_off[todo],
                       refs.rec_len[todo])
            n += max(0, min(refs.next_lsn - 1, latest) - max(lsn, redo_from) + 1)
            lsn = refs.next_lsn
        low = self.pool.min_rec_lsn()
        self.consistent_lsn = max(self.consistent_lsn, latest if low == 0 else low - 1)
        return n

    # ------------------------------------------------------------------ writes
    def _next_xid(self) -> int:
        x = self._xid & 0xFFFFFFFF
        self._xid += 1
        return x

    def _queue(self, lsn: int, rec: bytes, tags: list[tuple]) -> int:
        """Under the WAL insert lock and the page lock(s), once the page(s) carry the change: queue the
        record of LSN `lsn` (the next one); the ticket to wait on."""
        if self._pipelined:
            ticket = self.committer.enqueue(rec, (rec, tags))
            if ticket != lsn:
                self._log_mismatch(ticket, lsn)
        else:
            ticket = self.committer.enqueue((lsn, [rec], [tags]))
        self._assigned_lsn = lsn
        return ticket

    def _log_mismatch(self, ticket: int, lsn: int) -> None:
        """The record queued for LSN `lsn` got `ticket`: the page carries an LSN its record did not
        get; fail the committer and raise."""
        exc = LogtideError(f"the primary's log was appended to by someone else (LSN {ticket}, expected "
                           f"{lsn}); stopping")
        self.committer.fail(exc)
        raise exc

    def _stop_writes(self, exc: BaseException) -> None:
        """The pipelined committer failed: pages may hold changes the log does not; stop (a restart
        redoes the log)."""
        self._closed = True

    def _publish_group(self, items: list[tuple], lsns: list[int]) -> None:
        """The pipelined committer's publication of durable records, in LSN order: LogIndex, meta
        queue, write LSN."""
        if len(items) == 1:
            tags = items[0][1]
            lsn_of_tags = lsns * len(tags)
        else:
            tags, lsn_of_tags = [], []
            for (_, ts), lsn in zip(items, lsns):
                tags.extend(ts)
                lsn_of_tags.extend([lsn] * len(ts))
        if len(tags) <= SMALL_GROUP:
            self.index.add_rows(tags, lsn_of_tags)
        else:
            self.index.add(np.array(tags, dtype=np.uint32).reshape(-1, 5), np.array(lsn_of_tags, dtype=np.uint64))
        self.queue.push_many(lsns, [xw.wal_meta(rec) for rec, _ in items])
        self.write_lsn = lsns[-1]

    def _write_group(self, group: list[tuple], handoff) -> None:
        """The leader committer's write: append the group's records with one fsync, then publish
        them in order. The previous group's writers are woken just before the append (handoff)."""
        recs = [r for _, rs, _ in group for r in rs]
        handoff()
        try:
            first = self.wal.append_many(recs)
        except BaseException:
            self._closed = True  # pages hold changes the log does not: stop; a restart redoes the log
            raise
        if first != group[0][0]:
            self._closed = True
            raise LogtideError(f"the primary's log was appended to by someone else (LSN {first}, expected "
                               f"{group[0][0]}); stopping")
        lsns, tags = [], []
        for lsn, _, tag_lists in group:
            for k, ts in enumerate(tag_lists):
                lsns.extend([lsn + k] * len(ts))
                tags.extend(ts)
        self.index.add(np.array(tags, dtype=np.uint32).reshape(-1, 5), np.array(lsns, dtype=np.uint64))
        self.queue.push_many(range(first, first + len(recs)), [xw.wal_meta(r) for r in recs])
        self.write_lsn = first + len(recs) - 1

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
        """Insert a tuple; returns its tid (block, slot). Durable in the log on return."""
        if self._single is not None:   # checks as _check does; durable, no lock held during the fsync
            return self._single.insert_durable(rel, data)
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
        """Batch insert: one WAL record per tuple, appended in one group commit; their tids.

        The records' LSNs follow the last queued LSN (the primary is its log's only writer), so the pages
        are changed first, stamped with those LSNs, and may not be flushed before the append is durable.
        """
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
            if self._pipelined:
                for i, rec in enumerate(recs):
                    ticket = self._queue(base + 1 + i, rec, tags[i])
            else:
                self._assigned_lsn = base + len(recs)
                ticket = self.committer.enqueue((base + 1, recs, tags))
        self.committer.wait(ticket)
        return tids

    def _live(self, rel: int, tid) -> tuple[tuple, int]:
        check_rel(rel)
        block, off = check_tid(tid)
        if block >= self._rel_blocks.get(rel, 0):
            raise TupleNotFoundError(f"no tuple {rel}:{tid}")
        return rel_tag(rel, block), off

    def update(self, rel: int, tid, data: bytes) -> tuple[int, int]:
        """Replace the tuple at `tid`; returns the new tid (same page if it fits, else another page)."""
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
        """Delete the tuple at `tid`."""
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
        """The page's bytes and the write LSN they reflect (a change still in flight is waited for:
        no read sees a record that is not durable)."""
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
        for b in range(self._rel_blocks.get(rel, 0)):
            for off, t in pg.items(self.read_page(rel_tag(rel, b))[0]).items():
                yield (b, off), t

    def nblocks(self, rel: int) -> int:
        return self._rel_blocks.get(rel, 0)

    def relations(self) -> dict[int, int]:
        return dict(self._rel_blocks)

    # ------------------------------------------------------------------ replicas
    @property
    def replica_timeout(self) -> float:
        return self.replica_set.timeout

    @property
    def dropped(self) -> dict[int, str]:
        """RO node id -> why it was dropped (until it re-syncs)."""
        return self.replica_set.dropped

    @property
    def replicas_dropped(self) -> int:
        return self.replica_set.drops

    def subscribe(self, node_id: int, index_from: int = 0, mode: int = FRESH) -> tuple[int, int]:
        """Register an RO node; returns (start LSN, ready LSN).

        The node is streamed WAL meta from the start LSN: the consistent LSN + 1 (every change before
        it is on storage), or `index_from` when that is lower and not 0 (a fresh node's LogIndex
        `replay_needed_from()`, or a running node re-attaching with its min used LSN). It may serve
        reads once it has applied the ready LSN (every page on storage is at or below it). Until it
        reports, the flush limit stays at the consistent LSN.

        `mode` is FRESH (a new node), RESUME (a running node re-attaching: it keeps its cached
        pages, which is safe only while this primary, or the cluster's truncation hold it adopted,
        still holds flushing and truncation for it) or RESYNC (a node that dropped its cache).
        Refused with TruncatedSubscribeError when `index_from` is at or below the truncation point
        (that WAL may be gone), and a RESUME with ReplicaDroppedError when the node is not held
        (it was dropped, or nobody held the log for it): such a node re-syncs from storage, then
        subscribes with RESYNC.
        """
        with self._wal_lock:   # no record is queued meanwhile: the write LSN is the ready LSN
            return self.replica_set.subscribe(node_id, index_from, mode,
                                              gone=max(self.truncated_lsn, self.wal.first_lsn() - 1),
                                              consistent_lsn=self.consistent_lsn, ready=self.write_lsn)

    def release_hold(self, node_id: int) -> None:
        """Stop holding the log for `node_id` without counting a drop: that RO node became this primary."""
        self.replica_set.release(node_id)

    def unsubscribe(self, node_id: int) -> None:
        """An RO node closed its link: drop it (it no longer holds back flushing or truncation)."""
        self.replica_set.drop(node_id, "it closed its link")

    def expire_replicas(self) -> list[int]:
        """Drop every RO node not heard from for longer than the replica timeout; the ids dropped."""
        return self.replica_set.expire()

    def check_following(self, node_id: int) -> None:
        """Raise ReplicaDroppedError (or ReplicaError) unless `node_id` is a subscribed RO node (a node
        only held since this primary opened must subscribe again first)."""
        self.replica_set.check_following(node_id)

    def feedback(self, message: bytes) -> None:
        """An RO node's (apply LSN, min used LSN) report (a meta_stream feedback message)."""
        self.replica_set.feedback(message, self.write_lsn)

    def flush_limit(self) -> int:
        """The highest page LSN that may be written to storage: every live RO node has applied it."""
        return self.replica_set.flush_limit()   # a dead node must not pin it (the eviction path calls this too)

    def own_truncation_point(self) -> int:
        """What this primary itself no longer needs: below the consistent LSN and the LogIndex's
        last saved LSN (a restart or a new RO node indexes the WAL from there). No RO node's hold."""
        return max(0, min(self.consistent_lsn, self.index.max_saved_lsn - 1))

    def truncation_point(self) -> int:
        """Log and LogIndex entries at or below this LSN are no longer needed by anyone: below
        own_truncation_point(), every RO node's min used LSN, and the cluster's truncation LSN
        (`cluster_hold`, HAKeeper's, when set)."""
        low = self.replica_set.truncation_hold(self.own_truncation_point())
        if self.cluster_hold is not None:
            low = min(low, self.cluster_hold())
        return max(0, low)

    def drop_if_quiet(self, node_id: int, quiet_s: float, why: str) -> bool:
        """Drop RO node `node_id` if no report came from it for `quiet_s` seconds (the cluster's
        keeper declared it gone; a node that reports is kept). True when it was dropped."""
        return self.replica_set.drop_if_quiet(node_id, quiet_s, why)

    # ------------------------------------------------------------------ checkpoints
    def _write_out(self, tag, page) -> bool:
        """Buffer-pool eviction of a dirty page: only when every RO node has applied its LSN."""
        if pg.get_lsn(page) > min(self.flush_limit(), self.write_lsn):
            return False  # an RO node has not applied it, or its WAL is not durable yet
        self.store.write(tag, page)
        return True

    def checkpoint(self) -> int:
        """Flush what may be flushed, advance the consistent LSN, truncate; returns the consistent LSN."""
        with self._ckpt_lock:
            write_lsn = self.write_lsn
            limit = min(self.flush_limit(), write_lsn)  # RO nodes have applied it, and its WAL is durable
            batch = []
            for tag, f in self.pool.dirty():
                with self.locks.page(tag):
                    if self.pool.frame_tag[f] != tag:
                        continue
                    copy, version = self.pool.copy_frame(f)
                if pg.get_lsn(copy) <= limit:
                    batch.append((tag, f, copy, version))
            if batch:
                self.store.write_many([b[0] for b in batch], [b[2] for b in batch])
                for tag, f, copy, version in batch:
                    self.pool.clear_dirty(f, version)
            low = self.pool.min_rec_lsn()
            consistent = write_lsn if low == 0 else min(write_lsn, low - 1)
            if consistent > self.consistent_lsn:
                write_control(self.dir, Control(consistent, self._xid))
                self.consistent_lsn = consistent
            self.index.flush()
            with self._replica_lock:
                acked = min([st.apply_lsn for st in self.replicas.values()], default=self.write_lsn)
            self.queue.trim(acked + 1)  # every node has these; a new one reads the log
            point = self.truncation_point()
            if point > self.truncated_lsn:
                self.wal.truncate(point)
                self.index.truncate(point + 1)
                self.truncated_lsn = point
            self.checkpoints += 1
            return self.consistent_lsn

    # ------------------------------------------------------------------ lifecycle
    def crash(self) -> None:
        """Stop without flushing anything (tests of promotion and recovery)."""
        if self._released:
            return
        self._closed = self._released = True
        self._stop.set()
        self.queue.close()
        if self._ckpt_thread:
            self._ckpt_thread.join()
        self.index.abandon()       # its background flush must not write after a successor opened the directory
        self.store.close()
        self._dir_lock.release()   # as the dead process's would be

    def close(self) -> None:
        """Make queued writes durable, checkpoint, and release the directory. A primary that
        stopped on a failed log write checkpoints nothing (its pages may hold changes the log
        does not; a restart redoes the log) but still releases everything."""
        if self._released:
            return
        stopped = self._closed or self.committer.failed is not None
        self._closed = True       # no write starts from here on
        if not stopped:
            self.committer.drain()   # writes already queued are made durable and acknowledged
        self._stop.set()
        if self._ckpt_thread and threading.current_thread() is not self._ckpt_thread:  # else finalized there
            self._ckpt_thread.join()
        try:
            if not stopped:
                self.checkpoint()
        finally:
            self._released = True
            self.queue.close()
            self.index.close()
            self.store.close()
            if self._own_log:
                self.log_service.close()
            self._dir_lock.release()

    def __enter__(self) -> "Primary":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # a primary nobody closed: make its writes durable and release its directory
        try:
            self.close()
        except Exception:  # noqa: BLE001 - partly constructed, or interpreter shutdown
            pass

    def stats(self) -> dict:
        return {"write_lsn": self.write_lsn, "consistent_lsn": self.consistent_lsn,
                "truncated_lsn": self.truncated_lsn, "checkpoints": self.checkpoints,
                "pages_written": self.store.pages_written, **self.replica_set.stats()}


def _checkpoints(ref: "weakref.ref[Primary]", stop: threading.Event, interval: float) -> None:
    """The checkpointer thread: a checkpoint every `interval` seconds until stopped. It holds the
    primary only during a checkpoint, so a primary nobody closed is still collected (and closed by
    its __del__, possibly on this thread)."""
    while not stop.wait(interval):
        primary = ref()
        if primary is None:
            return
        try:
            primary.checkpoint()
        except Exception:  # a failed checkpoint is retried; writes go on
            log.exception("checkpoint failed")
        finally:
            del primary
