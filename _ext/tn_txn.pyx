# cython: language_level=3
"""TxnCore: a TN transaction's state, with its commonest form held and committed in C.

The commonest TN transaction is one insert call of a few rows into one table. TxnCore keeps such a
transaction as its table and its columns (numpy arrays in the table's column order: made in C from
lists of Python ints or floats, the caller's arrays when they already have the column's dtype, else
TableDef.coerce's), with no per-key dicts. Its commit, in C under the TN's commit lock: the conflict
check, the commit ts, the key and row-id reservation and the log record (small_insert.pyx), then the
logtail handle it will publish and the hand-off of both to the group committer (`enqueue(payload,
handle)`); then it waits for the committer (the GIL released while the log syncs). The outcome, the
log bytes and the published handle are those of the Python path (TransactionNode._commit) for the
same transaction.

Anything else (a second insert, a delete or update, more than SMALL_TXN_KEYS rows, rows that do not
fit the table's current block, a TN whose committer is not pipelined or whose CommitPath is
disabled) turns the transaction into its general form (the `ins`, `batches` and `dels` dicts) and
takes the Python path, which has the same outcome.

CommitPath holds what that commit needs of its TN, fetched once per TN instead of once per commit.
"""
cimport cython
cimport numpy as cnp
from cpython.dict cimport PyDict_GetItem, PyDict_Size
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uint64_t

from logtide._ext.pipelined_core cimport PipelinedCore
from logtide._ext.small_insert cimport check_insert_keys, reserve_encode
from logtide._ext.tso_window cimport TsoWindow
from logtide.engine.logtail.column_batch import ColumnBatch
from logtide.engine.logtail.logtail_format import COMMIT, HEADER, INSERT, MAGIC, Entry
from logtide.engine.logtail.logtail_table import OneEntryHandle
from logtide.errors import LogtailError

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)

cnp.import_array()

# TableState.small_form codes: how a column's values may arrive in the small form
DEF AS_INT64 = 1       # a list of Python ints, or an int64 array
DEF AS_FLOAT64 = 2     # a list of Python floats, or a float64 array
# anything else: an array of the column's dtype only


cdef object published_handle(object ts, object table, object layout, list arrays):
    """OneEntryHandle(ts, table, Entry(INSERT, ts, ColumnBatch(layout, arrays))), with no Python
    frame: each made by its class's __new__ and its slots set as its __init__ sets them."""
    batch = ColumnBatch.__new__(ColumnBatch)
    batch.layout = layout
    batch.arrays = tuple(arrays)
    batch.num_rows = len(arrays[0])
    batch._table = None
    entry = Entry.__new__(Entry)
    entry.kind = INSERT
    entry.ts = ts
    entry.data = batch
    entry.meta = None
    handle = OneEntryHandle.__new__(OneEntryHandle)
    handle.ts = ts
    handle.table = table
    handle.entry = entry
    # kept until the table's next flush, holding only numbers, strings, arrays and the layout (no
    # cycle can run through them): untracked, the cyclic GC never walks them
    PyObject_GC_UnTrack(<PyObject*>batch)
    PyObject_GC_UnTrack(<PyObject*>entry)
    PyObject_GC_UnTrack(<PyObject*>handle)
    return handle


@cython.boundscheck(False)
@cython.wraparound(False)
cdef cnp.ndarray list_array(list v, int code):
    """The list as an int64 (AS_INT64) or float64 (AS_FLOAT64) array, when every item is exactly a
    Python int that fits int64, or a Python float; else None."""
    cdef Py_ssize_t j, m = PyList_GET_SIZE(v)
    cdef cnp.npy_intp dims[1]
    cdef int overflow
    cdef object x
    dims[0] = m
    cdef cnp.ndarray a = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64 if code == AS_INT64 else cnp.NPY_FLOAT64, 0)
    cdef int64_t* ip = <int64_t*>cnp.PyArray_DATA(a)
    cdef double* fp = <double*>cnp.PyArray_DATA(a)
    for j in range(m):
        x = <object>PyList_GET_ITEM(v, j)
        if code == AS_INT64:
            if not PyLong_CheckExact(x):
                return None
            ip[j] = PyLong_AsLongLongAndOverflow(x, &overflow)
            if overflow:
                return None
        elif PyFloat_CheckExact(x):
            fp[j] = PyFloat_AS_DOUBLE(x)
        else:
            return None
    return a


