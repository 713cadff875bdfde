"""The TN's commit check: under the commit lock, whether a transaction may commit (no key written
after it began, every deleted key present, no inserted key already there), and its deletes' row ids.
Two paths with one outcome: numpy batch calls, and one B-tree call per key for a small transaction."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from logtide.errors import DuplicateKeyError, KeyNotFoundError, WriteConflictError

if TYPE_CHECKING:
    from logtide.engine.logtail.tn_table import TableState

SMALL_TXN_KEYS = 16     # up to this many keys a commit checks and reserves them one B-tree call each
_EMPTY_KEYS = np.empty(0, dtype=np.int64)
_EMPTY_KEYS.setflags(write=False)


def check_many(table: str, st: TableState, ins_pks: np.ndarray, dels: set, start_ts: int):
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


def check_small(table: str, st: TableState, ins_pks: np.ndarray, dels: set, start_ts: int):
    """check_many for a few keys, one B-tree call per key (a numpy call costs more than the lookup)."""
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
