"""TableState: the TN's side of one table: its primary-key indexes, row-id allocation and its
in-memory rows since the last flush."""
from __future__ import annotations

import numpy as np

from logtide import BTree
from logtide.engine.logtail.catalog import TableDef
from logtide.engine.logtail.column_batch import BatchLayout
from logtide.engine.logtail.commit_check import SMALL_TXN_KEYS
from logtide.engine.logtail.logtail_format import BLOCK, OFFSET, PK, TS, Entry, json_name
from logtide.engine.objectstore import BLOCK_ROWS

SYSTEM_COLUMNS = [(BLOCK, np.int64), (OFFSET, np.int32), (TS, np.int64)]
DELETE_LAYOUT = BatchLayout(SYSTEM_COLUMNS + [(PK, np.int64)])
# how a column's values may arrive for a transaction's small form in C (_ext/tn_txn.pyx): as a list
# of Python ints (int64), of Python floats (float64), else only as an array of the column's dtype
_LIST_OF = {np.dtype(np.int64): 1, np.dtype(np.float64): 2}


class TableState:
    """The TN side of one table."""

    def __init__(self, tdef: TableDef) -> None:
        self.tdef = tdef
        self.insert_layout = BatchLayout(SYSTEM_COLUMNS + list(tdef.dtypes().items()))
        self.json_name = json_name(tdef.name).encode()   # as log records name it
        self.pk_index = BTree()      # pk -> rowid (block * BLOCK_ROWS + offset) of the live row
        self.pk_ts = BTree()         # pk -> ts of the last committed write to it (write-write conflicts)
        self.next_block = 1
        self.cur_block = 0
        self.cur_off = BLOCK_ROWS    # forces a new block on the first insert
        self.mem_inserts: list[Entry] = []
        self.mem_deletes: list[Entry] = []
        self.objects: list[dict] = []
        # for the small commit in C (_ext/tn_txn.pyx): each column as (name, dtype, how its values
        # may arrive), the key's position, and the insert batch's IPC metadata per row count
        self.small_form = tuple((c, d, _LIST_OF.get(d, 0)) for c, d in tdef.dtypes().items())
        self.pk_at = [c for c, _, _ in self.small_form].index(tdef.pk)
        self.small_meta = (None,) + tuple(self.insert_layout.batch_metadata(n) for n in range(1, SMALL_TXN_KEYS + 1))

    def alloc_rowids(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        off = self.cur_off
        if off + n <= BLOCK_ROWS:       # the common case: the rows fit the current block
            self.cur_off = off + n
            return filled(n, self.cur_block), np.arange(off, off + n, dtype=np.int32)
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


def filled(n: int, v: int) -> np.ndarray:
    """n copies of v as int64 (np.full costs more than the list for a few)."""
    return np.array([v] * n, dtype=np.int64) if n <= SMALL_TXN_KEYS else np.full(n, v, dtype=np.int64)
