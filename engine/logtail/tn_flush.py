"""The TN's flush and checkpoint: in-memory rows written to objects (their metadata goes out as
logtail), and a checkpoint naming every object, below which the logtail table and the log are cut."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from logtide.engine.logtail import logtail_format as fmt
from logtide.engine.logtail.column_batch import ColumnBatch
from logtide.engine.logtail.logtail_format import BLOCK, META, OFFSET, TS, Entry, Record, concat_batches
from logtide.engine.logtail.logtail_table import Handle
from logtide.engine.objectstore import BLOCK_ROWS
from logtide.errors import LogtideError

READER_NAME = "logtail-tn"       # the TN's reader of its log: what it replayed may be truncated
CHECKPOINT_PREFIX = "ckp-"


@dataclass
class Checkpoint:
    ts: int
    lsn: int
    name: str



class TnFlush:
    """TransactionNode's flush and checkpoint (a part of TransactionNode, see tn.py)."""

    def flush(self, tables: list[str] | None = None) -> int:
        """Write in-memory rows to objects; returns the flush's ts (its metadata goes out as logtail)."""
        with self._flush_lock:
            since = self._tso.failures
            with self._cv:
                names = sorted(self.tables) if tables is None else [self._table(t).tdef.name for t in tables]
                start = self._tso.take(since)      # the cleanup ts: everything before it is frozen
                for name in names:
                    self.tables[name].freeze()     # commits after `start` write to new blocks
                ticket = self.committer.queued     # every commit with a ts below `start` is queued
            self.committer.wait(ticket)            # ... and now published
            with self._cv:
                # left in memory until the flush record is published (_apply_flush drops them):
                # a flush that fails (object store, log) leaves them for the next one
                frozen = {name: ([e for e in self.tables[name].mem_inserts if e.ts < start],
                                 [e for e in self.tables[name].mem_deletes if e.ts < start]) for name in names}
            # commits go on while the objects are written
            meta, written = {}, []
            try:
                for name, (inserts, deletes) in frozen.items():
                    objs = meta.setdefault(name, {"cleanup_ts": start, "objects": []})["objects"]
                    if inserts:
                        objs.append(self._write_data_object(name, inserts))
                        written.append(objs[-1]["name"])
                    if deletes:
                        objs.append(self._write_tombstone(name, deletes))
                        written.append(objs[-1]["name"])
                since = self._tso.failures
                with self._cv:
                    ts = self._tso.take(since)
                    ticket = self._queue(Record(fmt.FLUSH, ts, {"meta": meta}),
                                         lambda rec: self._apply_flush(rec.ts, meta))
            except BaseException:
                # no FLUSH record names them (it was never queued): nothing will ever read them
                for obj in written:
                    self._discard_object(obj)
                raise
            self.committer.wait(ticket)
            if tables is None:
                with self._cv:
                    self.last_cleanup = start   # what a checkpoint may cut below: set once it is durable
            return ts

    def _discard_object(self, name: str) -> None:
        try:
            self.store.delete(name)
        except (OSError, LogtideError):   # best effort: the store may be what failed
            pass

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

def _as_table(b) -> pa.Table:
    return b.table() if b.__class__ is ColumnBatch else b
