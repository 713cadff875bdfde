"""MetaService: the embedded meta-service. Every write is proposed as a log entry {time_ms, cmd},
made durable in the log (when the service has one), then applied to the state machine.

The log is the embedded log service in the service's directory. A replicated meta-service is a
Raft group of MetaReplicas (replica.py, docs/meta_raft.md), not a MetaService on a shared log.
"""
from __future__ import annotations

import io
import logging
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from logtide.engine.group_commit import open_committer
from logtide._ext.durable_io import replace_file_durably
from logtide.engine.meta.command import (
    TxnCmd, UpsertCmd, check_key, check_match_seq, make_spec)
from logtide.engine.meta.log_entry import encode_entry
from logtide.engine.meta.match_seq import ANY, MatchSeq
from logtide.engine.meta.seqv import SeqV
from logtide.engine.meta.state_machine import MetaStateMachine
from logtide.engine.meta.txn_reply import TxnReply
from logtide.engine.meta.watch import Watcher, WatchHub, check_filter, start_watch
from logtide.engine.statemachine import Entry
from logtide.errors import (CorruptionError, GroupCommitFailed, InvalidTruncateLsn, LogtideError, MetaClosedError,
                            MetaError, MetaInvalidArgument, MetaStorageFailed)

logger = logging.getLogger(__name__)
SNAPSHOT_FILE = "meta.snapshot"     # the state machine at some applied LSN (docs/meta_format.md)
LOG_DIR = "log"                     # the log-service directory holding every entry after it
DEFAULT_SNAPSHOT_EVERY = 10_000     # entries between snapshots (each snapshot lets the log be truncated)
REPLAY_READ_BYTES = 4 << 20


