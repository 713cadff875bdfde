"""The log writer: assigns LSNs and makes records durable with group commit.

Appenders frame their records into a CommitQueue (Cython) and sleep there, with the GIL released,
on their own futex. One flusher thread takes everything queued, writes it with one write() and makes
it durable with one fdatasync(), indexes it in the segment, then wakes exactly the appenders whose
records it covered. `append` returns only once its records are durable (fsync="always"), or written
to the OS (fsync="batch"/"never").
"""
from __future__ import annotations

import os
import threading
import time

from logtide._ext.commit_queue import CLOSED, KICKED, TIMEOUT, CommitQueue
from logtide.engine.logservice.segment import Segment
from logtide.errors import LogServiceClosed, LogServiceFailed
from logtide.fsync_dir import fsync_dir

_IDLE_WAIT = 1.0  # seconds the flusher sleeps at most without work (then it re-checks its state)


class LogWriter:
    """Appends to the last segment of `segments` (a list it shares with the reader, under `cv`).

    Only the flusher thread writes, syncs and rolls segments; appenders never touch the files.
    """

    def __init__(self, dirpath: str, segments: list[Segment], cv: threading.Condition, fsync: str,
                 segment_size: int, batch_sync_interval: float = 0.02) -> None:
        self.dirpath = dirpath
        self.segments = segments
        self.cv = cv
        self._mu = cv._lock  # the condition's own lock, taken without the Python wrapper on the flush path
        self.fsync = fsync
        self.segment_size = segment_size
        self._batch_interval = batch_sync_interval
        last = segments[-1]
        last.wfd = os.open(last.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.lseek(last.wfd, last.size, os.SEEK_SET)
        next_lsn = last.first_lsn + last.count
        self.durable_lsn = next_lsn - 1  # highest LSN readers may see
        self._synced_lsn = self.durable_lsn
        self._sync_wanted = False
        self._failed: BaseException | None = None
        self._closed = False
        self.queue = CommitQueue(next_lsn)
        self.append_one = self.queue.append_one  # (rtype, prefix, payload) -> lsn: the hot path
        self._flusher = threading.Thread(target=self._flush_loop, name="logservice-flusher", daemon=True)
        self._flusher.start()

    @property
    def groups(self) -> int:
        """Flushes done: appended records / groups = the group-commit factor."""
        return self.queue.groups

    @property
    def max_commit_delay(self) -> float:
        return self.queue.max_commit_delay

    def append(self, rtype: int, prefix: bytes, payloads) -> int:
        """Frame, queue and make durable; returns the first LSN (the others follow in order).
        `payloads` is a list of bytes-like objects, or a 2-D uint8 array (one record per row)."""
        if isinstance(payloads, list) and len(payloads) == 1:
            return self.queue.append_one(rtype, prefix, payloads[0])
        return self.queue.append_many(rtype, prefix, payloads)

    # --- the flusher ---------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        try:
            self._flush_until_closed()
        except BaseException as exc:  # a failed write or sync: every waiter gets LogServiceFailed
            with self.cv:
                self._failed = exc
                self.cv.notify_all()
            self.queue.fail(exc)

    def _flush_until_closed(self) -> None:
        q, always = self.queue, self.fsync == "always"
        last_sync = time.monotonic()
        while True:
            seg = self.segments[-1]
            unsynced = self._synced_lsn < self.durable_lsn
            timeout = self._batch_interval if (self.fsync == "batch" and unsynced) else _IDLE_WAIT
            got = q.flush(seg.wfd, always, seg.size, timeout)
            if got is CLOSED:
                return
            if got is KICKED or got is TIMEOUT:
                if self._sync_wanted or (got is TIMEOUT and self.fsync == "batch" and unsynced):
                    self._sync(seg)
                    last_sync = time.monotonic()
                continue
            first, last, starts, nbytes = got
            end = seg.size + nbytes
            rolled = self._roll(seg, last + 1) if end >= self.segment_size else None
            with self._mu:
                seg.extend(starts, end)
                self.durable_lsn = last
                if always or rolled is not None:
                    self._synced_lsn = last
                if rolled is not None:
                    self.segments.append(rolled)
            q.publish(last)
            if self._sync_wanted or (self.fsync == "batch" and time.monotonic() - last_sync >= self._batch_interval):
                self._sync(self.segments[-1] if rolled is None else rolled)
                last_sync = time.monotonic()

    def _sync(self, seg: Segment) -> None:
        """fdatasync what is written (fsync="batch"/"never", sync()), then tell sync() callers."""
        target = self.durable_lsn
        if self._synced_lsn < target:
            os.fdatasync(seg.wfd)
        with self.cv:
            self._synced_lsn = max(self._synced_lsn, target)
            self._sync_wanted = False
            self.cv.notify_all()

    def _roll(self, old: Segment, first_lsn: int) -> Segment:
        """Seal the full segment and start the next one, named by its first LSN."""
        if self.fsync != "never":
            os.fdatasync(old.wfd)
        new = Segment(self.dirpath, first_lsn)
        new.wfd = os.open(new.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if self.fsync != "never":
            fsync_dir(self.dirpath)
        fd, old.wfd = old.wfd, -1
        os.close(fd)
        return new

    # --- sync and close ------------------------------------------------------------------------

    def _raise_failed(self):
        raise LogServiceFailed(f"a log write failed ({self._failed!r}); reopen the log service") from self._failed

    def sync(self) -> None:
        """Make every written record durable now (for fsync="batch"/"never"); the flusher syncs."""
        with self.cv:
            target = self.durable_lsn
            while self._synced_lsn < target:
                if self._failed is not None:
                    self._raise_failed()
                if self._closed or not self._flusher.is_alive():
                    raise LogServiceClosed("the log service is closed")
                self._sync_wanted = True
                self.queue.kick()
                self.cv.wait(_IDLE_WAIT)

    def close(self) -> None:
        """Refuse new appends, let the flusher write (and sync) what is queued, then sync the file."""
        with self.cv:
            if self._closed:
                return
            self._closed = True
        self.queue.close()
        if threading.current_thread() is self._flusher:
            return  # a LogService dropped (and so closed) by a collection on the flusher thread itself
        self._flusher.join()
        if self._failed is None and self.fsync != "never":
            seg = self.segments[-1]
            if seg.wfd >= 0:
                os.fdatasync(seg.wfd)
