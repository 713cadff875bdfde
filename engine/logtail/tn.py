"""The transaction node (TN): catalog, transactions and their commit pipeline; flush and checkpoint
(tn_flush.py), recovery (tn_recovery.py), logtail pull (tn_pull.py) and push (tn_push.py).

Every commit is durable in the log service before it is acknowledged; a TN reopened on the same log
and object store rebuilds its state from the newest checkpoint plus the log after it.

Commits go through group commit (engine/group_commit). Under the commit lock a commit is checked for
conflicts (commit_check.py; a small one-table insert in C, _ext/tn_txn.pyx and _ext/small_insert.pyx,
with the same outcome and log bytes), takes its commit ts, reserves its row ids and primary keys (so later
commits check against it exactly as if it were already committed) and queues its log record. Once
durable, records are published in ts order: in-memory rows, logtail table, `last_ts`. Queue order is
ts order, so log order is ts order and the durable log is always a ts-prefix of what was reserved:
a crash loses a suffix of unacknowledged commits, never part of one and never one an acknowledged
commit depends on.
"""
from __future__ import annotations

import threading
import weakref
from pathlib import Path

import numpy as np

from logtide._ext.tn_txn import CommitPath
from logtide.arg_checks import int_arg
from logtide.engine.group_commit import open_committer
from logtide.engine.logtail import logtail_format as fmt
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.column_batch import ColumnBatch
from logtide.engine.logtail.commit_tso import CommitTso
from logtide.engine.logtail.commit_check import SMALL_TXN_KEYS, check_many, check_small
from logtide.engine.logtail.logtail_format import DELETE, INSERT, Entry, Record
from logtide.engine.logtail.logtail_table import Handle, LogtailTable, OneEntryHandle
from logtide.engine.logtail.tn_flush import CHECKPOINT_PREFIX, READER_NAME, Checkpoint, TnFlush
from logtide.engine.logtail.tn_pull import TnPull
from logtide.engine.logtail.tn_push import TnPush, run_pusher
from logtide.engine.logtail.tn_recovery import TnRecovery
from logtide.engine.logtail.tn_table import DELETE_LAYOUT, TableState, filled
from logtide.engine.logtail.transport import LocalStream
from logtide.engine.logtail.txn import NO_DELS, NO_INS, Txn, gather_rows
from logtide.engine.objectstore import BLOCK_ROWS, ObjectStore
from logtide.errors import GroupCommitFailed, InvalidArgument, LogtailError, UnknownTableError

__all__ = ["CHECKPOINT_PREFIX", "READER_NAME", "SMALL_TXN_KEYS", "Checkpoint", "TableState", "TransactionNode", "Txn"]


class _Queued:
    """A log record waiting for its group, and what publishing it does."""
    __slots__ = ("rec", "publish")

    def __init__(self, rec: Record, publish) -> None:
        self.rec = rec
        self.publish = publish   # callable(rec) run under the commit lock once durable; None: a commit


