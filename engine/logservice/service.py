"""LogService: the embedded log service (segments, group-commit writer, reader, truncation, TSO)."""
from __future__ import annotations

import asyncio
import bisect
import io
import logging
import math
import os
import threading
import weakref
from typing import Iterable

import numpy as np

from logtide._ext import wal
from logtide._ext.commit_queue import CommitQueue
from logtide.engine.dir_lock import DirLock
from logtide.engine.logservice.client import LogServiceClient, LogServiceConfig, RecordBatch
from logtide.engine.logservice.log_format import (
    DEFAULT_MAX_RECORD_SIZE, DEFAULT_SEGMENT_SIZE, FSYNC_MODES, LOCK_FILE, MAX_FRAME_LENGTH, STATE_FILE, USER_RECORD)
from logtide.arg_checks import BYTES_LIKE, lsn_arg, reader_name
from logtide.engine.logservice.durability_watcher import DurabilityWatcher
from logtide.engine.logservice.log_writer import LogWriter
from logtide.engine.logservice.loop_durability import LoopDurability
from logtide.fsync_dir import fsync_dir
from logtide._ext.durable_io import replace_file_durably
from logtide.engine.logservice.record import LogRecord, data_prefix
from logtide.engine.logservice.recovery import recover
from logtide.engine.logservice.segment import Segment
from logtide.engine.logservice.state_machine import LogStateMachine, command
from logtide.engine.logservice.truncation import TruncationWorker, removable, unlink_segments
from logtide.engine.logservice.tso import TSO
from logtide.engine.statemachine import Entry
from logtide.errors import (
    CorruptionError, CorruptLogError, InvalidArgument, InvalidRange, LogDirectoryInUse, LogServiceClosed, LogServiceFailed,
    RecordTooLarge)

log = logging.getLogger("logtide.logservice")

LOOP_CLOSE_TIMEOUT_S = 5.0   # close() waits this long for an event loop to take its durability notices' close

_PREFIXES: dict[int, bytes] = {0: data_prefix(0)}  # replica id -> the 12-byte data header


def _new_prefix(replica_id) -> bytes:
    """data_prefix(replica_id) (which validates it), remembered for the id's next appends."""
    prefix = data_prefix(replica_id)
    if len(_PREFIXES) < 4096 and replica_id.__class__ is int:
        _PREFIXES[replica_id] = prefix
    return prefix


