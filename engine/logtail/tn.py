"""The transaction node (TN): catalog, transactions, logtail collection, pull, push, flush, checkpoint.

Every commit is durable in the log service before it is acknowledged; a TN reopened on the same log
and object store rebuilds its state from the newest checkpoint plus the log after it.

Commits are pipelined (group commit). Under the commit lock a commit is checked for conflicts, takes
its commit ts, reserves its row ids and primary keys (so later commits check against it exactly as
if it were already committed) and queues its log record. Without the lock, one committer at a time
appends every queued record with one `append_many` (one fsync), then publishes them in ts order:
in-memory rows, logtail table, `last_ts`. Queue order is ts order, so log order is ts order and the
durable log is always a ts-prefix of what was reserved: a crash loses a suffix of unacknowledged
commits, never part of one and never one an acknowledged commit depends on.
"""
from __future__ import annotations

import json
import threading
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from logtide import BTree
from logtide.engine.logtail import logtail_format as fmt
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.column_batch import BatchLayout, ColumnBatch
from logtide.engine.logtail.logtail_format import (BLOCK, DELETE, INSERT, META, OFFSET, PK, TS, Entry, Record,
                                                   concat_batches)
from logtide.engine.logtail.logtail_table import Handle, LogtailTable
from logtide.engine.logtail.push_batch import merge_entries
from logtide.engine.logtail.transport import LocalStream, decode_request
from logtide.engine.objectstore import BLOCK_ROWS, ObjectStore
from logtide.engine.pipelined_commit import PipelinedCommitter
from logtide.engine.relay_commit import RelayCommitter
from logtide.errors import (DuplicateKeyError, KeyNotFoundError, LogtailError, MalformedMessageError,
                            SchemaError, StreamClosedError, UnknownTableError, WriteConflictError)

READER_NAME = "logtail-tn"
SMALL_TXN_KEYS = 16     # up to this many keys a commit checks and reserves them one B-tree call each
_SYSTEM = [(BLOCK, np.int64), (OFFSET, np.int32), (TS, np.int64)]
DELETE_LAYOUT = BatchLayout(_SYSTEM + [(PK, np.int64)])
CHECKPOINT_PREFIX = "ckp-"
_NO_INS: dict = {}            # read only: a table a transaction only deletes from
_NO_DELS: frozenset = frozenset()
_EMPTY_KEYS = np.empty(0, dtype=np.int64)
_EMPTY_KEYS.setflags(write=False)


@dataclass
class Checkpoint:
    ts: int
    lsn: int
    name: str


class _Queued:
    """A log record waiting for its group, and what publishing it does."""
    __slots__ = ("rec", "publish")

    def __init__(self, rec: Record, publish) -> None:
        self.rec = rec
        self.publish = publish   # callable(rec) run under the commit lock once durable; None: a commit


