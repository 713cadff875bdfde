"""The CN's state of one table: in-memory rows in B-trees, persisted blocks, and reads at any ts.

rows        BTree (block, offset, -ts) -> slot in the row store (inserts and deletes)
pks         BTree (pk, -ts, kind) -> slot: the newest version of a key at ts is one ceiling() away
dirty       BTree block -> in-memory deletes on that persisted block (the block index): a read of a
            persisted block outside it skips the in-memory merge
mem_blocks  BTree block -> in-memory inserts on a block not yet persisted
Entries are applied as batches (numpy arrays into the trees); readers take O(1) tree snapshots.
"""
from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from logtide import BTree
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.logtail_format import BLOCK, DELETE, INSERT, META, OFFSET, PK, TS, Entry
from logtide.engine.objectstore import BLOCK_ROWS, ObjectStore

I64_MIN = -(1 << 63)
KIND_INSERT, KIND_DELETE = 0, 1


class BlockCache:
    """Decoded persisted blocks, shared by the tables of a CN (objects never change)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._blocks: dict = {}
        self._lock = threading.Lock()

    def block(self, name: str, rg: int) -> dict:
        key = (name, rg)
        b = self._blocks.get(key)
        if b is None:
            t = self.store.read_block(name, rg)
            b = {c: t.column(c).to_numpy() for c in t.column_names}
            with self._lock:
                self._blocks[key] = b
        return b

    def table(self, name: str) -> pa.Table:
        return self.store.read_all(name)


class _Snap:
    __slots__ = ("rows", "pks", "dirty", "mem_blocks", "blocks", "tomb_rowid", "tomb_ts", "store", "n")


class PartitionState:
    def __init__(self, tdef: TableDef, cache: BlockCache) -> None:
        self.tdef = tdef
        self.cache = cache
        self.dtypes = tdef.dtypes()
        self.n = 0
        cap = 1024
        self.store = {c: np.zeros(cap, dtype=d) for c, d in self.dtypes.items()}
        self.store[TS] = np.zeros(cap, dtype=np.int64)
        self.store["__rowid"] = np.zeros(cap, dtype=np.int64)
        self.store["__kind"] = np.zeros(cap, dtype=np.int8)
        self.rows = BTree(width=3)
        self.pks = BTree(width=3)
        self.dirty = BTree()
        self.mem_blocks = BTree()
        self.persisted = BTree()        # block -> position in self.blocks
        self.blocks: list[tuple] = []   # (object name, row group, block id, create ts)
        self.objects: dict[str, dict] = {}
        self.tomb_rowid = np.empty(0, dtype=np.int64)
        self.tomb_ts = np.empty(0, dtype=np.int64)
        self.lock = threading.Lock()
        self.applied_rows = 0

    # ------------------------------------------------------------------ apply

    def _append(self, n: int, cols: dict) -> np.ndarray:
        need = self.n + n
        cap = len(self.store[TS])
        if need > cap:
            while cap < need:
                cap *= 2
            # new arrays: readers keep the old ones, which stay valid for the slots they know
            for c, a in self.store.items():
                b = np.zeros(cap, dtype=a.dtype)
                b[:self.n] = a[:self.n]
                self.store[c] = b
        for c, a in cols.items():
            self.store[c][self.n:need] = a
        idx = np.arange(self.n, need, dtype=np.int64)
        self.n = need
        return idx

    def apply(self, entries: list[Entry]) -> None:
        with self.lock:
            for e in entries:
                if e.kind == INSERT:
                    self._apply_rows(e.batch, KIND_INSERT)
                elif e.kind == DELETE:
                    self._apply_rows(e.batch, KIND_DELETE)
                elif e.kind == META:
                    self._apply_meta(e.meta)

    def _apply_rows(self, t: pa.Table, kind: int) -> None:
        n = t.num_rows
        if n == 0:
            return
        blk = t.column(BLOCK).to_numpy().astype(np.int64, copy=False)
        off = t.column(OFFSET).to_numpy().astype(np.int64)
        ts = t.column(TS).to_numpy().astype(np.int64, copy=False)
        cols = {TS: ts, "__rowid": blk * BLOCK_ROWS + off, "__kind": kind}
        if kind == KIND_INSERT:
            for c in self.dtypes:
                cols[c] = t.column(c).to_numpy()
            pk = cols[self.tdef.pk]
        else:
            pk = t.column(PK).to_numpy()
            cols[self.tdef.pk] = pk
        idx = self._append(n, cols)
        self.rows.insert_many(np.column_stack([blk, off, -ts]), idx)
        self.pks.insert_many(np.column_stack([pk, -ts, np.full(n, kind, dtype=np.int64)]), idx)
        ub, cnt = np.unique(blk, return_counts=True)
        _, persisted = self.persisted.get_many(ub)
        if kind == KIND_INSERT:
            old, _ = self.mem_blocks.get_many(ub[~persisted])
            self.mem_blocks.insert_many(ub[~persisted], old + cnt[~persisted])
        else:
            # the seed's rule, first half: in-memory deletes put their persisted blocks in the index
            old, _ = self.dirty.get_many(ub[persisted])
            self.dirty.insert_many(ub[persisted], old + cnt[persisted])
        self.applied_rows += n

    def _apply_meta(self, meta: dict) -> None:
        for o in meta["objects"]:
            if o["name"] in self.objects:
                continue
            self.objects[o["name"]] = o
            if o["kind"] == "data":
                for rg, b in enumerate(o["blocks"]):
                    self.persisted[b] = len(self.blocks)
                    self.blocks.append((o["name"], rg, b, o["create_ts"]))
            else:
                t = self.cache.table(o["name"])
                rid = t.column(BLOCK).to_numpy() * BLOCK_ROWS + t.column(OFFSET).to_numpy().astype(np.int64)
                self.tomb_rowid = np.concatenate([self.tomb_rowid, rid])
                self.tomb_ts = np.concatenate([self.tomb_ts, t.column(TS).to_numpy()])
        cleanup = meta["cleanup_ts"]
        if cleanup:
            # in-memory entries before the flush began now live in the objects
            k, _ = self.rows.range_to_numpy()
            gone = -k[:, 2] < cleanup
            if gone.any():
                self.rows.delete_many(k[gone])
            k, _ = self.pks.range_to_numpy()
            gone = -k[:, 1] < cleanup
            if gone.any():
                self.pks.delete_many(k[gone])
        self._compact()
        # the seed's rule, second half: block metadata takes blocks out of the index (and out of
        # the in-memory blocks) unless in-memory changes after the cleanup ts remain on them
        k, v = self.rows.range_to_numpy()
        blk = k[:, 0]
        kinds = self.store["__kind"][v]
        _, persisted = self.persisted.get_many(blk)
        ub, cnt = np.unique(blk[(kinds == KIND_DELETE) & persisted], return_counts=True)
        self.dirty.clear()
        self.dirty.bulk_load(ub, cnt)
        ub, cnt = np.unique(blk[(kinds == KIND_INSERT) & ~persisted], return_counts=True)
        self.mem_blocks.clear()
        self.mem_blocks.bulk_load(ub, cnt)

    def _compact(self) -> None:
        """Drop row-store slots no tree points at any more (cleaned-up entries), once they are most."""
        k, v = self.rows.range_to_numpy()
        if self.n < 4096 or len(v) * 2 > self.n:
            return
        keep = np.sort(v)
        remap = np.full(self.n, -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep), dtype=np.int64)
        cap = max(1024, 2 * len(keep))
        store = {}
        for c, a in self.store.items():     # new arrays: readers keep the old ones with their snapshots
            b = np.zeros(cap, dtype=a.dtype)
            b[:len(keep)] = a[keep]
            store[c] = b
        rows, pks = BTree(width=3), BTree(width=3)
        rows.bulk_load(k, remap[v])
        pk_keys, pk_vals = self.pks.range_to_numpy()
        pks.bulk_load(pk_keys, remap[pk_vals])
        self.store, self.rows, self.pks, self.n = store, rows, pks, len(keep)

    # ------------------------------------------------------------------ reads

    def snapshot(self) -> _Snap:
        s = _Snap()
        with self.lock:
            s.rows, s.pks = self.rows.snapshot(), self.pks.snapshot()
            s.dirty, s.mem_blocks = self.dirty.snapshot(), self.mem_blocks.snapshot()
            s.blocks = tuple(self.blocks)
            s.tomb_rowid, s.tomb_ts = self.tomb_rowid, self.tomb_ts
            s.store = dict(self.store)
            s.n = self.n
        return s

    def read(self, ts: int, use_block_index: bool = True) -> pa.Table:
        """The table as of ts: visible persisted rows and in-memory rows, minus deletes."""
        s = self.snapshot()
        names = list(self.dtypes)
        parts = {c: [] for c in names}
        dead = np.sort(s.tomb_rowid[s.tomb_ts <= ts])
        st_ts, st_kind, st_rowid = s.store[TS], s.store["__kind"], s.store["__rowid"]
        for name, rg, b, create_ts in s.blocks:
            if create_ts > ts:
                continue
            data = self.cache.block(name, rg)
            m = data[TS] <= ts
            off = data[OFFSET].astype(np.int64)
            if dead.size:
                rid = b * BLOCK_ROWS + off
                pos = np.searchsorted(dead, rid)
                m &= ~((pos < dead.size) & (dead[np.minimum(pos, dead.size - 1)] == rid))
            if not use_block_index or s.dirty.get(b) is not None:
                _, v = s.rows.range_to_numpy((b,), (b + 1,))
                v = v[(st_kind[v] == KIND_DELETE) & (st_ts[v] <= ts)]
                if v.size:
                    m &= ~np.isin(off, st_rowid[v] - b * BLOCK_ROWS)
            for c in names:
                parts[c].append(data[c][m])
        mem, _ = s.mem_blocks.range_to_numpy()
        for b in mem.tolist():
            k, v = s.rows.range_to_numpy((b,), (b + 1,))
            keep = -k[:, 2] <= ts
            k, v = k[keep], v[keep]
            if not len(v):
                continue
            first = np.ones(len(v), dtype=bool)     # newest version <= ts of each rowid comes first
            first[1:] = k[1:, 1] != k[:-1, 1]
            v = v[first & (st_kind[v] == KIND_INSERT)]
            for c in names:
                parts[c].append(s.store[c][v])
        cols = {c: (np.concatenate(parts[c]) if parts[c] else np.empty(0, dtype=self.dtypes[c])) for c in names}
        return pa.table(cols, schema=self.tdef.arrow_schema())

    def get(self, pk: int, ts: int) -> dict | None:
        """The row with primary key pk as of ts, or None."""
        s = self.snapshot()
        hit = s.pks.ceiling((pk, -ts, I64_MIN))
        if hit is not None and hit[0][0] == pk:
            slot = hit[1]
            if s.store["__kind"][slot] == KIND_DELETE:
                return None
            return {c: s.store[c][slot].item() for c in self.dtypes}
        dead = s.tomb_rowid[s.tomb_ts <= ts]
        for name, rg, b, create_ts in s.blocks:
            if create_ts > ts:
                continue
            data = self.cache.block(name, rg)
            at = np.flatnonzero((data[self.tdef.pk] == pk) & (data[TS] <= ts))
            for i in at.tolist():
                if not np.isin(b * BLOCK_ROWS + int(data[OFFSET][i]), dead):
                    return {c: data[c][i].item() for c in self.dtypes}
        return None