class LogService(LogServiceClient):
    """The embedded log service over one directory. Open with `LogService.open(dir)`."""

    @classmethod
    def open(cls, path: str | os.PathLike, *, fsync: str = "always", segment_size: int = DEFAULT_SEGMENT_SIZE,
             max_record_size: int = DEFAULT_MAX_RECORD_SIZE, truncation_interval: float = 1.0,
             check_records: bool = False) -> "LogService":
        """Open (or create) the log in `path`: recover segments, cut a torn tail, start the workers.
        check_records: the records are PostgreSQL WAL records (the primary's log); recovery checks
        each one's own CRC-32C with its frame's, in one pass (`records_checked_through`)."""
        if fsync not in FSYNC_MODES:
            raise InvalidArgument(f"fsync must be one of {FSYNC_MODES}, got {fsync!r}")
        if not isinstance(segment_size, int) or segment_size < 1024:
            raise InvalidArgument(f"segment_size must be an int >= 1024, got {segment_size!r}")
        if not isinstance(max_record_size, int) or not 12 <= max_record_size < 1 << 32:
            raise InvalidArgument(f"max_record_size must be an int in [12, 2**32), got {max_record_size!r}")
        if truncation_interval.__class__ not in (int, float) or not 0 <= truncation_interval < math.inf:
            raise InvalidArgument(f"truncation_interval must be a finite number of seconds >= 0 (0: no "
                                  f"truncation worker), got {truncation_interval!r}")
        if check_records.__class__ is not bool:
            raise InvalidArgument(f"check_records must be a bool, got {check_records!r}")
        return cls(os.fspath(path), fsync, segment_size, max_record_size, float(truncation_interval), check_records)

    def __init__(self, dirpath: str, fsync: str, segment_size: int, max_record_size: int,
                 truncation_interval: float, check_records: bool = False) -> None:
        os.makedirs(dirpath, exist_ok=True)
        self._dir = os.path.abspath(dirpath)
        self._config = LogServiceConfig(self._dir, fsync, segment_size, max_record_size, truncation_interval)
        self._max_payload = max_record_size - 12
        self._closed = True
        self._lock = None
        self._lock = DirLock(self._dir, LOCK_FILE, "log directory", LogDirectoryInUse)
        try:
            self._sm = LogStateMachine()
            state = os.path.join(self._dir, STATE_FILE)
            if os.path.exists(state):
                with open(state, "rb") as f:
                    try:
                        self._sm.recover_from_snapshot(f)
                    except CorruptionError as exc:   # name the file: the snapshot's own message cannot
                        raise CorruptionError(f"{state}: {exc}") from None
            self._meta_lock = threading.Lock()
            self._reports_dirty = False
            self._segments: list[Segment] = recover(self._dir, MAX_FRAME_LENGTH, check_records)
            # the records the open checked against their own CRC-32C (0: none); later appends were not
            self.records_checked_through = self._segments[-1].last_lsn if check_records and self._segments else 0
            truncated = self._sm.truncated_lsn
            if not self._segments:
                self._segments.append(Segment(self._dir, truncated + 1))
                open(self._segments[0].path, "ab").close()
                fsync_dir(self._dir)
            elif self._segments[0].first_lsn > truncated + 1:
                raise CorruptLogError(f"log {self._dir}: the oldest segment starts at LSN {self._segments[0].first_lsn}"
                                      f" but only LSNs <= {truncated} were truncated",
                                      segment=os.path.basename(self._segments[0].path), offset=0)
            self._cv = threading.Condition(threading.Lock())
            self._writer = LogWriter(self._dir, self._segments, self._cv, fsync, segment_size)
            if type(self).append is LogService.append:
                # the common append (bytes, int replica id, user record) in one Cython call; the
                # queue holds this service weakly, so a dropped service is still collected
                self._writer.queue.bind_user(weakref.WeakMethod(self._append), self._max_payload)
                self.append = self._writer.queue.append_user
            if self._writer.durable_lsn < truncated:
                raise CorruptLogError(f"log {self._dir}: ends at LSN {self._writer.durable_lsn} below the truncated "
                                      f"LSN {truncated}", segment=os.path.basename(self._segments[-1].path),
                                      offset=self._segments[-1].size)
            self._watcher = DurabilityWatcher(self._writer.queue.wait_durable)
            self._loop_notices: LoopDurability | None = None   # made on the first loop's first watch
            self._tso = TSO(self._sm.tso_limit, lambda limit: self._propose(command("reserve_tso", limit=limit)))
            if type(self).get_tso_timestamp is LogService.get_tso_timestamp:
                self.get_tso_timestamp = self._tso.get   # one C call (it refuses once closed, as below)
            self._closed = False
            self._worker = (TruncationWorker(weakref.WeakMethod(self.run_truncation), truncation_interval)
                            if truncation_interval > 0 else None)
        except BaseException:
            self._release()
            raise

    # --- state machine ---------------------------------------------------------------------------

    def _propose(self, cmd: bytes, persist: bool = True):
        """Apply one command to the state machine, then make it durable (the single-node commit)."""
        with self._meta_lock:
            result = self._sm.update(Entry(self._sm.index + 1, cmd))
            if persist:
                self._save_state_locked()
            else:
                self._reports_dirty = True
            return result

    def _save_state_locked(self) -> None:
        # with one open service per directory nobody else writes STATE_FILE.tmp; the one way to lose
        # it mid-save is the directory being removed (or replaced) under this service: stop then
        if not self._lock.still_ours():
            raise LogServiceFailed(f"log directory {self._dir} was removed or replaced while open; "
                                   "this service stops writing there")
        buf = io.BytesIO()
        self._sm.save_snapshot(buf)
        path = os.path.join(self._dir, STATE_FILE)
        replace_file_durably(path + ".tmp", path, buf.getvalue())
        self._reports_dirty = False

    def _check_open(self) -> None:
        if self._closed:
            raise LogServiceClosed("the log service is closed")

    # --- append ----------------------------------------------------------------------------------

    def _type_arg(self, t: object) -> int:
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < 1 << 32:
            raise InvalidArgument(f"record type must be an int in [0, 2**32), got {t!r}")
        return t

    def append(self, payload: bytes | LogRecord, replica_id: int = 0, type: int = USER_RECORD) -> int:
        return self._append(payload, replica_id, type)

    def _append(self, payload, replica_id: int, type: int) -> int:
        if self._closed:
            raise LogServiceClosed("the log service is closed")
        if payload.__class__ is bytes and type.__class__ is int and type == USER_RECORD:  # the common case
            prefix = _PREFIXES.get(replica_id) if replica_id.__class__ is int else None
            if prefix is None:
                prefix = _new_prefix(replica_id)
            if len(payload) > self._max_payload:
                raise RecordTooLarge(f"record data of {len(payload) + 12} bytes exceeds max_record_size "
                                     f"{self._config.max_record_size}")
            return self._writer.append_one(USER_RECORD, prefix, payload)
        if isinstance(payload, LogRecord):
            prefix, payloads, rtype = b"", [payload.data], self._type_arg(payload.type)
        else:
            if not isinstance(payload, BYTES_LIKE):
                raise InvalidArgument(f"payload must be bytes-like, not {payload.__class__.__name__}")
            prefix, payloads, rtype = data_prefix(replica_id), [payload], self._type_arg(type)
        size = len(prefix) + memoryview(payloads[0]).nbytes
        if size > self._config.max_record_size:
            raise RecordTooLarge(f"record data of {size} bytes exceeds max_record_size "
                                 f"{self._config.max_record_size}")
        return self._writer.append(rtype, prefix, payloads)

    def append_many(self, payloads: Iterable[bytes], replica_id: int = 0, type: int = USER_RECORD) -> int:
        self._check_open()
        if isinstance(payloads, BYTES_LIKE):
            raise InvalidArgument("append_many takes a sequence of payloads, not one bytes object")
        if isinstance(payloads, np.ndarray):
            return self._append_rows(payloads, replica_id, type)
        payloads = list(payloads)
        if not payloads:
            raise InvalidArgument("append_many needs at least one payload")
        prefix, rtype = data_prefix(replica_id), self._type_arg(type)
        limit = self._config.max_record_size - len(prefix)
        for i, p in enumerate(payloads):
            if not isinstance(p, BYTES_LIKE):
                raise InvalidArgument(f"payload {i} must be bytes-like, not {p.__class__.__name__}")
            if memoryview(p).nbytes > limit:
                raise RecordTooLarge(f"payload {i} of {memoryview(p).nbytes} bytes exceeds max_record_size "
                                     f"{self._config.max_record_size} (with the 12-byte header)")
        return self._writer.append(rtype, prefix, payloads)

    def append_group(self, payloads: list, replica_ids: list, type: int = USER_RECORD) -> int:
        """Append payloads[k] as a record of replica replica_ids[k], all as one group (consecutive
        LSNs, durable together); returns the first LSN. What a server does with the appends of many
        clients that arrive together."""
        self._check_open()
        if len(payloads) != len(replica_ids) or not payloads:
            raise InvalidArgument("append_group needs as many replica ids as payloads, and at least one")
        rtype = self._type_arg(type)
        limit = self._config.max_record_size
        datas = []
        for i, (p, rid) in enumerate(zip(payloads, replica_ids)):
            if not isinstance(p, BYTES_LIKE):
                raise InvalidArgument(f"payload {i} must be bytes-like, not {p.__class__.__name__}")
            prefix = _PREFIXES.get(rid) if rid.__class__ is int else None
            if prefix is None:
                prefix = _new_prefix(rid)
            if len(prefix) + memoryview(p).nbytes > limit:
                raise RecordTooLarge(f"payload {i} of {memoryview(p).nbytes} bytes exceeds max_record_size "
                                     f"{limit} (with the 12-byte header)")
            datas.append(prefix + bytes(p))
        return self._writer.append(rtype, b"", datas)

    def queue_group(self, payloads: list, replica_ids: list, type: int = USER_RECORD,
                    loop: asyncio.AbstractEventLoop | None = None) -> list[int]:
        """append_group without waiting: each payload is queued as a record of its replica id, in
        order, and its LSN returned; `when_durable(lsns[-1], ...)` says when they are durable. What
        a server does so that no thread waits per call. A payload it refuses (size, replica id)
        raises before anything is queued. Given the running event `loop` (called on its thread),
        that loop writes the group itself once it has read what is ready, when the log is idle."""
        self._check_open()
        if len(payloads) != len(replica_ids) or not payloads:
            raise InvalidArgument("queue_group needs as many replica ids as payloads, and at least one")
        rtype = self._type_arg(type)
        prefixes = []
        for i, (p, rid) in enumerate(zip(payloads, replica_ids)):
            if p.__class__ is not bytes:
                raise InvalidArgument(f"payload {i} must be bytes, not {p.__class__.__name__}")
            prefix = _PREFIXES.get(rid) if rid.__class__ is int else None
            if prefix is None:
                prefix = _new_prefix(rid)
            if len(p) > self._max_payload:
                raise RecordTooLarge(f"payload {i} of {len(p)} bytes exceeds max_record_size "
                                     f"{self._config.max_record_size} (with the 12-byte header)")
            prefixes.append(prefix)
        notices = self._notices_on(loop) if loop is not None else None
        first = self._writer.queue.enqueue_many(rtype, prefixes, payloads, notices is None)
        if notices is not None:
            notices.commit_soon()
        return list(range(first, first + len(payloads)))

    def when_durable(self, lsn: int, callback, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """callback(None) once every record up to `lsn` (one that queue_group handed out) is durable,
        as durable as an append's return makes it; callback(exc) when the log fails first. The
        callback runs on the service's durability watcher thread; or, given the running event
        `loop` (called on its thread), on that loop, which the log's flusher then wakes directly."""
        notices = self._notices_on(loop) if loop is not None else None
        if notices is not None:
            notices.watch(lsn, callback)
        else:
            self._watcher.watch(lsn, callback)

    def _notices_on(self, loop: asyncio.AbstractEventLoop) -> LoopDurability | None:
        """The durability notices of `loop` (the first loop to ask gets them; another gets None)."""
        notices = self._loop_notices
        if notices is None:
            self._check_open()
            notices = self._loop_notices = LoopDurability(self._writer.queue, loop)
        return notices if notices.loop is loop else None

    def _close_loop_notices(self) -> None:
        """Close the loop's notices on their loop (the writer drained its queue: each is answered)."""
        notices = self._loop_notices
        if notices is None:
            return
        try:
            if asyncio.get_running_loop() is notices.loop:
                notices.close()
                return
        except RuntimeError:
            pass                              # not on a loop
        closed = threading.Event()

        def close() -> None:
            try:
                notices.close()
            finally:
                closed.set()
        try:
            notices.loop.call_soon_threadsafe(close)
        except RuntimeError:                  # that loop is closed: it watches nothing any more
            return
        if not closed.wait(LOOP_CLOSE_TIMEOUT_S):
            log.warning("log service %s: its event loop did not take the durability notices' close "
                        "within %g s", self._dir, LOOP_CLOSE_TIMEOUT_S)

    def _append_rows(self, rows: np.ndarray, replica_id: int, type: int) -> int:
        """append_many of a 2-D uint8 array: one record per row, framed without a Python object per row."""
        if rows.ndim != 2 or rows.dtype != np.uint8:
            raise InvalidArgument(f"append_many takes a 2-D uint8 array (one payload per row), "
                                  f"got {rows.ndim}-D {rows.dtype}")
        if rows.shape[0] == 0:
            raise InvalidArgument("append_many needs at least one payload")
        if rows.shape[1] + 12 > self._config.max_record_size:
            raise RecordTooLarge(f"rows of {rows.shape[1]} bytes exceed max_record_size "
                                 f"{self._config.max_record_size} (with the 12-byte header)")
        return self._writer.append(self._type_arg(type), data_prefix(replica_id), np.ascontiguousarray(rows))

    # --- read ------------------------------------------------------------------------------------

    def _locate(self, first_lsn: int, max_size: int):
        """Under the lock: the segment, byte range and record count of a read (or None at the end)."""
        lsn_arg("first_lsn", first_lsn)
        if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 0:
            raise InvalidArgument(f"max_size must be an int >= 0, got {max_size!r}")
        with self._cv:
            self._check_open()
            latest = self._writer.durable_lsn
            bound = self._deletion_bound()
            oldest = self._segments[0].first_lsn
            if first_lsn <= bound or first_lsn < oldest or first_lsn == 0:
                raise InvalidRange(f"read({first_lsn}): LSNs up to {max(bound, oldest - 1)} are truncated")
            if first_lsn > latest + 1:
                raise InvalidRange(f"read({first_lsn}): beyond the end of the log (latest LSN {latest})")
            if first_lsn == latest + 1:
                return None
            segs = self._segments
            seg = segs[bisect.bisect_right(segs, first_lsn, key=lambda s: s.first_lsn) - 1]
            i = first_lsn - seg.first_lsn
            visible = min(seg.count, latest - seg.first_lsn + 1) - i
            starts = seg.starts
            k = wal.fit(starts, i, visible, max_size)
            seg.open_reader()
            return seg, int(starts[i]), int(starts[i + k]), k

    def _fetch(self, first_lsn: int, max_size: int, mapped: bool = False):
        where = self._locate(first_lsn, max_size)
        if where is None:
            return None
        seg, start, end, k = where
        buf = seg.map(start, end) if mapped else seg.pread(start, end - start)
        # a mapped read checks frame lengths and LSNs only: see read_batch_mapped
        starts, types, lengths, stop, status = wal.scan(buf, 0, first_lsn, k, max_length=MAX_FRAME_LENGTH,
                                                        verify=not mapped)
        if len(starts) != k:
            name = os.path.basename(seg.path)
            raise CorruptLogError(f"corrupt log: {wal.STATUS_NAMES[status]} reading LSN {first_lsn + len(starts)} "
                                  f"in segment {name} at offset {start + stop}", segment=name, offset=start + stop)
        return buf, starts, types, lengths, k

    def read(self, first_lsn: int, max_size: int) -> tuple[list[LogRecord], int]:
        got = self._fetch(first_lsn, max_size)
        if got is None:
            return [], first_lsn
        buf, starts, types, lengths, k = got
        return wal.decode(buf, starts, types, lengths, first_lsn, LogRecord), first_lsn + k

    def read_batch(self, first_lsn: int, max_size: int) -> RecordBatch:
        return self._batch(first_lsn, max_size, False)

    def read_batch_mapped(self, first_lsn: int, max_size: int) -> RecordBatch:
        """read_batch without a copy: `buf` is a read-only view of the segment file's mapping, kept
        mapped while the view lives. The frames' CRC-32C are not checked a second time: the open
        checked every frame of the log (recovery.py), and later frames were written by this
        service. For a reader of the whole log right after open (the primary's recovery)."""
        return self._batch(first_lsn, max_size, True)

    def _batch(self, first_lsn: int, max_size: int, mapped: bool) -> RecordBatch:
        import numpy as np
        got = self._fetch(first_lsn, max_size, mapped)
        if got is None:
            e32 = np.empty(0, dtype=np.uint32)
            return RecordBatch(first_lsn, e32, np.empty(0, dtype=np.uint64), e32, b"", first_lsn)
        buf, starts, types, lengths, k = got
        return RecordBatch(first_lsn, types, starts + np.uint64(wal.HEADER_SIZE), lengths, buf, first_lsn + k)

    # --- truncation ------------------------------------------------------------------------------

    def truncate(self, lsn: int) -> None:
        self._check_open()
        lsn_arg("lsn", lsn)
        self._propose(command("truncate", lsn=lsn, latest=self._writer.durable_lsn))
        if self._worker is not None:
            self._worker.poke()

    def get_truncated_lsn(self) -> int:
        self._check_open()
        return self._sm.lookup("truncated_lsn")

    def get_latest_lsn(self) -> int:
        self._check_open()
        return self._writer.durable_lsn

    def _deletion_bound(self) -> int:
        """Records at or below it may be deleted: min(truncated LSN, every reader's replayed LSN).
        Records above it are never deleted, so they stay readable even below the truncated LSN."""
        bound = self._sm.truncated_lsn
        lowest = self._sm.lookup("min_reader_lsn")
        return bound if lowest is None else min(bound, lowest)

    def get_first_lsn(self) -> int:
        self._check_open()
        with self._cv:
            return max(self._segments[0].first_lsn, self._deletion_bound() + 1)

    def register_reader(self, name: str, replayed_lsn: int = 0) -> None:
        self._check_open()
        self._propose(command("register", name=reader_name(name),
                              lsn=self._replayed_arg("register_reader", name, "replayed_lsn", replayed_lsn)))

    def report_replayed(self, name: str, lsn: int) -> None:
        self._check_open()
        lsn = self._replayed_arg("report_replayed", reader_name(name), "lsn", lsn)
        # not persisted at once: a report lost in a crash only makes deletion more cautious
        self._propose(command("report", name=name, lsn=lsn), persist=False)
        if self._worker is not None:
            self._worker.poke()

    def _replayed_arg(self, method: str, name: str, arg: str, lsn: int) -> int:
        """A reader's replayed LSN: an LSN no later than the latest durable one."""
        lsn_arg(arg, lsn)
        if lsn > self._writer.durable_lsn:
            raise InvalidArgument(f"{method}({name!r}, {lsn}): beyond the latest LSN {self._writer.durable_lsn}")
        return lsn

    def unregister_reader(self, name: str) -> None:
        self._check_open()
        self._propose(command("unregister", name=reader_name(name)))
        if self._worker is not None:
            self._worker.poke()

    def readers(self) -> dict[str, int]:
        self._check_open()
        return self._sm.lookup("readers")

    def run_truncation(self) -> int:
        """One round of the truncation worker: delete whole segments below min(truncated LSN, every
        registered reader's replayed LSN). Returns how many segments it removed."""
        with self._meta_lock:
            if self._closed:
                return 0
            bound = self._deletion_bound()
            if self._reports_dirty:
                self._save_state_locked()
            with self._cv:
                n = removable(self._segments, bound)
                victims = self._segments[:n]
                del self._segments[:n]
        if victims:
            unlink_segments(self._dir, [s.path for s in victims])
        return len(victims)

    # --- TSO, config, close ----------------------------------------------------------------------

    def get_tso_timestamp(self, count: int) -> int:
        self._check_open()
        return self._tso.get(count)

    def config(self) -> LogServiceConfig:
        return self._config

    def stats(self) -> dict:
        """Counters: writes so far (groups; records / groups = the group-commit factor), of which
        direct_writes were a lone appender's own (fsync="batch"/"never") and loop_groups an event
        loop's own (a framed server's batches), the flusher's naps for an expected group (its commit
        delay with concurrent appenders), segments, the latest and the synced LSN, failed
        pre-allocations."""
        with self._cv:
            q = self._writer.queue
            return {"groups": self._writer.groups, "direct_writes": q.direct_writes, "loop_groups": q.groups_here,
                    "flusher_naps": q.naps,
                    "segments": len(self._segments),
                    "latest_lsn": self._writer.durable_lsn, "synced_lsn": q.synced_lsn,
                    "first_lsn": self._segments[0].first_lsn, "prealloc_errors": self._writer.prealloc_errors}

    def sync(self) -> None:
        """Make every appended record durable now (for fsync="batch"/"never")."""
        self._check_open()
        self._writer.sync()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._tso.close()
        if self._worker is not None:
            self._worker.stop()
        try:
            self._writer.close()
            self._watcher.close()       # the writer drained its queue: every watch is answered
            self._close_loop_notices()
            with self._meta_lock:
                if self._reports_dirty:
                    self._save_state_locked()
        finally:
            self._sm.close()
            self._release()

    def _release(self) -> None:
        writer = getattr(self, "_writer", None)
        if writer is not None:
            writer.close()  # stops the flusher thread (a no-op after close())
        for seg in getattr(self, "_segments", []):
            seg.close()
        if self._lock is not None:
            self._lock.release()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    # --- pipelined appends: queue now, wait for durability later ----------------------------------
    # (for a writer that orders its records under its own lock and must not hold that lock across
    # the fsync: the TN's commits, the primary's WAL; a separate block, the append paths are unchanged)

    def enqueue(self, payload: bytes, replica_id: int = 0) -> int:
        """Queue one user record without waiting for it: its LSN. Calls made one after another get
        increasing LSNs in call order, and share groups (fsyncs) with every other append.
        `wait_durable(lsn)` returns once the record is as durable as `append` makes it."""
        if self._closed:
            raise LogServiceClosed("the log service is closed")
        prefix = _PREFIXES.get(replica_id) if replica_id.__class__ is int else None
        if prefix is None:
            prefix = _new_prefix(replica_id)
        if not isinstance(payload, BYTES_LIKE):
            raise InvalidArgument(f"payload must be bytes-like, not {payload.__class__.__name__}")
        if memoryview(payload).nbytes > self._max_payload:
            raise RecordTooLarge(f"record data of {memoryview(payload).nbytes + 12} bytes exceeds max_record_size "
                                 f"{self._config.max_record_size}")
        return self._writer.queue.enqueue_one(USER_RECORD, prefix, payload)

    def wait_durable(self, lsn: int) -> int:
        """Return once every record up to `lsn` (an LSN `enqueue` or an append returned) is durable:
        the highest durable LSN then. LogServiceFailed when a write failed before."""
        q = self._writer.queue
        if lsn_arg("lsn", lsn) >= q.next:
            raise InvalidArgument(f"LSN {lsn} was not handed out yet (the next is {q.next})")
        return q.wait_durable(lsn)

    def pipelined_queue(self) -> tuple[CommitQueue, bytes, int] | None:
        """What `enqueue` and `wait_durable` do, for a committer that frames user records into the
        queue itself (_ext/pipelined_core.pyx): the commit queue, the data prefix of replica 0 and
        the largest payload. None when a subclass changes either method."""
        if type(self).enqueue is not LogService.enqueue or type(self).wait_durable is not LogService.wait_durable:
            return None
        return self._writer.queue, _PREFIXES[0], self._max_payload
