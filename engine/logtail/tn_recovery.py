"""The TN's recovery: state rebuilt from the newest checkpoint plus the log after it."""
from __future__ import annotations

import json

import numpy as np

from logtide import BTree
from logtide.engine.logtail import logtail_format as fmt
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.logtail_format import BLOCK, DELETE, OFFSET, PK, TS
from logtide.engine.logtail.tn_flush import CHECKPOINT_PREFIX, Checkpoint
from logtide.engine.logtail.tn_table import TableState
from logtide.engine.objectstore import BLOCK_ROWS


class TnRecovery:
    """TransactionNode's recovery at open (a part of TransactionNode, see tn.py)."""

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
