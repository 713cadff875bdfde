"""Txn: a TN transaction's writes, buffered until commit (TransactionNode.begin, then insert, delete,
update, then commit or rollback)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from logtide._ext.tn_txn import TxnCore
from logtide.engine.logtail.catalog import TableDef
from logtide.errors import DuplicateKeyError, LogtailError, SchemaError

if TYPE_CHECKING:
    from logtide.engine.logtail.tn_table import TableState

NO_INS: dict = {}            # read only: a table a transaction only deletes from
NO_DELS: frozenset = frozenset()


class Txn(TxnCore):
    """A transaction: begin() on the TN, then insert/delete/update, then commit() or rollback().

    `insert` and `commit` are TxnCore's (_ext/tn_txn.pyx): one insert call of a few rows into one
    table is held and committed in C; this shell adds the general form (`ins`, `batches`, `dels`)."""
    __slots__ = ()

    def _table(self, table: str) -> TableState:
        if self.done:
            raise LogtailError("this transaction is finished")
        return self.tn._table(table)

    def _insert_general(self, table: str, rows: dict, cols: dict | None) -> None:
        """insert() of the general form (TxnCore's insert calls it); `cols`: the rows coerced already."""
        st = self._table(table)
        if cols is None:
            cols = st.tdef.coerce(rows)
        pk_list = cols[st.tdef.pk].tolist()
        if len(pk_list) > 1 and len(set(pk_list)) != len(pk_list):
            raise DuplicateKeyError(f"{table}: the same primary key twice in one insert")
        ins = self.ins.get(table)
        if ins is None:     # the table's first insert in this transaction: no key of its own to meet
            self.ins[table] = {pk: (0, i) for i, pk in enumerate(pk_list)}
            self.batches[table] = [cols]
            return
        for pk in pk_list:      # every check before the first change
            if pk in ins:
                raise DuplicateKeyError(f"{table}: primary key {pk} inserted twice in this transaction")
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

    def rollback(self) -> None:
        self.done = True


def gather_rows(tdef: TableDef, batches: list, ins: dict) -> dict:
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
