"""The log writer: assigns LSNs and makes records durable with group commit.

Appenders frame their records into a CommitQueue (Cython: group commit's pipelined mechanism, see
engine/group_commit) and sleep there, with the GIL released, on a futex. One flusher thread takes everything queued, writes it with one write() and makes
it durable with one fdatasync(), indexes it in the segment, then wakes exactly the appenders whose
records it covered. `append` returns only once its records are durable (fsync="always"), or written
to the OS (fsync="batch"/"never").

The flusher's common case runs in the queue without the GIL (CommitQueue.run: write, sync, index,
publish, group after group); it comes back to Python only to roll a segment, to wake the
pre-allocation thread, to grow the index, and for syncs, close and failures. With fsync="batch" or
"never", an appender that finds the log idle writes its record itself (no thread switch at all).

A pre-allocation thread keeps zero bytes written (and synced) ahead of the write position and
prepares the next segment file, so the flusher's fdatasync rarely has a file size or extent to
update (see docs/wal_format.md, "Pre-allocation").
"""
from __future__ import annotations

import logging
import os
import threading

from logtide._ext.commit_queue import CLOSED, KICKED, TIMEOUT, CommitQueue
from logtide.engine.logservice.log_format import PREALLOC_FILE, PREFILL_MAX, PREFILL_MIN
from logtide.engine.logservice.segment import Segment
from logtide.errors import LogServiceClosed, LogServiceFailed
from logtide.fsync_dir import fsync_dir

log = logging.getLogger("logtide.logservice")

_IDLE_WAIT = 1.0  # seconds the flusher sleeps at most without work (then it re-checks its state)
_NEVER = 1 << 63  # a _wake_at no segment reaches


def prefill_ahead(end: int) -> int:
    """Zero bytes the pre-allocation keeps ahead of a segment's end: as much as is written already,
    within [PREFILL_MIN, PREFILL_MAX] (a small log stays small; a busy one gets whole chunks)."""
    return min(max(end, PREFILL_MIN), PREFILL_MAX)