class TableState:
    """The TN side of one table."""

    def __init__(self, tdef: TableDef) -> None:
        self.tdef = tdef
        self.insert_layout = BatchLayout(_SYSTEM + list(tdef.dtypes().items()))
        self.pk_index = BTree()      # pk -> rowid (block * BLOCK_ROWS + offset) of the live row
        self.pk_ts = BTree()         # pk -> ts of the last committed write to it (write-write conflicts)
        self.next_block = 1
        self.cur_block = 0
        self.cur_off = BLOCK_ROWS    # forces a new block on the first insert
        self.mem_inserts: list[Entry] = []
        self.mem_deletes: list[Entry] = []
        self.objects: list[dict] = []

    def alloc_rowids(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        off = self.cur_off
        if off + n <= BLOCK_ROWS:       # the common case: the rows fit the current block
            self.cur_off = off + n
            return _filled(n, self.cur_block), np.arange(off, off + n, dtype=np.int32)
        blocks = np.empty(n, dtype=np.int64)
        offs = np.empty(n, dtype=np.int32)
        i = 0
        while i < n:
            if self.cur_off >= BLOCK_ROWS:
                self.cur_block, self.next_block, self.cur_off = self.next_block, self.next_block + 1, 0
            take = min(n - i, BLOCK_ROWS - self.cur_off)
            blocks[i:i + take] = self.cur_block
            offs[i:i + take] = np.arange(self.cur_off, self.cur_off + take, dtype=np.int32)
            self.cur_off += take
            i += take
        return blocks, offs

    def freeze(self) -> None:
        """New rows go to new blocks from now on."""
        self.cur_off = BLOCK_ROWS


class Txn:
    """A transaction: begin() on the TN, then insert/delete/update, then commit()."""

    def __init__(self, tn: "TransactionNode", start_ts: int) -> None:
        self.tn = tn
        self.start_ts = start_ts
        self.ins: dict[str, dict[int, tuple]] = {}     # table -> pk -> (batch number, row index)
        self.batches: dict[str, list] = {}             # table -> [columns dict]
        self.dels: dict[str, set] = {}
        self.done = False

    def _table(self, table: str) -> TableState:
        if self.done:
            raise LogtailError("this transaction is finished")
        return self.tn._table(table)

    def insert(self, table: str, rows: dict) -> None:
        """Insert rows given as {column: values}; every column of the table is required.
        A refused insert (an error raised) leaves the transaction as it was."""
        st = self._table(table)
        cols = st.tdef.coerce(rows)
        pk_list = cols[st.tdef.pk].tolist()
        if len(set(pk_list)) != len(pk_list):
            raise DuplicateKeyError(f"{table}: the same primary key twice in one insert")
        ins = self.ins.get(table, _NO_INS)
        for pk in pk_list:      # every check before the first change
            if pk in ins:
                raise DuplicateKeyError(f"{table}: primary key {pk} inserted twice in this transaction")
        ins = self.ins.setdefault(table, {})
        batches = self.batches.setdefault(table, [])
        b = len(batches)
        for i, pk in enumerate(pk_list):
            ins[pk] = (b, i)
        batches.append(cols)

    def delete(self, table: str, pks) -> None:
        """Delete rows by primary key. A refused delete leaves the transaction as it was."""
        self._table(table)
        pks = np.asarray(pks)
        if pks.dtype.kind not in "iu":
            raise SchemaError(f"{table}: primary keys are int64, got {pks.dtype}")
        if pks.dtype.kind == "u" and pks.size and int(pks.max()) > np.iinfo(np.int64).max:
            # refused here, not at commit, where it would end the whole transaction
            raise SchemaError(f"{table}: primary keys are int64, got {int(pks.max())}")
        ins = self.ins.setdefault(table, {})
        dels = self.dels.setdefault(table, set())
        for pk in pks.reshape(-1).tolist():
            if pk in ins:
                del ins[pk]
            else:
                dels.add(pk)

    def update(self, table: str, rows: dict) -> None:
        """Replace whole rows, found by primary key (a delete of the old row and an insert of the new).
        A refused update leaves the transaction as it was."""
        st = self._table(table)
        cols = st.tdef.coerce(rows)
        pks = cols[st.tdef.pk]
        ins = self.ins.setdefault(table, {})
        dels = self.dels.setdefault(table, set())
        b = len(self.batches.setdefault(table, []))
        for i, pk in enumerate(pks.tolist()):
            if pk not in ins:
                dels.add(pk)
            ins[pk] = (b, i)
        self.batches[table].append(cols)

    def commit(self) -> int:
        """Make the changes durable and visible; returns the commit ts. A commit refused by its
        checks (WriteConflictError, KeyNotFoundError, DuplicateKeyError) changes nothing in the TN
        and ends the transaction (rolled back)."""
        if self.done:
            raise LogtailError("this transaction is finished")
        self.done = True
        return self.tn._commit(self)

    def rollback(self) -> None:
        self.done = True


class TransactionNode:
    """The TN. Open with TransactionNode.open(dir) or TransactionNode(log_service, object_store)."""

    def __init__(self, log, store: ObjectStore, *, heartbeat_ms: float = 2.0, page_size: int = 256,
                 max_pull_rows: int = 1 << 20) -> None:
        self.log = log
        # a log whose LSNs have gaps (the replicated one) names each record's LSN; else they are dense
        self._append_each = getattr(log, "append_each", None)
        self.store = store
        self.heartbeat_s = heartbeat_ms / 1000.0
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
        if callable(getattr(log, "enqueue", None)) and callable(getattr(log, "wait_durable", None)):
            # the embedded log: records are queued in the log under the commit lock, each committer
            # waits for durability alone, and the first of a durable group publishes it
            self.committer = PipelinedCommitter(log, self._publish_group, self._lock)
        else:   # a remote or replicated log: one group at a time (relay_commit.py)
            self.committer = RelayCommitter(self._write_group)
        self._pipelined = self.committer.__class__ is PipelinedCommitter
        self._recover()
        self.log.register_reader(READER_NAME, self.checkpoint.lsn if self.checkpoint else 0)
        self.pushed_ts = max(self.last_ts, self.log.get_tso_timestamp(1))
        self._pusher = threading.Thread(target=_pusher, args=(weakref.ref(self), self._cv, self.heartbeat_s),
                                        name="logtail-push", daemon=True)
        self._pusher.start()

    @classmethod
    def open(cls, path, **options) -> "TransactionNode":
        """A TN over `path`/log (log service) and `path`/objects (object store)."""
        from logtide.engine.logservice import LogService
        path = Path(path)
        tn = cls(LogService.open(path / "log"), ObjectStore(path / "objects"), **options)
        tn._owns_log = True
        return tn

    def close(self) -> None:
        if self.committer.failed is None:
            self.committer.drain()      # commits already queued are made durable and acknowledged
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            streams = list(self._streams)
        if threading.current_thread() is not self._pusher:   # else: finalized on it (see _pusher)
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

    @property
    def stream_count(self) -> int:
        """Push streams open now (a CN whose stream died, e.g. cut by keepalive, is no longer counted)."""
        with self._cv:
            return len(self._streams)

    # ------------------------------------------------------------------ catalog

    def _table(self, name: str) -> TableState:
        try:
            return self.tables[name]
        except (KeyError, TypeError):
            raise UnknownTableError(f"no table {name!r}") from None

    def create_table(self, name: str, columns: dict, pk: str) -> TableDef:
        tdef = TableDef.make(name, columns, pk)
        with self._lock:
            if name in self.tables:
                raise LogtailError(f"table {name!r} exists")
            ts = self.log.get_tso_timestamp(1)
            self.tables[name] = TableState(tdef)   # commits to it queue behind its record
            ticket = self._queue(Record(fmt.CREATE_TABLE, ts, {"table": tdef.to_json()}), self._publish_ts)
        self.committer.wait(ticket)
        return tdef

    def table_def(self, name: str) -> TableDef:
        return self._table(name).tdef

    # ------------------------------------------------------------------ transactions

    def begin(self) -> Txn:
        return Txn(self, self.log.get_tso_timestamp(1))

    def _queue(self, rec: Record, publish) -> int:
        """Under the commit lock: queue a record (its ts the newest so far); the ticket to wait on."""
        if self._pipelined:     # into the log now: log order is commit-lock order, which is ts order
            return self.committer.enqueue(fmt.encode(rec), _Queued(rec, publish))
        return self.committer.enqueue(_Queued(rec, publish))

    def _write_group(self, group: list[_Queued], release) -> None:
        """The committer's flush: encode the group's records (outside the commit lock), append them
        with one `append_many` (one fsync), then publish them in ts order. The previous group's
        committers are released just before the append (see relay_commit.py)."""
        payloads = [fmt.encode(q.rec) for q in group]
        release()
        if self._append_each is None:
            first = self.log.append_many(payloads)
            lsns = range(first, first + len(group))
        else:
            lsns = self._append_each(payloads)
        with self._cv:
            self._publish_group(group, lsns)

    def _publish_group(self, group: list[_Queued], lsns) -> None:
        """Under the commit lock: durable records become visible in ts order (in-memory rows,
        logtail table, last_ts), one logtail call for a run of commits."""
        lsn_ts = self._lsn_ts
        handles = []
        for q, lsn in zip(group, lsns):
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
        self.last_ts = max(self.last_ts, group[-1].rec.ts)
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
            ins, dels = txn.ins.get(table, _NO_INS), txn.dels.get(table, _NO_DELS)
            if not ins and not dels:
                continue
            ins_cols = _gather(st.tdef, txn.batches.get(table, []), ins)
            ins_pks = ins_cols[st.tdef.pk]
            keys += len(ins_pks) + len(dels)
            work.append((table, st, ins_cols, ins_pks, dels))
        if not work:
            return self.last_ts
        small = keys <= SMALL_TXN_KEYS
        with self._lock:      # the commit lock (the condition's own: no Python frame to enter it)
            # check everything first: a conflict in any table leaves nothing reserved
            plans = [(_check_small if small else _check_many)(table, st, ins_pks, dels, txn.start_ts)
                     for table, st, _, ins_pks, dels in work]
            ts = self.log.get_tso_timestamp(1)
            batches = []
            for (table, st, ins_cols, ins_pks, _), (del_pks, del_rowids) in zip(work, plans):
                # batches as numpy columns: the Arrow bytes are made by the committer, outside the lock
                if len(del_pks):
                    del_ts = _filled(len(del_pks), ts)
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
                    ins_ts = _filled(len(ins_pks), ts)
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

    def _apply_commit(self, ts: int, batches: list) -> None:
        """Recovery: a logged commit, reserved and published at once."""
        for table, kind, t in batches:
            st = self._table(table)
            if kind == DELETE:
                pks = t.column(PK).to_numpy()
                st.pk_index.delete_many(pks)
            else:
                pks = t.column(st.tdef.pk).to_numpy()
                blk = t.column(BLOCK).to_numpy()
                off = t.column(OFFSET).to_numpy().astype(np.int64)
                st.pk_index.insert_many(pks, blk * BLOCK_ROWS + off)
                st.next_block = max(st.next_block, int(blk.max()) + 1)
            st.pk_ts.insert_many(pks, np.full(len(pks), ts, dtype=np.int64))
        self._publish_commit(ts, batches)

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

    # ------------------------------------------------------------------ flush and checkpoint

    def flush(self, tables: list[str] | None = None) -> int:
        """Write in-memory rows to objects; returns the flush's ts (its metadata goes out as logtail)."""
        with self._flush_lock:
            with self._cv:
                names = sorted(self.tables) if tables is None else [self._table(t).tdef.name for t in tables]
                start = self.log.get_tso_timestamp(1)      # the cleanup ts: everything before it is frozen
                for name in names:
                    self.tables[name].freeze()     # commits after `start` write to new blocks
                ticket = self.committer.queued     # every commit with a ts below `start` is queued
            self.committer.wait(ticket)            # ... and now published
            with self._cv:
                if tables is None:
                    self.last_cleanup = start
                frozen = {}
                for name in names:
                    st = self.tables[name]
                    frozen[name] = ([e for e in st.mem_inserts if e.ts < start],
                                    [e for e in st.mem_deletes if e.ts < start])
                    st.mem_inserts = [e for e in st.mem_inserts if e.ts >= start]
                    st.mem_deletes = [e for e in st.mem_deletes if e.ts >= start]
            # commits go on while the objects are written
            meta = {}
            for name, (inserts, deletes) in frozen.items():
                objs = []
                if inserts:
                    objs.append(self._write_data_object(name, inserts))
                if deletes:
                    objs.append(self._write_tombstone(name, deletes))
                meta[name] = {"cleanup_ts": start, "objects": objs}
            with self._cv:
                ts = self.log.get_tso_timestamp(1)
                ticket = self._queue(Record(fmt.FLUSH, ts, {"meta": meta}), lambda rec: self._apply_flush(rec.ts, meta))
            self.committer.wait(ticket)
            return ts

    def _write_data_object(self, table: str, entries: list[Entry]) -> dict:
        t = _as_table(concat_batches(entries))
        blk = t.column(BLOCK).to_numpy()
        order = np.lexsort((t.column(OFFSET).to_numpy(), blk))
        t = t.take(pa.array(order))
        blk = blk[order]
        bounds = np.flatnonzero(np.diff(blk)) + 1
        starts = np.concatenate([[0], bounds])
        ends = np.concatenate([bounds, [len(blk)]])
        blocks = [t.slice(int(s), int(e - s)) for s, e in zip(starts, ends)]
        name = f"{table}-{uuid.uuid4().hex[:16]}.parquet"
        self.store.write_blocks(name, blocks)
        return {"name": name, "kind": "data", "blocks": [int(blk[s]) for s in starts],
                "create_ts": int(t.column(TS).to_numpy().min()), "rows": t.num_rows}

    def _write_tombstone(self, table: str, entries: list[Entry]) -> dict:
        t = _as_table(concat_batches(entries))
        name = f"{table}-tomb-{uuid.uuid4().hex[:16]}.parquet"
        self.store.write_blocks(name, [t.slice(i, min(BLOCK_ROWS, t.num_rows - i))
                                       for i in range(0, t.num_rows, BLOCK_ROWS)])
        return {"name": name, "kind": "tombstone", "blocks": [],
                "create_ts": int(t.column(TS).to_numpy().min()), "rows": t.num_rows}

    def _apply_flush(self, ts: int, meta: dict) -> None:
        h = Handle(ts)
        for name, m in meta.items():
            st = self._table(name)
            cleanup = m["cleanup_ts"]
            # rows committed after the flush began stay in memory for the next flush
            st.mem_inserts = [e for e in st.mem_inserts if e.ts >= cleanup]
            st.mem_deletes = [e for e in st.mem_deletes if e.ts >= cleanup]
            known = {o["name"] for o in st.objects}
            st.objects.extend(o for o in m["objects"] if o["name"] not in known)
            for o in m["objects"]:
                if o["blocks"]:
                    st.next_block = max(st.next_block, max(o["blocks"]) + 1)
            h.tables[name] = [Entry(META, ts, meta=m)]
        self.logtail.append(h)
        self.last_ts = ts

    def checkpoint_now(self) -> Checkpoint:
        """Flush every table, write a checkpoint naming every object, truncate logtail table and log."""
        self.flush()
        with self._cv:
            # the flush of every table froze everything before its cleanup ts: that prefix is in objects
            ckp_ts = self.last_cleanup - 1
            lsn = max((l for t, l in self._lsn_ts if t <= ckp_ts), default=self.checkpoint.lsn if self.checkpoint else 0)
            body = {"ts": ckp_ts, "lsn": lsn,
                    "tables": {n: {"def": st.tdef.to_json(), "objects": st.objects} for n, st in self.tables.items()}}
            name = f"{CHECKPOINT_PREFIX}{ckp_ts:020d}.json"
            self.store.put(name, json.dumps(body).encode())
            self.checkpoint = Checkpoint(ckp_ts, lsn, name)
            # below the checkpoint, but never what the push loop has not sent yet: a flush's metadata
            # cut before it was pushed never reached the subscribed CNs, which then dropped that
            # flush's rows at the next flush's cleanup ts (new subscribers get the checkpoint instead)
            self.logtail.truncate(min(ckp_ts, self.pushed_ts))
            self._lsn_ts = [(t, l) for t, l in self._lsn_ts if l > lsn]
        if lsn:
            # the TN has replayed (and persisted) the log up to lsn: the log may drop it
            self.log.report_replayed(READER_NAME, lsn)
            self.log.truncate(lsn)
        return self.checkpoint

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        ckps = self.store.list(CHECKPOINT_PREFIX)
        from_lsn = 1
        if ckps:
            body = json.loads(self.store.get(ckps[-1]))
            self.checkpoint = Checkpoint(body["ts"], body["lsn"], ckps[-1])
            for n, t in body["tables"].items():
                st = TableState(TableDef.from_json(t["def"]))
                st.objects = list(t["objects"])
                self.tables[n] = st
            from_lsn = body["lsn"] + 1
            self.last_ts = body["ts"]
        latest = self.log.get_latest_lsn()
        lsn = max(from_lsn, self.log.get_first_lsn())
        while lsn <= latest:
            recs, nxt = self.log.read(lsn, 8 << 20)
            if not recs:
                break
            for r in recs:
                rec = fmt.decode(r.payload)
                if rec.kind == fmt.CREATE_TABLE:
                    tdef = TableDef.from_json(rec.info["table"])
                    self.tables.setdefault(tdef.name, TableState(tdef))
                elif rec.kind == fmt.COMMIT:
                    self._apply_commit(rec.ts, rec.batches)
                elif rec.kind == fmt.FLUSH:
                    self._apply_flush(rec.ts, rec.info["meta"])
                self.last_ts = max(self.last_ts, rec.ts)
                self._lsn_ts.append((rec.ts, r.lsn))
                self.last_lsn = r.lsn
            lsn = nxt
        # the primary-key indexes also cover rows that live only in objects
        for st in self.tables.values():
            self._rebuild_indexes(st)

    def _rebuild_indexes(self, st: TableState) -> None:
        pk = st.tdef.pk
        ins_parts, del_parts = [], []
        for o in st.objects:
            t = self.store.read_all(o["name"])
            if o["kind"] == "data":
                ins_parts.append((t.column(pk).to_numpy(), t.column(BLOCK).to_numpy(),
                                  t.column(OFFSET).to_numpy(), t.column(TS).to_numpy()))
                st.next_block = max(st.next_block, int(t.column(BLOCK).to_numpy().max()) + 1)
            else:
                del_parts.append((t.column(PK).to_numpy(), t.column(BLOCK).to_numpy(),
                                  t.column(OFFSET).to_numpy(), t.column(TS).to_numpy()))
        for e in st.mem_inserts:
            t = e.batch
            ins_parts.append((t.column(pk).to_numpy(), t.column(BLOCK).to_numpy(), t.column(OFFSET).to_numpy(),
                              t.column(TS).to_numpy()))
        for e in st.mem_deletes:
            t = e.batch
            del_parts.append((t.column(PK).to_numpy(), t.column(BLOCK).to_numpy(), t.column(OFFSET).to_numpy(),
                              t.column(TS).to_numpy()))

        def cat(parts, i, dt):
            return np.concatenate([p[i].astype(dt) for p in parts]) if parts else np.empty(0, dtype=dt)
        ipk, iblk, ioff, its = (cat(ins_parts, i, np.int64) for i in range(4))
        dpk, dblk, doff, dts = (cat(del_parts, i, np.int64) for i in range(4))
        irow = iblk * BLOCK_ROWS + ioff
        live = ~np.isin(irow, dblk * BLOCK_ROWS + doff)
        st.pk_index = BTree()
        st.pk_index.bulk_load(ipk[live], irow[live])
        allpk = np.concatenate([ipk, dpk])
        allts = np.concatenate([its, dts])
        order = np.lexsort((allts, allpk))        # the last of each pk is its newest write
        st.pk_ts = BTree()
        st.pk_ts.bulk_load(allpk[order], allts[order])

    # ------------------------------------------------------------------ pull

    def pull(self, table: str, from_ts: int, to_ts: int | None = None) -> dict:
        """Logtail of `table` for (from_ts, to_ts]: {"checkpoint", "from_ts", "to_ts", "entries"}.

        A range that starts before the checkpoint starts after it instead and names the checkpoint.
        A response above max_pull_rows in-memory rows flushes the table first (when to_ts is open).
        """
        self._table(table)
        with self._cv:      # no checkpoint may truncate between choosing the range and visiting it
            resp = self._collect(table, from_ts, self.last_ts if to_ts is None else to_ts)
        if to_ts is None and sum(e.rows for e in resp["entries"]) > self.max_pull_rows:
            self.flush([table])
            with self._cv:
                resp = self._collect(table, from_ts, self.last_ts)
        return resp

    def _collect(self, table: str, from_ts: int, to_ts: int) -> dict:
        # the one rule (docs/logtail_format.md): a response that starts below the newest checkpoint
        # carries it, even when to_ts is below it too; the logtail below it is cut, so the response
        # then reaches the checkpoint's ts (to_ts may come back higher than asked)
        ckp = None
        if self.checkpoint is not None and from_ts < self.checkpoint.ts:
            ckp = self.checkpoint.name
            from_ts = self.checkpoint.ts
            to_ts = max(to_ts, from_ts)
        raw = [e for _, _, es in self.logtail.visit(from_ts, to_ts, table) for e in es]
        # in-memory entries that a flush inside the range already put in objects are left out
        covered = max((e.meta["cleanup_ts"] for e in raw if e.kind == META), default=0)
        entries = [e for e in raw if e.kind == META or e.ts >= covered]
        return {"table": table, "checkpoint": ckp, "from_ts": from_ts, "to_ts": to_ts, "entries": entries}

    # ------------------------------------------------------------------ push

    def connect(self, cn_name: str = "cn") -> LocalStream:
        """A new push stream for one CN (in-process transport)."""
        s = LocalStream(cn_name)
        with self._cv:
            if self._closed:
                raise StreamClosedError("the TN is closed")
            self._streams.append(s)
        threading.Thread(target=self._serve_stream, args=(s,), name=f"logtail-stream-{cn_name}",
                         daemon=True).start()
        return s

    def _serve_stream(self, s: LocalStream) -> None:
        while True:
            try:
                frame = s.tn_recv()
            except StreamClosedError:
                break
            try:
                req = decode_request(frame)
                table = req["table"]
                with self._cv:
                    self._table(table)
                    if req["op"] == "subscribe":
                        # push what is published first, so a subscriber sees every commit
                        # acknowledged before it asked, and the stream stays in commit order
                        if self.last_ts > self.pushed_ts:
                            self._push_to(self.last_ts)
                        resp = self._collect(table, 0, self.pushed_ts)
                        resp["def"] = self.tables[table].tdef.to_json()
                        s.subscribed.add(table)
                        s.send_to_cn(("subscribed", resp))
                    else:
                        s.subscribed.discard(table)
                        s.send_to_cn(("unsubscribed", table))
            except StreamClosedError:
                break
            except (MalformedMessageError, UnknownTableError) as exc:
                try:
                    s.send_to_cn(("error", type(exc).__name__, str(exc)))
                except StreamClosedError:
                    break
        with self._cv:
            if s in self._streams:
                self._streams.remove(s)

    def _push_idle(self) -> bool | None:
        """Under _cv: None once closed, else whether nothing is waiting to be pushed."""
        return None if self._closed else self.last_ts <= self.pushed_ts

    def _push_round(self) -> bool:
        """Under _cv, after the push thread's wait (see _pusher): push what is new, or a heartbeat.
        False once the TN is closed."""
        if self._closed:
            return False
        if self.last_ts > self.pushed_ts:
            to_ts = self.last_ts
        elif self.committer.pending() == 0:
            # heartbeat: an empty transaction that only takes a ts, moving every watermark;
            # only with nothing in flight, or a queued commit's ts would fall below it
            to_ts = self.log.get_tso_timestamp(1)
        else:
            return True
        self._push_to(to_ts)
        return True

    def _push_to(self, to_ts: int) -> None:
        """Send (pushed_ts, to_ts] to every stream, one batch per table and kind. Holds _cv."""
        from_ts = self.pushed_ts
        per_table: dict[str, list] = {}
        wanted = set().union(*(s.subscribed for s in self._streams))   # nobody reads the others
        if to_ts > from_ts and wanted:
            for _, tb, es in self.logtail.visit(from_ts, to_ts):
                if tb in wanted:
                    per_table.setdefault(tb, []).extend(es)
            per_table = {tb: merge_entries(es) for tb, es in per_table.items()}
        self.pushed_ts = to_ts
        if to_ts > self.last_ts:
            self.last_ts = to_ts
        for s in list(self._streams):
            try:
                s.send_to_cn(("update", from_ts, to_ts,
                              {t: es for t, es in per_table.items() if t in s.subscribed}))
            except StreamClosedError:
                self._streams.remove(s)


def _pusher(ref: "weakref.ref[TransactionNode]", cv: threading.Condition, heartbeat_s: float) -> None:
    """The push thread: waits up to a heartbeat for commits, then pushes them (or a heartbeat),
    until the TN is closed. It holds the TN only while it pushes, not while it waits, so a TN nobody
    closed is still collected, and closed by its __del__, possibly on this thread."""
    while True:
        with cv:
            tn = ref()
            idle = None if tn is None else tn._push_idle()
            del tn
            if idle is None:
                return
            if idle:
                cv.wait(heartbeat_s)
            tn = ref()
            if tn is None or not tn._push_round():
                return
            del tn


def _check_many(table: str, st: TableState, ins_pks: np.ndarray, dels: set, start_ts: int):
    """Under the commit lock: raise when the transaction cannot commit; (delete pks, their row ids)."""
    del_pks = np.fromiter(dels, dtype=np.int64, count=len(dels))
    touched = np.concatenate([ins_pks, del_pks]) if len(del_pks) else ins_pks
    last, found = st.pk_ts.get_many(touched)
    late = found & (last > start_ts)
    if late.any():
        raise WriteConflictError(f"{table}: primary key {int(touched[late][0])} was written after "
                                 f"this transaction began")
    if len(del_pks):
        del_rowids, present = st.pk_index.get_many(del_pks)
        if not present.all():
            raise KeyNotFoundError(f"{table}: no row with primary key {int(del_pks[~present][0])}")
    else:
        del_rowids = del_pks
    _, exists = st.pk_index.get_many(ins_pks)
    if exists.any():
        dup = ins_pks[exists]
        redel = np.isin(dup, del_pks)
        if not redel.all():
            raise DuplicateKeyError(f"{table}: primary key {int(dup[~redel][0])} exists")
    return del_pks, del_rowids


def _check_small(table: str, st: TableState, ins_pks: np.ndarray, dels: set, start_ts: int):
    """_check_many for a few keys, one B-tree call per key (a numpy call costs more than the lookup)."""
    ins_list = ins_pks.tolist()
    del_list = list(dels)
    pk_ts, pk_index = st.pk_ts, st.pk_index
    for pk in ins_list + del_list:
        last = pk_ts.get(pk)
        if last is not None and last > start_ts:
            raise WriteConflictError(f"{table}: primary key {pk} was written after this transaction began")
    del_rowids = []
    for pk in del_list:
        rowid = pk_index.get(pk)
        if rowid is None:
            raise KeyNotFoundError(f"{table}: no row with primary key {pk}")
        del_rowids.append(rowid)
    for pk in ins_list:
        if pk_index.get(pk) is not None and pk not in dels:
            raise DuplicateKeyError(f"{table}: primary key {pk} exists")
    if not del_list:
        return _EMPTY_KEYS, _EMPTY_KEYS
    return np.array(del_list, dtype=np.int64), np.array(del_rowids, dtype=np.int64)


def _filled(n: int, v: int) -> np.ndarray:
    """n copies of v as int64 (np.full costs more than the list for a few)."""
    return np.array([v] * n, dtype=np.int64) if n <= SMALL_TXN_KEYS else np.full(n, v, dtype=np.int64)


def _as_table(b) -> pa.Table:
    return b.table() if b.__class__ is ColumnBatch else b


def _gather(tdef: TableDef, batches: list, ins: dict) -> dict:
    """The rows a transaction still inserts at commit, as one array per column."""
    if len(batches) == 1 and ins and len(ins) == len(batches[0][tdef.pk]):
        return batches[0]       # one insert call, every row still inserted: no copy
    dt = tdef.dtypes()
    if not ins:
        return {c: np.empty(0, dtype=d) for c, d in dt.items()}
    where = np.array(list(ins.values()), dtype=np.int64).reshape(-1, 2)
    parts = {c: [] for c in dt}
    for b, cols in enumerate(batches):
        rows = where[where[:, 0] == b, 1]
        if len(rows):
            for c in dt:
                parts[c].append(cols[c][rows])
    return {c: np.concatenate(parts[c]) for c in dt}
