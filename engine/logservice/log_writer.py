"""The log writer: assigns LSNs and makes records durable with group commit.

Appenders queue framed records under the lock. Whoever finds no flush running becomes the leader:
it writes every queued frame with one writev and makes them durable with one fdatasync, outside
the lock, while later appenders queue up behind it for the next leader. `append` returns only
once its records are durable (fsync="always"), or written to the OS (fsync="batch"/"never").
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from logtide._ext import wal
from logtide.engine.logservice.segment import Segment
from logtide.errors import LogServiceClosed, LogServiceFailed

_IOV_MAX = 1024
_tls = threading.local()


def _fsync_dir(dirpath: str) -> None:
    fd = os.open(dirpath, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, bufs: list) -> int:
    """writev every buffer fully (writev may write less than asked)."""
    if len(bufs) == 1:
        n = os.write(fd, bufs[0])
        if n == len(bufs[0]):
            return n
        return n + _write_all(fd, [memoryview(bufs[0])[n:]])
    total = 0
    views = [memoryview(b) for b in bufs if len(b)]
    while views:
        n = os.writev(fd, views[:_IOV_MAX])
        total += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return total


class _Waiter:
    """One queued append: its frames, and a lock it blocks on until the leader settles it."""
    __slots__ = ("first", "frames", "starts", "lock", "state")

    def __init__(self, first: int, frames: bytes, starts: np.ndarray) -> None:
        self.first, self.frames, self.starts = first, frames, starts
        self.lock: threading.Lock | None = None
        self.state = 0  # 0 queued, 1 durable, 2 lead the next group, 3 failed

    @property
    def last(self) -> int:
        return self.first + len(self.starts) - 1


QUEUED, DONE, LEAD, FAILED = 0, 1, 2, 3


class LogWriter:
    """Appends to the last segment of `segments` (a list it shares with the reader, under `cv`).

    Leader/follower group commit: the first appender that finds no flush running leads; the others
    queue and block on their own lock (one wake-up each). The leader writes and syncs everything
    queued, wakes that group, and hands leadership to the first appender that queued meanwhile.
    """

    def __init__(self, dirpath: str, segments: list[Segment], cv: threading.Condition, fsync: str,
                 segment_size: int, batch_sync_interval: float = 0.02) -> None:
        self.dirpath = dirpath
        self.segments = segments
        self.cv = cv
        self._mu = cv._lock  # the condition's own lock: the append path takes it without the Python wrapper
        self.fsync = fsync
        self.segment_size = segment_size
        last = segments[-1]
        last.wfd = os.open(last.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.lseek(last.wfd, last.size, os.SEEK_SET)
        self.next_lsn = last.first_lsn + last.count
        self.durable_lsn = self.next_lsn - 1  # highest LSN readers may see
        self._synced_lsn = self.durable_lsn
        self._pending: list[_Waiter] = []
        self._flushing = False
        self._failed: BaseException | None = None
        self._closed = False
        self.groups = 0  # flushes done: appended records / groups = the group-commit factor
        self.max_commit_delay = 0.001  # seconds; see _gather
        self._fsync_time = 0.0  # moving average of fdatasync's duration
        self._last_groups = (0, 0)  # appends in the last two groups
        self._syncer = None
        if fsync == "batch":
            self._batch_interval = batch_sync_interval
            self._syncer = threading.Thread(target=self._sync_loop, name="logservice-batch-sync", daemon=True)
            self._syncer.start()

    def append(self, rtype: int, prefix: bytes, payloads) -> int:
        """Frame, queue and make durable; returns the first LSN (the others follow in order).
        `payloads` is a list of bytes-like objects, or a 2-D uint8 array (one record per row)."""
        with self._mu:
            if self._closed or self._failed is not None:
                self._check()
            first = self.next_lsn
            if isinstance(payloads, list):
                frames, starts = wal.encode(first, rtype, prefix, payloads)
            else:
                frames, starts = wal.encode_rows(first, rtype, prefix, payloads)
            self.next_lsn += len(payloads)
            me = _Waiter(first, frames, starts)
            self._pending.append(me)
            if self._flushing:
                lock = getattr(_tls, "lock", None)
                if lock is None:
                    lock = _tls.lock = threading.Lock()  # one per thread: a thread waits for one append at a time
                lock.acquire()
                me.lock = lock
                lead = False
            else:
                self._flushing = True
                lead = True
        if not lead:
            me.lock.acquire()  # released by the leader: durable, failed, or our turn to lead
            me.lock.release()  # leave the thread's lock free for its next append
            me.lock = None  # settled exactly once; as the next leader nobody must release it again
            if me.state == FAILED:
                self._raise_failed()
            if me.state == DONE:
                return first
        self._lead(me)
        return first

    def _gather(self) -> None:
        """Commit delay (PostgreSQL's commit_delay): when the last groups show concurrent appenders,
        those of the group just synced are waking up to append again; without a short wait they
        would miss this group, and groups would alternate between part-cohorts. Wait until as many
        appends are queued as in the larger of the last two groups, for at most half an fsync.
        A lone appender (groups of one) never waits."""
        expected = max(self._last_groups)
        if self.fsync != "always" or expected <= 1 or len(self._pending) >= expected:
            return
        deadline = time.monotonic() + min(self.max_commit_delay, 0.5 * self._fsync_time)
        while len(self._pending) < expected and time.monotonic() < deadline:
            time.sleep(0.00002)

    def _lead(self, me: _Waiter) -> None:
        """Flush groups until `me` is durable, then pass leadership on (or drop it)."""
        while me.state != DONE:
            self._gather()
            with self._mu:
                batch, self._pending = self._pending, []
            self._last_groups = (self._last_groups[1], len(batch))
            self._flush(batch)  # raises after failing the batch and everyone queued
        with self._mu:
            self._pass_lead_locked()

    def _pass_lead_locked(self) -> None:
        if self._pending and self._failed is None:
            nxt = self._pending[0]
            nxt.state = LEAD
            nxt.lock.release()
        else:
            self._flushing = False
            self.cv.notify_all()  # sync() and close() wait for the flush to end

    def _check(self) -> None:
        if self._closed:
            raise LogServiceClosed("the log service is closed")
        if self._failed is not None:
            self._raise_failed()

    def _raise_failed(self):
        raise LogServiceFailed(f"a log write failed ({self._failed!r}); reopen the log service") from self._failed

    def _flush(self, batch: list[_Waiter]) -> None:
        """Write and sync one group (without the lock), then publish it and wake its appenders."""
        seg = self.segments[-1]
        pos = seg.size
        rolled = None
        try:
            _write_all(seg.wfd, [w.frames for w in batch])
            if self.fsync == "always":
                t0 = time.monotonic()
                os.fdatasync(seg.wfd)
                self._fsync_time = 0.8 * self._fsync_time + 0.2 * (time.monotonic() - t0)
            abs_starts: list[int] = []
            for w in batch:
                if len(w.starts) == 1:
                    abs_starts.append(pos)
                else:
                    abs_starts.extend((w.starts + np.uint64(pos)).tolist())
                pos += len(w.frames)
            last_lsn = batch[-1].last
            if pos >= self.segment_size:
                rolled = self._roll(seg, last_lsn + 1)
        except BaseException as exc:
            with self.cv:
                self._failed = exc
                waiters, self._pending = batch + self._pending, []
                self._flushing = False
                self.cv.notify_all()
            for w in waiters:
                w.state = FAILED
                if w.lock is not None:
                    w.lock.release()
            raise LogServiceFailed(f"log write failed: {exc!r}") from exc
        with self._mu:
            seg.extend(abs_starts, pos)
            self.durable_lsn = last_lsn
            if self.fsync == "always" or rolled is not None:
                self._synced_lsn = last_lsn
            if rolled is not None:
                self.segments.append(rolled)
            self.groups += 1
        for w in batch:
            w.state = DONE
            if w.lock is not None:
                w.lock.release()

    def _roll(self, old: Segment, first_lsn: int) -> Segment:
        """Seal the full segment and start the next one, named by its first LSN."""
        if self.fsync != "never":
            os.fdatasync(old.wfd)
        new = Segment(self.dirpath, first_lsn)
        new.wfd = os.open(new.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if self.fsync != "never":
            _fsync_dir(self.dirpath)
        fd, old.wfd = old.wfd, -1
        os.close(fd)
        return new

    def sync(self) -> None:
        """Make every written record durable now (for fsync="batch"/"never" and close)."""
        with self.cv:
            while self._flushing:
                self.cv.wait()
            if self._failed is not None or self._synced_lsn >= self.durable_lsn:
                return
            self._flushing = True
            seg, target = self.segments[-1], self.durable_lsn
        try:
            os.fdatasync(seg.wfd)
        finally:
            with self.cv:
                self._synced_lsn = max(self._synced_lsn, target)
                self._pass_lead_locked()

    def _sync_loop(self) -> None:
        while True:
            with self.cv:
                if self._closed:
                    return
                self.cv.wait(self._batch_interval)
                if self._closed:
                    return
            try:
                self.sync()
            except OSError as exc:
                with self.cv:
                    self._failed = exc
                    self.cv.notify_all()
                return

    def close(self) -> None:
        with self.cv:
            if self._closed:
                return
            while self._flushing:
                self.cv.wait()
            self._closed = True
            self.cv.notify_all()
        if self._syncer is not None:
            self._syncer.join()
        if self._failed is None and self.fsync != "never":
            seg = self.segments[-1]
            if seg.wfd >= 0:
                os.fdatasync(seg.wfd)