cdef class CommitPath:
    """What a small commit needs of its TN: its tables, commit lock, TSO and committer.
    `enabled` False (or a committer that is not pipelined) sends every commit down the Python path.
    A TSO that is a TsoWindow's `get` is called in C (else the callable `tso(1)`)."""
    cdef public bint enabled
    cdef dict tables
    cdef object acquire, release, tso
    cdef TsoWindow tso_c
    cdef PipelinedCore committer
    cdef int64_t block_rows
    cdef Py_ssize_t max_keys

    def __init__(self, dict tables not None, lock, tso, committer, int64_t block_rows, Py_ssize_t max_keys,
                 bint enabled=True):
        self.tables = tables
        self.acquire = lock.acquire
        self.release = lock.release
        self.tso = tso
        owner = getattr(tso, "__self__", None)
        if isinstance(owner, TsoWindow) and getattr(tso, "__name__", None) == "get":
            self.tso_c = owner
        self.block_rows = block_rows
        self.max_keys = max_keys
        self.enabled = enabled and isinstance(committer, PipelinedCore)
        if self.enabled:
            self.committer = committer


cdef class TxnCore:
    """A transaction: its TN, its start ts, whether it is finished, and its writes (see the module
    docstring). The Python shell (txn.Txn) adds the general form's methods."""
    cdef readonly object tn
    cdef readonly int64_t start_ts
    cdef public bint done
    cdef CommitPath path
    cdef object _ins, _batches, _dels     # the general form (None until the transaction needs it)
    cdef object s_table                   # the small form: its table (None: not in the small form)
    cdef object s_st                      # its TableState
    cdef list s_cols                      # its columns in the table's order

    def __init__(self, tn, CommitPath path not None, int64_t start_ts):
        self.tn = tn
        self.path = path
        self.start_ts = start_ts

    @property
    def ins(self) -> dict:
        """table -> pk -> (batch number, row index) of the rows the transaction inserts."""
        self._general()
        return self._ins

    @property
    def batches(self) -> dict:
        """table -> [columns dict] of its insert calls."""
        self._general()
        return self._batches

    @property
    def dels(self) -> dict:
        """table -> keys the transaction deletes."""
        self._general()
        return self._dels

    def insert(self, table, rows) -> None:
        """Insert rows given as {column: values}; every column of the table is required.
        A refused insert (an error raised) leaves the transaction as it was."""
        cdef PyObject* found
        cdef list cols
        if self.done:
            raise LogtailError("this transaction is finished")
        if self._ins is not None or self.s_table is not None or type(table) is not str:
            self._general()
            self._insert_general(table, rows, None)
            return
        found = PyDict_GetItem(self.path.tables, table)
        if found == NULL:       # the general form raises UnknownTableError
            self._general()
            self._insert_general(table, rows, None)
            return
        st = <object>found
        cols = self._convert(st, rows)
        if cols is None:        # values that need converting (or bad ones: SchemaError here)
            coerced = st.tdef.coerce(rows)
            cols = [coerced[col[0]] for col in st.small_form]
        if not self._hold(table, st, cols):
            self._general()
            self._insert_general(table, rows, {col[0]: a for col, a in zip(st.small_form, cols)})

    def commit(self) -> int:
        """Make the changes durable and visible; returns the commit ts. A commit refused by its
        checks (WriteConflictError, KeyNotFoundError, DuplicateKeyError) changes nothing in the TN
        and ends the transaction (rolled back)."""
        if self.done:
            raise LogtailError("this transaction is finished")
        self.done = True
        if self.s_table is not None:
            ts = self._commit_small()
            if ts is not None:
                return ts
            self._general()
        return self.tn._commit(self)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef list _convert(self, object st, object rows):
        """The rows as arrays in the table's column order, when they need no conversion; else None."""
        cdef PyObject* found
        cdef tuple form, col
        cdef list cols = []
        cdef object v
        cdef cnp.ndarray a
        cdef Py_ssize_t i, m, n = -1, k
        cdef int code
        if type(rows) is not dict:
            return None
        form = st.small_form
        k = len(form)
        if PyDict_Size(rows) != k:
            return None
        for i in range(k):
            col = <tuple>form[i]
            found = PyDict_GetItem(rows, col[0])
            if found == NULL:
                return None
            v = <object>found
            code = col[2]
            if type(v) is list:
                if code != AS_INT64 and code != AS_FLOAT64:
                    return None
                a = list_array(<list>v, code)
                if a is None:
                    return None
                m = cnp.PyArray_DIM(a, 0)
            elif type(v) is cnp.ndarray:
                a = <cnp.ndarray>v
                if cnp.PyArray_NDIM(a) != 1 or not cnp.PyArray_EquivTypes(a.descr, <cnp.dtype>col[1]):
                    return None
                # the transaction's own copy: the caller changing its array after the checks would
                # change what commits (a duplicate key past the check, a row lost)
                a = <cnp.ndarray>cnp.PyArray_NewCopy(a, cnp.NPY_CORDER)
                m = cnp.PyArray_DIM(a, 0)
            else:
                return None
            if n < 0:
                n = m
            elif m != n:
                return None
            cols.append(a)
        return cols

    cdef bint _hold(self, object table, object st, list cols) except -1:
        """Hold `cols` (the table's columns, of one length) as the small form when they are a few
        rows with distinct keys; False (nothing held) else."""
        cdef cnp.ndarray pks = cols[st.pk_at]
        cdef Py_ssize_t n = cnp.PyArray_DIM(pks, 0)
        if n < 1 or n > self.path.max_keys:
            return False
        if n > 1 and len(set(pks.tolist())) != n:
            return False        # the general form refuses it
        self.s_table = table
        self.s_st = st
        self.s_cols = cols
        return True

    cdef int _general(self) except -1:
        """Turn the transaction into its general form (the small form's rows become its first batch)."""
        if self._ins is not None:
            return 0
        ins, batches = {}, {}
        if self.s_table is not None:
            st = self.s_st
            cols = {col[0]: a for col, a in zip(st.small_form, self.s_cols)}
            ins[self.s_table] = {pk: (0, i) for i, pk in enumerate(self.s_cols[st.pk_at].tolist())}
            batches[self.s_table] = [cols]
            self.s_table = self.s_st = self.s_cols = None
        self._ins, self._batches, self._dels = ins, batches, {}
        return 0

    cdef object _commit_small(self):
        """The small form's commit; its ts, or None when it must take the Python path (nothing done)."""
        cdef CommitPath p = self.path
        cdef cnp.ndarray pks
        cdef Py_ssize_t n
        cdef uint64_t ticket
        if not p.enabled:
            return None
        st = self.s_st
        pks = self.s_cols[st.pk_at]
        n = cnp.PyArray_DIM(pks, 0)
        meta = st.small_meta[n]
        if meta is None:
            return None
        layout = st.insert_layout
        keys = pks.tolist()
        p.acquire()
        try:
            if st.cur_off + n > p.block_rows:
                return None
            check_insert_keys(self.s_table, st.pk_ts, st.pk_index, keys, self.start_ts)
            ts = p.tso_c.take(1) if p.tso_c is not None else p.tso(1)
            payload, arrays = reserve_encode(st, layout, meta, st.json_name, pks, keys, self.s_cols, ts,
                                             p.block_rows, HEADER, MAGIC, COMMIT)
            # queued as the handle it publishes: no record object, no handle built at publication
            ticket = p.committer.enqueue_c(payload, published_handle(ts, self.s_table, layout, arrays))
        finally:
            p.release()
        p.committer.wait_c(ticket)      # durable (and published) before it is acknowledged
        return ts
