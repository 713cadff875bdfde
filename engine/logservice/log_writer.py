"""The log writer: assigns LSNs and makes records durable with group commit.

Appenders queue framed records under the lock. Whoever finds no flush running becomes the leader:
it writes every queued frame with one writev and makes them durable with one fdatasync, outside
the lock, while later appenders queue up behind it for the next leader. `append` returns only
once its records are durable (fsync="always"), or written to the OS (fsync="batch"/"never").
"""
from __future__ import annotations

import os
import threading

import numpy as np

from logtide._ext import wal
from logtide.engine.logservice.segment import Segment
from logtide.errors import LogServiceClosed, LogServiceFailed

_IOV_MAX = 1024


def _fsync_dir(dirpath: str) -> None:
    fd = os.open(dirpath, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, bufs: list) -> int:
    """writev every buffer fully (writev may write less than asked)."""
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


class LogWriter:
    """Appends to the last segment of `segments` (a list it shares with the reader, under `lock`)."""

    def __init__(self, dirpath: str, segments: list[Segment], lock: threading.Condition, fsync: str,
                 segment_size: int, batch_sync_interval: float = 0.02) -> None:
        self.dirpath = dirpath
        self.segments = segments
        self.cv = lock
        self.fsync = fsync
        self.segment_size = segment_size
        last = segments[-1]
        last.wfd = os.open(last.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.lseek(last.wfd, last.size, os.SEEK_SET)
        self.next_lsn = last.first_lsn + last.count
        self.durable_lsn = self.next_lsn - 1  # highest LSN readers may see
        self._synced_lsn = self.durable_lsn
        self._pending: list[tuple[int, bytes, np.ndarray]] = []
        self._flushing = False
        self._failed: BaseException | None = None
        self._closed = False
        self.groups = 0  # flushes done: appended records / groups = the group-commit factor
        self._syncer = None
        if fsync == "batch":
            self._batch_interval = batch_sync_interval
            self._syncer = threading.Thread(target=self._sync_loop, name="logservice-batch-sync", daemon=True)
            self._syncer.start()

    def append(self, rtype: int, prefix: bytes, payloads: list) -> int:
        """Frame, queue and make durable; returns the first LSN (the others follow in order)."""
        with self.cv:
            self._check()
            first = self.next_lsn
            frames, starts = wal.encode(first, rtype, prefix, payloads)
            self.next_lsn += len(payloads)
            self._pending.append((first, frames, starts))
            last = first + len(payloads) - 1
            while self.durable_lsn < last:
                self._check_failed()
                if not self._flushing:
                    self._flush_locked()
                else:
                    self.cv.wait()
            return first

    def _check(self) -> None:
        if self._closed:
            raise LogServiceClosed("the log service is closed")
        self._check_failed()

    def _check_failed(self) -> None:
        if self._failed is not None:
            raise LogServiceFailed(f"an earlier log write failed ({self._failed!r}); reopen the log service") \
                from self._failed

    def _flush_locked(self) -> None:
        """Write and sync everything queued. Called with the lock held; drops it for the I/O."""
        self._flushing = True
        batch, self._pending = self._pending, []
        seg = self.segments[-1]
        pos = seg.size
        rolled = None
        self.cv.release()
        try:
            _write_all(seg.wfd, [frames for _, frames, _ in batch])
            if self.fsync == "always":
                os.fdatasync(seg.wfd)
            abs_starts = []
            for _, frames, starts in batch:
                abs_starts.append(starts + np.uint64(pos))
                pos += len(frames)
            last_lsn = batch[-1][0] + len(batch[-1][2]) - 1
            if pos >= self.segment_size:
                rolled = self._roll(seg, last_lsn + 1)
        except BaseException as exc:
            self.cv.acquire()
            self._failed = exc
            self._flushing = False
            self.cv.notify_all()
            raise LogServiceFailed(f"log write failed: {exc!r}") from exc
        self.cv.acquire()
        seg.extend(np.concatenate(abs_starts) if len(abs_starts) > 1 else abs_starts[0], pos)
        self.durable_lsn = last_lsn
        if self.fsync == "always" or rolled is not None:
            self._synced_lsn = last_lsn
        if rolled is not None:
            self.segments.append(rolled)
        self.groups += 1
        self._flushing = False
        self.cv.notify_all()

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
            self.cv.release()
            try:
                os.fdatasync(seg.wfd)
            finally:
                self.cv.acquire()
                self._flushing = False
                self.cv.notify_all()
            self._synced_lsn = max(self._synced_lsn, target)

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
