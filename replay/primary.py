"""Primary: executes tuple writes, logs them as WAL on the log service, streams WAL meta to RO nodes.

A shell over its parts, one concept each: the tuple operations on buffered pages (heap_access.py),
logged through the WAL insert and group write path (wal_insert.py); page flushing, the consistent
LSN and log truncation (checkpointer.py); redo of the log at open (primary_recovery.py); and the RO
nodes it streams to, with what it holds for them (replica_set.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

from logtide._ext.primary_insert import SingleInsert
from logtide.engine.dir_lock import DirLock
from logtide.arg_checks import int_arg, seconds_arg
from logtide.replay.buffer_pool import BufferPool
from logtide.replay.checkpointer import Checkpointer
from logtide.replay.control_file import read_control
from logtide.replay.heap_access import HeapAccess, TupleNotFoundError
from logtide.replay.meta_queue import MetaQueue
from logtide.replay.mini_trans import MiniTransLocks
from logtide.replay.page_index import PageIndex
from logtide.replay.page_store import PageStore
from logtide.replay.primary_recovery import recover
from logtide.replay.replica_set import FRESH, REPLICA_TIMEOUT_S, ReplicaSet
from logtide.replay.row_address import rel_tag
from logtide.replay.wal_frames import FramedWal, needs_frames
from logtide.replay.wal_log import WalLog

__all__ = ["INDEX_DIR", "LOG_DIR", "PAGES_DIR", "PRIMARY_LOCK", "Primary", "TupleNotFoundError", "rel_tag"]

PAGES_DIR, LOG_DIR, INDEX_DIR = "pages", "log", "logindex"
PRIMARY_LOCK = "primary.lock"


class Primary:
    """The read-write node. `Primary.open(dir)` embeds the log service; pass `log=` to share one, or
    to write to a replicated log (`connect_logservice("h1:p1,h2:p2,h3:p3")`)."""

    def __init__(self, directory: str | os.PathLike, log=None, *, pool_pages: int = 2048,
                 checkpoint_interval: float = 1.0, logindex_segments: int | None = None, start: bool = True,
                 replica_timeout: float = REPLICA_TIMEOUT_S):
        self.dir = Path(directory)
        # before the directory is touched: NaN here gave no checkpointer, or a silent replica never dropped
        checkpoint_interval = seconds_arg("checkpoint_interval", checkpoint_interval, allow_none=False,
                                          zero="no checkpointer")
        replica_timeout = seconds_arg("replica_timeout", replica_timeout, allow_none=False)
        if logindex_segments is not None:
            int_arg("logindex_segments", logindex_segments, 1)
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
            # its records are WAL records: the open checks each one's CRC-32C with its frame's
            log = LogService.open(self.dir / LOG_DIR, check_records=True)
        elif needs_frames(log):
            log = FramedWal(log, writer=True)   # a replicated log: WAL LSNs stay dense, in frames
        self.log_service = log
        self.wal = WalLog(log)
        self.store = PageStore(self.dir / PAGES_DIR, writer=True)
        self.logindex_segments = logindex_segments
        self.index = PageIndex.open(self.dir / INDEX_DIR, "primary", logindex_segments)
        # the checkpointer, made below over this pool, decides which dirty page an eviction may write
        self.pool = BufferPool(pool_pages, evict_dirty=lambda tag, page: self._checkpointer.write_out(tag, page))
        self.locks = MiniTransLocks()
        self.queue = MetaQueue()
        self.replica_set = ReplicaSet(log, self.wal.latest_lsn, replica_timeout)
        self.replicas = self.replica_set.states     # node id -> ReplicaState
        # a write may wait in pin() for a dead RO node's pages until that node is dropped: never give up first
        self.pool.pin_wait_s = max(self.pool.pin_wait_s, 2 * self.replica_timeout)
        self._released = False   # close()/crash() gave back the directory lock and the files
        ctl = read_control(self.dir)
        # both made before the redo: its evictions write pages through the checkpointer, which allows
        # them up to the heap's write LSN (the log's newest at open: all durable)
        self._heap = HeapAccess(log, self.wal, self.index, self.queue, self.pool, self.locks, self.store)
        self._checkpointer = Checkpointer(self.dir, self._heap, self.pool, self.locks, self.store, self.wal,
                                          self.index, self.queue, self.replica_set,
                                          consistent_lsn=ctl.consistent_lsn, truncated_lsn=log.get_truncated_lsn())
        recovered = recover(ctl, self.store, self.wal, self.index, self.pool, self._heap.write_lsn,
                            getattr(self.log_service, "records_checked_through", 0))
        self.recovered_records = recovered.records
        self._heap.resume(recovered.rel_blocks, recovered.next_xid)
        self._checkpointer.consistent_lsn = recovered.consistent_lsn
        self.committer = self._heap.committer
        # the whole single-tuple insert in one C call (a pipelined committer queues without waiting)
        self._single = SingleInsert(self._heap) if self._heap.pipelined else None
        self.replica_set.adopt_readers()
        if start and checkpoint_interval > 0:
            self._checkpointer.start(checkpoint_interval)

    @classmethod
    def open(cls, directory: str | os.PathLike, **options) -> "Primary":
        """Open (or create) the primary of `directory`, recovering from its log."""
        return cls(directory, **options)

    @property
    def cluster_hold(self) -> Callable[[], int] | None:
        """() -> the cluster's truncation LSN (engine/hakeeper/truncation_hold.py), or None: no cluster hold."""
        return self._checkpointer.cluster_hold

    @cluster_hold.setter
    def cluster_hold(self, hold: Callable[[], int] | None) -> None:
        self._checkpointer.cluster_hold = hold

    @property
    def write_lsn(self) -> int:
        """Every record at or below it is durable and published."""
        return self._heap.write_lsn

    @property
    def consistent_lsn(self) -> int:
        """Every change at or below it is on storage."""
        return self._checkpointer.consistent_lsn

    @property
    def truncated_lsn(self) -> int:
        """LSNs at or below it may be gone (log and LogIndex)."""
        return self._checkpointer.truncated_lsn

    @property
    def checkpoints(self) -> int:
        return self._checkpointer.checkpoints

    @property
    def stopped(self) -> bool:
        """No more writes: closed, crashed, or stopped by a failed log write."""
        return self._heap.stopped

    # ------------------------------------------------------------------ writes
    def insert(self, rel: int, data: bytes) -> tuple[int, int]:
        """Insert a tuple; returns its tid (block, slot). Durable in the log on return."""
        if self._single is not None:   # checks as the Python steps do; durable, no lock held during the fsync
            return self._single.insert_durable(rel, data)
        return self._heap.insert(rel, data)

    def insert_many(self, rel: int, tuples) -> list[tuple[int, int]]:
        """Batch insert: one WAL record per tuple, appended in one group commit; their tids.

        The records' LSNs follow the last queued LSN (the primary is its log's only writer), so the pages
        are changed first, stamped with those LSNs, and may not be flushed before the append is durable.
        """
        return self._heap.insert_many(rel, tuples)

    def update(self, rel: int, tid, data: bytes) -> tuple[int, int]:
        """Replace the tuple at `tid`; returns the new tid (same page if it fits, else another page)."""
        return self._heap.update(rel, tid, data)

    def delete(self, rel: int, tid) -> None:
        """Delete the tuple at `tid`."""
        self._heap.delete(rel, tid)

    # ------------------------------------------------------------------ reads
    def read_page(self, tag) -> tuple[bytes, int]:
        """The page's bytes and the write LSN they reflect (a change still in flight is waited for:
        no read sees a record that is not durable)."""
        return self._heap.read_page(tag)

    def get(self, rel: int, tid) -> bytes | None:
        """The live tuple at `tid`, or None."""
        return self._heap.get(rel, tid)

    def scan(self, rel: int) -> Iterator[tuple[tuple[int, int], bytes]]:
        """Every live tuple of `rel` as ((block, slot), bytes)."""
        return self._heap.scan(rel)

    def nblocks(self, rel: int) -> int:
        return self._heap.nblocks(rel)

    def relations(self) -> dict[int, int]:
        return self._heap.relations()

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
        with self._heap.lock:   # no record is queued meanwhile: the write LSN is the ready LSN
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

    def drop_if_quiet(self, node_id: int, quiet_s: float, why: str) -> bool:
        """Drop RO node `node_id` if no report came from it for `quiet_s` seconds (the cluster's
        keeper declared it gone; a node that reports is kept). True when it was dropped."""
        return self.replica_set.drop_if_quiet(node_id, quiet_s, why)

    # ------------------------------------------------------------------ checkpoints
    def flush_limit(self) -> int:
        """The highest page LSN that may be written to storage: every live RO node has applied it."""
        return self._checkpointer.flush_limit()

    def own_truncation_point(self) -> int:
        """What this primary itself no longer needs: below the consistent LSN and the LogIndex's
        last saved LSN (a restart or a new RO node indexes the WAL from there). No RO node's hold."""
        return self._checkpointer.own_truncation_point()

    def truncation_point(self) -> int:
        """Log and LogIndex entries at or below this LSN are no longer needed by anyone: below
        own_truncation_point(), every RO node's min used LSN, and the cluster's truncation LSN
        (`cluster_hold`, HAKeeper's, when set)."""
        return self._checkpointer.truncation_point()

    def checkpoint(self) -> int:
        """Flush what may be flushed, advance the consistent LSN, truncate; returns the consistent LSN."""
        return self._checkpointer.checkpoint()

    # ------------------------------------------------------------------ lifecycle
    def crash(self) -> None:
        """Stop without flushing anything (tests of promotion and recovery)."""
        if self._released:
            return
        self._heap.stop()
        self._released = True
        self._checkpointer.stop()
        self.queue.close()
        self._checkpointer.join()
        self.index.abandon()       # its background flush must not write after a successor opened the directory
        self.store.close()
        self._dir_lock.release()   # as the dead process's would be

    def close(self) -> None:
        """Make queued writes durable, checkpoint, and release the directory. A primary that
        stopped on a failed log write checkpoints nothing (its pages may hold changes the log
        does not; a restart redoes the log) but still releases everything."""
        if self._released:
            return
        stopped = self.stopped or self.committer.failed is not None
        self._heap.stop()         # no write starts from here on
        if not stopped:
            self.committer.drain()   # writes already queued are made durable and acknowledged
        self._checkpointer.stop()
        self._checkpointer.join()   # not on the checkpointer thread: a primary finalized there
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