class TransactionNode(TnFlush, TnRecovery, TnPull, TnPush):
    """The TN. Open with TransactionNode.open(dir) or TransactionNode(log_service, object_store)."""

    def __init__(self, log, store: ObjectStore, *, heartbeat_ms: float = 2.0, page_size: int = 256,
                 max_pull_rows: int = 1 << 20, c_commits: bool = True) -> None:
        """`c_commits` False: every commit takes the Python path (the reference the C paths are
        tested against)."""
        # checked before anything starts: a zero or NaN heartbeat made the push thread spin
        if isinstance(heartbeat_ms, bool) or not isinstance(heartbeat_ms, (int, float)) \
                or not 0 < heartbeat_ms < float("inf"):
            raise InvalidArgument(f"heartbeat_ms must be a finite number of milliseconds > 0, got {heartbeat_ms!r}")
        heartbeat_s = heartbeat_ms / 1000.0
        int_arg("page_size", page_size, 1)
        int_arg("max_pull_rows", max_pull_rows, 1)
        self.log = log
        # a log whose LSNs have gaps (the replicated one) names each record's LSN; else they are dense
        self._append_each = getattr(log, "append_each", None)
        self.store = store
        self.heartbeat_s = heartbeat_s
        self.max_pull_rows = max_pull_rows
        self.tables: dict[str, TableState] = {}
        self.logtail = LogtailTable(page_size)
        self.checkpoint: Checkpoint | None = None
        self._lock = threading.RLock()          # the commit lock: ts order == queue order == log order
        self._cv = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()
        self.last_ts = 0                        # newest committed ts (commits, flushes, DDL)
        self.last_lsn = 0
        self.last_cleanup = 0                   # cleanup ts of the last flush of every table
        self._lsn_ts: list[tuple[int, int]] = []   # (ts, lsn) of records since the last checkpoint
        self.pushed_ts = 0                      # every handle <= it went to every subscriber
        self._streams: list[LocalStream] = []
        self._closed = False
        self.committer = open_committer(log, publish=self._publish_group, write_group=self._write_group,
                                        lock=self._lock)
        self._pipelined = self.committer.pipelined
        self._tso = CommitTso(log.get_tso_timestamp)   # the ts a commit takes under the commit lock
        self._commits = CommitPath(self.tables, self._lock, self.log.get_tso_timestamp, self.committer, BLOCK_ROWS,
                                   SMALL_TXN_KEYS, c_commits)
        self._recover()
        self.log.register_reader(READER_NAME, self.checkpoint.lsn if self.checkpoint else 0)
        self.pushed_ts = max(self.last_ts, self.log.get_tso_timestamp(1))
        self._pusher = threading.Thread(target=run_pusher, args=(weakref.ref(self), self._cv, self.heartbeat_s),
                                        name="logtail-push", daemon=True)
        self._pusher.start()

    @classmethod
    def open(cls, path, **options) -> "TransactionNode":
        """A TN over `path`/log (log service) and `path`/objects (object store)."""
        from logtide.engine.logservice import LogService
        path = Path(path)
        log = LogService.open(path / "log")
        try:
            tn = cls(log, ObjectStore(path / "objects"), **options)
        except BaseException:
            log.close()     # else its directory stays locked for the retry
            raise
        tn._owns_log = True
        return tn

    def close(self) -> None:
        if self.committer.failed is None:
            self.committer.drain()      # commits already queued are made durable and acknowledged
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            streams = list(self._streams)
        if threading.current_thread() is not self._pusher:   # else: finalized on it (see tn_push.run_pusher)
            self._pusher.join(timeout=5)
        for s in streams:
            s.close()
        if getattr(self, "_owns_log", False):
            self.log.close()

    def __del__(self) -> None:
        # a TN nobody closed: its queued commits are made durable and its push thread ends
        try:
            self.close()
        except Exception:  # noqa: BLE001 - partly constructed, or interpreter shutdown
            pass

    # ------------------------------------------------------------------ catalog

    def _table(self, name: str) -> TableState:
        try:
            return self.tables[name]
        except (KeyError, TypeError):
            raise UnknownTableError(f"no table {name!r}") from None

    def create_table(self, name: str, columns: dict, pk: str) -> TableDef:
        tdef = TableDef.make(name, columns, pk)
        since = self._tso.failures
        with self._lock:
            if name in self.tables:
                raise LogtailError(f"table {name!r} exists")
            ts = self._tso.take(since)
            self.tables[name] = TableState(tdef)   # commits to it queue behind its record
            ticket = self._queue(Record(fmt.CREATE_TABLE, ts, {"table": tdef.to_json()}), self._publish_ts)
        self.committer.wait(ticket)
        return tdef

    def table_def(self, name: str) -> TableDef:
        return self._table(name).tdef

    # ------------------------------------------------------------------ transactions

    def begin(self) -> Txn:
        failed = self.committer.failed
        if failed is not None:   # refused at once: a partitioned log would hold the TSO call to its deadline
            raise GroupCommitFailed(f"the TN's log write failed ({failed!r}); reopen the TN") from failed
        return Txn(self, self._commits, self.log.get_tso_timestamp(1))

    def _queue(self, rec: Record, publish) -> int:
        """Under the commit lock: queue a record (its ts the newest so far); the ticket to wait on."""
        if self._pipelined:     # into the log now: log order is commit-lock order, which is ts order
            return self.committer.enqueue(fmt.encode(rec), _Queued(rec, publish))
        return self.committer.enqueue(_Queued(rec, publish))

    def _write_group(self, group: list[_Queued]) -> None:
        """The leader committer's write: encode the group's records (outside the commit lock), append
        them with one `append_many` (one fsync), then publish them in ts order."""
        payloads = [fmt.encode(q.rec) for q in group]
        if self._append_each is None:
            first = self.log.append_many(payloads)
            lsns = range(first, first + len(group))
        else:
            lsns = self._append_each(payloads)
        with self._cv:
            self._publish_group(group, lsns)

    def _publish_group(self, group: list[_Queued | OneEntryHandle], lsns) -> None:
        """Under the commit lock: durable records become visible in ts order (in-memory rows,
        logtail table, last_ts), one logtail call for a run of commits. A OneEntryHandle in the group
        is a small insert's commit (TxnCore, _ext/tn_txn.pyx), its one entry inserts."""
        lsn_ts = self._lsn_ts
        handles = []
        for q, lsn in zip(group, lsns):
            if q.__class__ is OneEntryHandle:   # a small insert's commit, its handle made when queued
                lsn_ts.append((q.ts, lsn))
                self.tables[q.table].mem_inserts.append(q.entry)
                handles.append(q)
                continue
            rec = q.rec
            lsn_ts.append((rec.ts, lsn))
            if q.publish is None:       # a commit: its handle joins the group's (one logtail call)
                handles.append(self._commit_handle(rec.ts, rec.batches))
            else:
                if handles:
                    self.logtail.append_many(handles)
                    handles = []
                q.publish(rec)
        if handles:
            self.logtail.append_many(handles)
        self.last_lsn = lsns[-1]
        self.last_ts = max(self.last_ts, lsn_ts[-1][0])
        if self._streams:       # the pusher: one wake-up (and one update message) per group
            self._cv.notify_all()   # (with no stream its heartbeat moves pushed_ts soon enough)

    def _publish_ts(self, rec: Record) -> None:
        self.last_ts = rec.ts

    def _commit(self, txn: Txn) -> int:
        # what the transaction writes, per table: its own data, gathered before the commit lock
        work = []
        keys = 0
        names = txn.ins.keys() | txn.dels.keys()
        for table in (names if len(names) == 1 else sorted(names)):
            st = self._table(table)
            ins, dels = txn.ins.get(table, NO_INS), txn.dels.get(table, NO_DELS)
            if not ins and not dels:
                continue
            ins_cols = gather_rows(st.tdef, txn.batches.get(table, []), ins)
            ins_pks = ins_cols[st.tdef.pk]
            keys += len(ins_pks) + len(dels)
            work.append((table, st, ins_cols, ins_pks, dels))
        if not work:
            return self.last_ts
        small = keys <= SMALL_TXN_KEYS
        since = self._tso.failures
        with self._lock:      # the commit lock (the condition's own: no Python frame to enter it)
            # check everything first: a conflict in any table leaves nothing reserved
            plans = [(check_small if small else check_many)(table, st, ins_pks, dels, txn.start_ts)
                     for table, st, _, ins_pks, dels in work]
            ts = self._tso.take(since)
            batches = []
            for (table, st, ins_cols, ins_pks, _), (del_pks, del_rowids) in zip(work, plans):
                # batches as numpy columns: the Arrow bytes are made by the committer, outside the lock
                if len(del_pks):
                    del_ts = filled(len(del_pks), ts)
                    batches.append((table, DELETE, ColumnBatch(DELETE_LAYOUT, [
                        del_rowids // BLOCK_ROWS, (del_rowids % BLOCK_ROWS).astype(np.int32), del_ts, del_pks])))
                    if small:
                        for pk in del_pks.tolist():
                            st.pk_index.delete(pk)
                            st.pk_ts.insert(pk, ts)
                    else:
                        st.pk_index.delete_many(del_pks)
                        st.pk_ts.insert_many(del_pks, del_ts)
                if len(ins_pks):
                    blocks, offs = st.alloc_rowids(len(ins_pks))
                    ins_ts = filled(len(ins_pks), ts)
                    batches.append((table, INSERT, ColumnBatch(st.insert_layout, [
                        blocks, offs, ins_ts, *(ins_cols[c] for c in st.insert_layout.names[3:])])))
                    # reserved: later commits check against these keys as if this one had committed
                    if small:
                        for pk, b, o in zip(ins_pks.tolist(), blocks.tolist(), offs.tolist()):
                            st.pk_index.insert(pk, b * BLOCK_ROWS + o)
                            st.pk_ts.insert(pk, ts)
                    else:
                        st.pk_index.insert_many(ins_pks, blocks * BLOCK_ROWS + offs)
                        st.pk_ts.insert_many(ins_pks, ins_ts)
            ticket = self._queue(Record(fmt.COMMIT, ts, {}, batches), None)   # published by _write_group
        self.committer.wait(ticket)   # durable (and published) before it is acknowledged
        return ts

    def _publish_commit(self, ts: int, batches: list) -> None:
        """A durable commit becomes visible: in-memory rows, the logtail table, last_ts (in ts order)."""
        self.logtail.append(self._commit_handle(ts, batches))
        self.last_ts = ts

    def _commit_handle(self, ts: int, batches: list) -> Handle:
        """A durable commit's rows join the in-memory rows; its logtail handle (appended by the caller)."""
        tables: dict = {}
        for table, kind, t in batches:
            st = self._table(table)
            e = Entry(kind, ts, t)
            es = tables.get(table)
            if es is None:
                tables[table] = [e]
            else:
                es.append(e)
            (st.mem_deletes if kind == DELETE else st.mem_inserts).append(e)
        return Handle(ts, tables)
