"""Checkpointer: the primary's dirty pages to storage, the consistent LSN, and log truncation.

Pages newer than the write LSN are never flushed (their WAL is not durable yet). Checkpoints flush
dirty pages through the double-write PageStore, but only pages whose LSN every RO node has applied
(an RO node must never read a page from its own future), then advance the consistent LSN, and
truncate the log and the LogIndex below min(consistent LSN, every RO node's min used LSN, the
cluster's truncation LSN). A buffer-pool eviction of a dirty page follows the same rule.
"""
from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path
from typing import Callable

from logtide._ext import page as pg
from logtide.failure_log import worth_logging
from logtide.replay.buffer_pool import BufferPool
from logtide.replay.control_file import Control, write_control
from logtide.replay.meta_queue import MetaQueue
from logtide.replay.mini_trans import MiniTransLocks
from logtide.replay.page_index import PageIndex
from logtide.replay.page_store import PageStore
from logtide.replay.replica_set import ReplicaSet
from logtide.replay.wal_insert import WalInsert
from logtide.replay.wal_log import WalLog

log = logging.getLogger("logtide.replay.checkpointer")


class Checkpointer:
    """Flushes a primary's buffer pool and truncates its log, on demand or every `interval` seconds
    on a background thread (start)."""

    # () -> the cluster's truncation LSN (engine/hakeeper/truncation_hold.py), or None: no cluster hold
    cluster_hold: Callable[[], int] | None = None

    def __init__(self, directory: Path, writes: WalInsert, pool: BufferPool, locks: MiniTransLocks,
                 store: PageStore, wal: WalLog, index: PageIndex, queue: MetaQueue, replica_set: ReplicaSet,
                 *, consistent_lsn: int, truncated_lsn: int) -> None:
        self.dir, self.writes, self.pool, self.locks = directory, writes, pool, locks
        self.store, self.wal, self.index, self.queue, self.replica_set = store, wal, index, queue, replica_set
        self.consistent_lsn = consistent_lsn   # every change at or below it is on storage
        self.truncated_lsn = truncated_lsn     # LSNs at or below it may be gone (log and LogIndex)
        self.checkpoints = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def flush_limit(self) -> int:
        """The highest page LSN that may be written to storage: every live RO node has applied it."""
        return self.replica_set.flush_limit()   # a dead node must not pin it (the eviction path calls this too)

    def own_truncation_point(self) -> int:
        """Below the consistent LSN and the LogIndex's last saved LSN: what the primary itself no longer needs."""
        return max(0, min(self.consistent_lsn, self.index.max_saved_lsn - 1))

    def truncation_point(self) -> int:
        """own_truncation_point(), lowered below every RO node's min used LSN and `cluster_hold`."""
        low = self.replica_set.truncation_hold(self.own_truncation_point())
        if self.cluster_hold is not None:
            low = min(low, self.cluster_hold())
        return max(0, low)

    def write_out(self, tag, page) -> bool:
        """Buffer-pool eviction of a dirty page: only when every RO node has applied its LSN."""
        if pg.get_lsn(page) > min(self.flush_limit(), self.writes.write_lsn):
            return False  # an RO node has not applied it, or its WAL is not durable yet
        self.store.write(tag, page)
        return True

    def checkpoint(self) -> int:
        """Flush what may be flushed, advance the consistent LSN, truncate; returns the consistent LSN."""
        with self._lock:
            write_lsn = self.writes.write_lsn
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
                write_control(self.dir, Control(consistent, self.writes.next_xid))
                self.consistent_lsn = consistent
            self.index.flush()
            with self.replica_set.lock:
                acked = min([st.apply_lsn for st in self.replica_set.states.values()],
                            default=self.writes.write_lsn)
            self.queue.trim(acked + 1)  # every node has these; a new one reads the log
            point = self.truncation_point()
            if point > self.truncated_lsn:
                self.wal.truncate(point)
                self.index.truncate(point + 1)
                self.truncated_lsn = point
            self.checkpoints += 1
            return self.consistent_lsn

    def start(self, interval: float) -> None:
        """Checkpoint every `interval` seconds on a background thread, until stop()."""
        self._thread = threading.Thread(target=_checkpoints, args=(weakref.ref(self), self._stop, interval),
                                        name="checkpointer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No background checkpoint starts from here on."""
        self._stop.set()

    def join(self) -> None:
        """Wait for a background checkpoint under way (unless called on that thread: a primary nobody
        closed may be finalized there)."""
        if self._thread and threading.current_thread() is not self._thread:
            self._thread.join()


def _checkpoints(ref: "weakref.ref[Checkpointer]", stop: threading.Event, interval: float) -> None:
    """The checkpointer thread: a checkpoint every `interval` seconds until stopped. It holds the
    checkpointer (and, through its pool's eviction hook, the primary) only during a checkpoint, so
    a primary nobody closed is still collected (and closed by its __del__, possibly on this thread)."""
    failed = 0
    while not stop.wait(interval):
        checkpointer = ref()
        if checkpointer is None:
            return
        try:
            checkpointer.checkpoint()
            if failed:
                log.warning("checkpoints resume after %d failed", failed)
            failed = 0
        except Exception as exc:  # a failed checkpoint is retried; writes go on
            failed += 1
            if failed == 1:
                log.exception("checkpoint failed")
            elif worth_logging(failed):   # a peer down for long (the log, HAKeeper): not a traceback per interval
                log.warning("checkpoint failed %d times in a row: %s: %s", failed, type(exc).__name__, exc)
        finally:
            del checkpointer