class _Slot:
    """One proposal: its command, its log time, and where its publication leaves the reply."""
    __slots__ = ("cmd", "time", "reply", "error")

    def __init__(self, cmd):
        self.cmd = cmd
        self.time = 0
        self.reply = None
        self.error = None


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class MetaService:
    """Databend's KV semantics: seq, MatchSeq, TTL on log time, conditional transactions, watch."""

    def __init__(self, sm: Optional[MetaStateMachine] = None, clock: Optional[Callable[[], int]] = None,
                 leader: Optional[str] = None, log=None, dir: Optional[Path] = None,
                 snapshot_every: int = DEFAULT_SNAPSHOT_EVERY):
        self._sm = sm if sm is not None else MetaStateMachine()
        self._clock = clock or wall_clock_ms
        self._lock = threading.RLock()
        self._order = threading.Lock()     # proposals take their log time and their LSN in one order
        self._stopping = False
        self._time_lock = threading.Lock()
        self._log = log
        self._dir = dir
        self._snapshot_every = snapshot_every
        self._snapshot_lock = threading.Lock()
        self._snapshot_index = self._sm.applied_index
        self.snapshots_taken = 0
        self._hub = WatchHub()
        self._sm.subscribe(self._hub, indexed=True)
        self._last_time_ms = self._sm.last_time_ms
        self._closed = False
        self.leader = leader     # the address of the leader, named in every RPC reply
        # concurrent writers share one log write (one fsync) per group (engine/group_commit)
        self._committer = None if log is None else open_committer(
            log, publish=self._publish_group, write_group=self._write_group)

    @classmethod
    def in_memory(cls, clock: Optional[Callable[[], int]] = None) -> "MetaService":
        """A service with no log and no snapshot: its state lives and dies with the process."""
        return cls(clock=clock)

    @classmethod
    def open(cls, path, clock: Optional[Callable[[], int]] = None, snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
             fsync: str = "always") -> "MetaService":
        """The durable service in directory `path`: load the snapshot, replay the log after it.

        Every write is appended to the log `path`/log (durable on return) before it is applied;
        every `snapshot_every` entries the state is snapshotted and the log truncated below it.
        """
        from logtide.engine.logservice import LogService
        if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int) or snapshot_every < 1:
            raise MetaInvalidArgument(f"snapshot_every must be an int >= 1, got {snapshot_every!r}")
        from logtide.engine.dir_lock import DirLock
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        lock = DirLock(d, "meta.lock", "meta directory")   # before the snapshot is read: one owner
        log = None
        try:
            sm = MetaStateMachine()
            snap = d / SNAPSHOT_FILE
            if snap.exists():
                with open(snap, "rb") as f:
                    sm.recover_from_snapshot(f)
            log = LogService.open(d / LOG_DIR, fsync=fsync)
            cls._replay(sm, log)
            svc = cls(sm, clock=clock, log=log, dir=d, snapshot_every=snapshot_every)
        except BaseException:
            if log is not None:
                log.close()
            lock.release()
            raise
        svc._dir_lock = lock
        return svc

    @staticmethod
    def _replay(sm: MetaStateMachine, log) -> None:
        """Apply every log entry after the snapshot's index, in LSN order."""
        latest, truncated = log.get_latest_lsn(), log.get_truncated_lsn()
        lsn = sm.applied_index + 1
        if lsn <= truncated:
            raise CorruptionError(f"meta snapshot ends at entry {sm.applied_index} but the log is truncated "
                                  f"up to {truncated}: entries are missing")
        if sm.applied_index > latest:
            raise CorruptionError(f"meta snapshot ends at entry {sm.applied_index}, after the log's end {latest}")
        while lsn <= latest:
            records, nxt = log.read(lsn, REPLAY_READ_BYTES)
            for r in records:
                if r.lsn > latest:
                    return
                sm.update(Entry(r.lsn, r.payload))
            if nxt <= lsn:
                raise CorruptionError(f"meta log read at {lsn} made no progress")
            lsn = nxt

    # ------------------------------------------------------------------ proposing
    def _now_ms(self) -> int:
        return int(self._clock())

    def _stamp(self) -> int:
        # the proposer's clock, kept monotonic: log time never goes back
        with self._time_lock:
            t = max(self._now_ms(), self._last_time_ms)
            self._last_time_ms = t
            return t

    def _propose(self, cmd):
        if self._log is None:
            with self._lock:
                if self._closed:
                    raise MetaClosedError("the meta-service is closed")
                t = self._stamp()
                return self._sm.apply(self._sm.applied_index + 1, t, cmd)
        slot = _Slot(cmd)
        self._commit([slot])
        if slot.error is not None:
            raise slot.error
        if self._sm.applied_index - self._snapshot_index >= self._snapshot_every:
            self._snapshot_after_write()
        return slot.reply

    def _queue(self, slots: list[_Slot]) -> int:
        """Queue proposals for the log, stamped in queue order; the ticket of the last."""
        c = self._committer
        with self._order:
            if self._stopping:
                raise MetaClosedError("the meta-service is closed")
            for s in slots:
                s.time = self._stamp()
                ticket = c.enqueue(encode_entry(s.time, s.cmd), s) if c.pipelined else c.enqueue(s)
        return ticket

    def _commit(self, slots: list[_Slot]) -> None:
        """Queue proposals and return once they are durable and applied."""
        try:
            self._committer.wait(self._queue(slots))
        except GroupCommitFailed as exc:     # a meta client's error, still a GroupCommitFailed
            raise MetaStorageFailed(f"the meta-service's log failed ({exc}); writes are refused until "
                                    f"it is reopened") from exc

    def _write_group(self, batch: list[_Slot]) -> None:
        """The leader committer's write: append one group (consecutive LSNs, one fsync), then apply it."""
        payloads = [encode_entry(s.time, s.cmd) for s in batch]
        first = self._log.append_many(payloads)
        self._publish_group(batch, range(first, first + len(batch)))

    def _publish_group(self, batch: list[_Slot], lsns) -> None:
        """Apply durable proposals in LSN order, leaving each its reply or error."""
        with self._lock:
            for lsn, s in zip(lsns, batch):
                try:
                    s.reply = self._sm.apply(lsn, s.time, s.cmd)
                except Exception as exc:  # handed to its proposer
                    s.error = exc

    def _snapshot_after_write(self) -> None:
        """The periodic snapshot, taken by a writer whose write is already durable and applied:
        its failure (a full disk, a log group without a leader) must not make that write look
        failed. The next write past the interval tries again."""
        try:
            self.snapshot(wait=False)
        except (LogtideError, OSError) as exc:
            logger.warning("meta-service snapshot failed, retried after a later write: %s", exc)

    def snapshot(self, wait: bool = True) -> Optional[int]:
        """Save the state to the snapshot file, then truncate the log up to it; returns its index.

        The snapshot is durable (temp file, fsync, rename, fsync dir) before the log is truncated.
        With wait=False, returns None when another snapshot is already in progress.
        """
        if self._log is None:
            raise MetaError("an in-memory meta-service has no snapshot file")
        if not self._snapshot_lock.acquire(blocking=wait):
            return None
        try:
            buf = io.BytesIO()
            with self._lock:
                index = self._sm.save_snapshot(buf)
            if index <= self._snapshot_index and (self._dir / SNAPSHOT_FILE).exists():
                return self._snapshot_index
            replace_file_durably(self._dir / (SNAPSHOT_FILE + ".tmp"), self._dir / SNAPSHOT_FILE, buf.getvalue())
            if index > self._log.get_truncated_lsn():
                try:
                    self._log.truncate(index)
                except InvalidTruncateLsn:
                    if self._log.get_truncated_lsn() < index:
                        raise
                    # truncated past index meanwhile (by the cluster's truncation): done
            self._snapshot_index = index
            self.snapshots_taken += 1
            return index
        finally:
            self._snapshot_lock.release()

    # ------------------------------------------------------------------ writes
    def upsert(self, key: str, value, match_seq: MatchSeq = ANY, ttl_ms: Optional[int] = None,
               expire_at: Optional[int] = None) -> Tuple[Optional[SeqV], Optional[SeqV]]:
        """Write, delete (DELETE) or re-meta (AS_IS) one key if match_seq holds; returns (prev, result)."""
        return self._propose(UpsertCmd(key, value, check_match_seq(match_seq), make_spec(ttl_ms, expire_at)))

    def txn(self, conditions=(), if_then=(), else_then=(), branches=None, operations=None) -> TxnReply:
        """Run the first branch whose predicate holds, else if_then/else_then by the conditions."""
        if branches is not None and operations is not None:
            raise MetaInvalidArgument("give branches or operations (its alias), not both")
        br = branches if branches is not None else operations
        return self._propose(TxnCmd(conditions or (), if_then or (), else_then or (), br or ()))

    def apply_command(self, cmd):
        """Propose an already built command (UpsertCmd or TxnCmd): what the RPC server calls."""
        if not isinstance(cmd, (UpsertCmd, TxnCmd)):
            raise MetaInvalidArgument(f"not a command: {cmd!r}")
        return self._propose(cmd)

    def apply_commands(self, cmds: Sequence) -> list:
        """apply_command of many commands queued at once, so they share one group (one fsync); each
        item of the result is that command's reply or the error it failed with."""
        for c in cmds:
            if not isinstance(c, (UpsertCmd, TxnCmd)):
                raise MetaInvalidArgument(f"not a command: {c!r}")
        if self._log is None:
            out = []
            for c in cmds:
                try:
                    out.append(self._propose(c))
                except Exception as exc:  # noqa: BLE001 - that command's result
                    out.append(exc)
            return out
        slots = [_Slot(c) for c in cmds]
        try:
            self._commit(slots)
        except MetaClosedError:
            raise
        except LogtideError as exc:  # the log is unavailable: no command of the group is acknowledged
            for s in slots:
                if s.reply is None and s.error is None:
                    s.error = exc
        out = [s.error if s.error is not None else s.reply for s in slots]
        if self._sm.applied_index - self._snapshot_index >= self._snapshot_every:
            self._snapshot_after_write()
        return out

    # ------------------------------------------------------------------ reads (hide keys expired at local time)
    def _read(self, fn, *args):
        with self._lock:
            if self._closed:
                raise MetaClosedError("the meta-service is closed")
            return fn(*args, self._now_ms())

    def get(self, key: str) -> Optional[SeqV]:
        return self._read(self._sm.get, check_key(key))

    def mget(self, keys: Sequence[str]) -> List[Optional[SeqV]]:
        if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
            raise MetaInvalidArgument(f"keys must be a list of str, got {type(keys).__name__}")
        return self._read(self._sm.mget, [check_key(k) for k in keys])

    def list(self, prefix: str, limit: Optional[int] = None) -> List[Tuple[str, SeqV]]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise MetaInvalidArgument(f"limit must be None or an int >= 0, got {limit!r}")
        return self._read(self._sm.list, check_key(prefix, "prefix"), limit)

    @property
    def seq(self) -> int:
        """The last seq handed out."""
        with self._lock:
            return self._sm.seq

    @property
    def applied_index(self) -> int:
        with self._lock:
            return self._sm.applied_index

    # ------------------------------------------------------------------ watch
    def watch(self, key: str, key_end: Optional[str] = None, filter: str = "all",
              initial_flush: bool = False, after=None) -> Watcher:
        """Events for keys in [key, key_end) (key_end None: just `key`), from now on.

        With initial_flush, the live keys of the range come first (is_initialization=True), then
        FLUSH_MARKER. Registration and flush happen under the apply lock, so no change falls between.
        """
        check_key(key)
        if key_end is not None:
            check_key(key_end, "key_end")
        f = check_filter(filter)
        if not isinstance(initial_flush, bool):
            raise MetaInvalidArgument("initial_flush must be a bool")
        with self._lock:
            if self._closed:
                raise MetaClosedError("the meta-service is closed")
            # `after` (resume after a cursor) needs a watch history, which only Raft replicas keep
            return start_watch(self._hub, self._sm, key, key_end, f, initial_flush, self._now_ms(), after)

    # ------------------------------------------------------------------ lifecycle
    @property
    def durable(self) -> bool:
        """True when writes go through a log (MetaService.open), False for in_memory()."""
        return self._log is not None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._hub.close_all()
        if self._log is not None:
            with self._order:
                self._stopping = True       # queued proposals still go through, new ones are refused
            if self._committer.failed is None:
                try:
                    self._committer.drain()
                except LogtideError as exc:
                    logger.warning("meta-service closed with writes that did not reach its log: %s", exc)
            with self._snapshot_lock:
                self._log.close()
        lock = getattr(self, "_dir_lock", None)
        if lock is not None:
            lock.release()

    def __enter__(self) -> "MetaService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        # a service nobody closed: its queued writes are made durable and its directory released
        try:
            self.close()
        except Exception:  # noqa: BLE001 - partly constructed, or interpreter shutdown
            pass
