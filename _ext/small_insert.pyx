# cython: language_level=3
"""The TN's commit of a small one-table insert transaction, in two C calls under the commit lock.

    check_inserts(table, pk_ts, pk_index, pks, start_ts)
        the conflict check of commit_check.check_small for inserts only: the same errors, in the
        same order (a key written after start_ts, then a key already present); changes nothing.
    reserve_and_encode(st, layout, meta, table_json, pks, user, ts, block_rows, header, magic, kind)
        -> (payload, [__block, __offset, __ts, *user])
        reserves the keys (pk_index, pk_ts) and row ids as TnCommit does, and writes the COMMIT
        log record of the one insert batch: byte for byte what logtail_format.encode writes for it
        (header, JSON, the batch's Arrow IPC stream from its cached metadata; see column_batch.py).

The caller takes this path only when the rows fit the current block and the layout's IPC metadata
for the row count is cached; everything else takes the Python path, which has the same outcome.
"""
cimport cython
cimport numpy as cnp
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy, memset

from logtide.errors import DuplicateKeyError, WriteConflictError

cnp.import_array()

DEF ALIGN = 8


def check_inserts(str table, pk_ts, pk_index, cnp.ndarray pks, int64_t start_ts) -> None:
    """Raise WriteConflictError or DuplicateKeyError as check_small does for an insert-only commit."""
    check_insert_keys(table, pk_ts, pk_index, pks.tolist(), start_ts)


cdef int check_insert_keys(str table, object pk_ts, object pk_index, list keys, int64_t start_ts) except -1:
    cdef object last
    for pk in keys:
        last = pk_ts.get(pk)
        if last is not None and <int64_t>last > start_ts:
            raise WriteConflictError(f"{table}: primary key {pk} was written after this transaction began")
    for pk in keys:
        if pk_index.get(pk) is not None:
            raise DuplicateKeyError(f"{table}: primary key {pk} exists")
    return 0


cdef inline Py_ssize_t padded(Py_ssize_t n) noexcept nogil:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def reserve_and_encode(st, layout, bytes meta, bytes table_json, cnp.ndarray pks, list user, int64_t ts,
                       int64_t block_rows, header, bytes magic, int kind):
    """Reserve the rows' keys and row ids in `st` (a TableState whose current block has room for
    them) and return (payload, the insert batch's arrays in layout order). `user` holds the table's
    columns in layout order (pks among them); `meta` is layout's record batch metadata for
    len(pks) rows; `header` is logtail_format.HEADER, packed with (magic, kind, ts, JSON length)."""
    return reserve_encode(st, layout, meta, table_json, pks, pks.tolist(), user, ts, block_rows, header, magic,
                          kind)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef tuple reserve_encode(object st, object layout, bytes meta, bytes table_json, cnp.ndarray pks, list keys,
                          list user, int64_t ts, int64_t block_rows, object header, bytes magic, int kind):
    # keys: pks.tolist()
    cdef Py_ssize_t n = cnp.PyArray_DIM(pks, 0)
    cdef Py_ssize_t i, k, body = 0, pos, blob_size
    cdef int64_t block = st.cur_block
    cdef int64_t off = st.cur_off
    cdef cnp.npy_intp dims[1]
    cdef cnp.ndarray blocks, offs, tss, a
    cdef int64_t* bp
    cdef int32_t* op
    cdef int64_t* tp
    cdef list arrays
    cdef bytes head = layout.head, eos = layout.eos, payload, js, hdr
    cdef char* out
    if off < 0 or off + n > block_rows:
        raise ValueError("reserve_and_encode: the rows do not fit the current block")
    dims[0] = n
    blocks = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
    offs = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT32, 0)
    tss = cnp.PyArray_EMPTY(1, dims, cnp.NPY_INT64, 0)
    bp = <int64_t*>cnp.PyArray_DATA(blocks)
    op = <int32_t*>cnp.PyArray_DATA(offs)
    tp = <int64_t*>cnp.PyArray_DATA(tss)
    for i in range(n):
        bp[i] = block
        op[i] = <int32_t>(off + i)
        tp[i] = ts
    arrays = [blocks, offs, tss]
    for a in user:
        if cnp.PyArray_NDIM(a) != 1 or cnp.PyArray_DIM(a, 0) != n:
            raise ValueError("reserve_and_encode: the columns must be of one length")
        arrays.append(a if cnp.PyArray_IS_C_CONTIGUOUS(a) else cnp.PyArray_GETCONTIGUOUS(a))
    for a in arrays:
        body += padded(cnp.PyArray_NBYTES(a))
    blob_size = len(head) + len(meta) + body + len(eos)
    js = b'{"batches":[{"table":' + table_json + b',"kind":"insert","size":' + str(blob_size).encode() + b'}]}'
    hdr = header.pack(magic, kind, ts, len(js))
    # the keys are reserved after everything that can fail: a refused call changes nothing
    pk_index, pk_ts = st.pk_index, st.pk_ts
    for i in range(n):
        pk_index.insert(keys[i], block * block_rows + off + i)
        pk_ts.insert(keys[i], ts)
    st.cur_off = off + n
    payload = PyBytes_FromStringAndSize(NULL, len(hdr) + len(js) + blob_size)
    out = PyBytes_AS_STRING(payload)
    pos = 0
    for part in (hdr, js, head, meta):
        k = PyBytes_GET_SIZE(part)
        memcpy(out + pos, PyBytes_AS_STRING(part), k)
        pos += k
    for a in arrays:
        k = cnp.PyArray_NBYTES(a)
        memcpy(out + pos, cnp.PyArray_DATA(a), k)
        memset(out + pos + k, 0, padded(k) - k)
        pos += padded(k)
    memcpy(out + pos, PyBytes_AS_STRING(eos), PyBytes_GET_SIZE(eos))
    return payload, arrays