def discard_prealloc(dirpath: str) -> None:
    """Delete a prepared next-segment file (left by a crash, or unused at close): never a segment."""
    try:
        os.unlink(os.path.join(dirpath, PREALLOC_FILE))
    except FileNotFoundError:
        pass


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
        last = segments[-1]
        last.wfd = os.open(last.path, os.O_WRONLY | os.O_CREAT, 0o644)
        next_lsn = last.first_lsn + last.count
        self._sync_wanted = False
        self._flush_error: BaseException | None = None
        self._closed = False
        # the flusher wakes each group's appenders itself, GIL-free (docs/wal_format.md, "Wake-up")
        self.queue = CommitQueue(next_lsn)
        self.queue.configure(fsync == "always", fsync != "always", batch_sync_interval if fsync == "batch" else 0.0)
        # the flusher writes at the segment's logical end; past it the file holds only zeros (or
        # nothing): recovery cut anything else
        self.queue.set_segment(last.wfd, os.fstat(last.wfd).st_size)
        self.queue.bind_index(last.wfd, *last.index_arrays(), last.size, segment_size)
        self.append_one = self.queue.append_one  # (rtype, prefix, payload) -> lsn: the hot path
        discard_prealloc(dirpath)
        self._prealloc_path = os.path.join(dirpath, PREALLOC_FILE)
        self._next_size = 0       # bytes of the prepared next segment file, 0 when none (under _mu)
        self._prealloc_busy = False  # that file is being written, or renamed by a roll (under _mu)
        # the flusher wakes the pre-allocation thread when the end reaches this mark (_mu); the
        # thread's first run (below) sets it
        self._wake_at = _NEVER
        self.prealloc_errors = 0  # failed pre-allocations (the writer then grows the file itself)
        self._prep_wake = threading.Event()
        self._preparer = threading.Thread(target=self._prepare_loop, name="logservice-prealloc", daemon=True)
        self._preparer.start()
        self._prep_wake.set()
        self._flusher = threading.Thread(target=self._flush_loop, name="logservice-flusher", daemon=True)
        self._flusher.start()

    @property
    def durable_lsn(self) -> int:
        """The highest LSN readers may see (written, and synced with fsync="always")."""
        return self.queue.durable_lsn

    @property
    def _synced_lsn(self) -> int:
        return self.queue.synced_lsn

    @property
    def _failed(self) -> BaseException | None:
        """What failed the log: the flusher's error, or a lone appender's (in the queue)."""
        return self._flush_error or self.queue.failure

    @property
    def _wake_at(self) -> int:
        return self.queue.mark

    @_wake_at.setter
    def _wake_at(self, value: int) -> None:
        # the queue hands the group whose end reaches it to the flusher's Python
        self.queue.mark = value

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
                self._flush_error = exc
                self.cv.notify_all()
            self.queue.fail(exc)

    def _flush_until_closed(self) -> None:
        q, always, batch = self.queue, self.fsync == "always", self.fsync == "batch"
        pending = 0  # the last group's LSN, published by the next run() once the GIL is released
        while True:
            # the common case stays in there: groups written, synced, indexed and published in C
            got = q.run(_IDLE_WAIT, pending)
            pending = 0
            seg = self.segments[-1]
            if got is CLOSED:
                if q.failure is not None:  # a lone appender's write failed
                    raise q.failure
                return
            if got is KICKED or got is TIMEOUT:
                if self._sync_wanted or (got is TIMEOUT and batch):
                    self._sync(seg)
                continue
            # a group that rolls the segment, reaches the pre-allocation mark or fills the index
            first, last, starts, nbytes = got
            end = seg.size + nbytes
            rolled = self._roll(seg, last + 1) if end >= self.segment_size else None
            with self._mu:
                seg.extend(starts, end)
                q.set_durable(last, always or rolled is not None)
                if rolled is not None:
                    self.segments.append(rolled)
                    # with the list, so the pre-allocation thread sees a segment and its generation together;
                    # the old fd closes only after: a zero fill in progress uses it under the queue's lock
                    q.set_segment(rolled.wfd, rolled.prefilled)
                prepare = rolled is not None or end >= self._wake_at
                if prepare:
                    self._wake_at = _NEVER  # until the pre-allocation thread sets the next mark
                live = self.segments[-1]
                q.bind_index(live.wfd, *live.index_arrays(), live.size, self.segment_size)
            if rolled is not None:
                fd, seg.wfd = seg.wfd, -1
                os.close(fd)
            if prepare:
                self._prep_wake.set()
            pending = last
            if self._sync_wanted:
                q.publish(pending)  # written: batch appenders need not wait for this sync
                pending = 0
                self._sync(self.segments[-1])

    def _sync(self, seg: Segment) -> None:
        """fdatasync what is written (fsync="batch"/"never", sync()), then tell sync() callers."""
        target = self.durable_lsn
        if self._synced_lsn < target:
            os.fdatasync(seg.wfd)
        with self.cv:
            self.queue.note_synced(target)
            self._sync_wanted = False
            self.cv.notify_all()

    def _roll(self, old: Segment, first_lsn: int) -> Segment:
        """Seal the full segment and start the next one, named by its first LSN: the prepared,
        zero-filled file when the pre-allocation thread has one ready, else a new empty file. The
        full segment is synced in every mode: sync() and the flusher sync only the newest file."""
        os.fdatasync(old.wfd)
        new = Segment(self.dirpath, first_lsn)
        with self._mu:
            size, self._next_size = self._next_size, 0
            self._prealloc_busy = self._prealloc_busy or bool(size)
        if size:
            try:
                if os.path.lexists(new.path):
                    raise FileExistsError(f"log segment {new.path} exists already")
                os.rename(self._prealloc_path, new.path)
            finally:
                with self._mu:
                    self._prealloc_busy = False
            new.wfd = os.open(new.path, os.O_WRONLY)
        else:
            new.wfd = os.open(new.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        if self.fsync != "never":
            fsync_dir(self.dirpath)
        new.prefilled = size
        return new

    # --- pre-allocation --------------------------------------------------------------------------

    def _prepare_loop(self) -> None:
        sync = self.fsync != "never"
        while not self._closed:
            if not self._prep_wake.wait(_IDLE_WAIT):
                continue
            self._prep_wake.clear()
            if self._closed:
                return
            try:
                self._prepare(sync)
            except OSError as exc:  # e.g. EFBIG past RLIMIT_FSIZE, ENOSPC: appends still grow the file
                self.prealloc_errors += 1
                log.warning("log pre-allocation in %s failed (%r); the writer grows the segment itself",
                            self.dirpath, exc)
                with self._mu:  # try again once the writer has grown the file by another chunk itself
                    self._wake_at = max(self.segments[-1].size, self.queue.zeroed) + PREFILL_MAX

    def _prepare(self, sync: bool) -> None:
        """Zero-fill the current segment ahead of its end, then prepare the next segment file."""
        with self._mu:
            seg = self.segments[-1]
            end = seg.size
            generation = self.queue.generation
        ahead = prefill_ahead(end)
        target = min(self.segment_size, end + ahead)
        if self.queue.zeroed < target:
            self.queue.prefill(generation, target, sync)
        zeroed = self.queue.zeroed
        with self._mu:
            # a roll may have taken the prepared file and not renamed it yet: preparing again
            # then would truncate (and zero) the file that is becoming a segment
            claim = zeroed >= self.segment_size and self._next_size == 0 and not self._prealloc_busy
            self._prealloc_busy = self._prealloc_busy or claim
        if claim:
            self._prepare_next(sync)
        with self._mu:
            if self.segments[-1] is not seg:
                self._wake_at = 0  # rolled meanwhile: run again on the next group
            elif zeroed < self.segment_size:
                self._wake_at = zeroed - ahead // 2
            # else: this segment is filled to its size and the next one is ready: the roll wakes us

    def _prepare_next(self, sync: bool) -> None:
        """Write the next segment's first zeros (fsynced) under PREALLOC_FILE; the roll renames it."""
        size = min(self.segment_size, PREFILL_MAX)
        zeros = bytes(min(size, PREFILL_MIN))
        try:
            fd = os.open(self._prealloc_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                off = 0
                while off < size:
                    off += os.pwrite(fd, zeros[: size - off], off)
                if sync:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except BaseException:
            discard_prealloc(self.dirpath)
            with self._mu:
                self._prealloc_busy = False
            raise
        with self._mu:
            self._next_size = size
            self._prealloc_busy = False

    # --- sync and close ------------------------------------------------------------------------

    def _raise_failed(self):
        raise LogServiceFailed.after(self._failed)

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
        self._prep_wake.set()
        if threading.current_thread() in (self._flusher, self._preparer):
            return  # a LogService dropped (and so closed) by a collection on one of its own threads
        self._flusher.join()
        self._preparer.join()
        discard_prealloc(self.dirpath)
        if self._failed is None and self.fsync != "never":
            seg = self.segments[-1]
            if seg.wfd >= 0:
                os.fdatasync(seg.wfd)
