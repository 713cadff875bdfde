# cython: language_level=3
"""Redo of records located in several buffers (mmap'ed log segments), for the Spark executors.

Entry i applies the record at buffers[buf_ids[i]][offs[i]:offs[i] + lens[i]] at lsns[i] to
pages[page_rows[i]], only to the block tags[i] of that record (the per-page redo filter: a record
touching several pages changes just this one here). Same result codes as `redo.apply_ranges`.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t, int32_t
from libc.stdlib cimport malloc, free
cimport cython
import numpy as np
cimport numpy as cnp

from logtide._ext.page cimport PAGE_SIZE
from logtide._ext.redo cimport DecodedRecord, redo_decode, redo_find_block, redo_block, REDO_BAD_RECORD

cnp.import_array()

cdef extern from *:
    """
    #define lt_prefetch(p) __builtin_prefetch((const void *)(p), 0, 0)
    """
    void lt_prefetch(const void* p) nogil

DEF PREFETCH_AHEAD = 8   # entries: a record header is a cache miss (the entries jump about the log)


@cython.boundscheck(False)
@cython.wraparound(False)
def apply_located(uint8_t[:, ::1] pages, const int64_t[::1] page_rows, const uint32_t[:, ::1] tags, list buffers,
                  const int32_t[::1] buf_ids, const int64_t[::1] offs, const int64_t[::1] lens,
                  const uint64_t[::1] lsns, const uint8_t[::1] check_crc=None) -> tuple:
    """Apply n entries in order without the GIL; stops at the first error. Each entry's record CRC
    is checked, or with `check_crc` only where check_crc[i] is nonzero: a record touching several
    pages need be summed once, at its first entry, which is applied before any other of its entries.

    Returns (results int8[n], applied, first_error_index or -1).
    """
    cdef Py_ssize_t n = page_rows.shape[0], i, nbuf = len(buffers), npages = pages.shape[0]
    cdef int rc = 0
    cdef Py_ssize_t applied = 0, bad = -1
    cdef DecodedRecord r
    cdef const uint8_t[::1] v
    cdef cnp.int8_t* rp
    cdef bint every = check_crc is None
    if pages.shape[1] != PAGE_SIZE:
        raise ValueError("pages is (m, 8192) uint8")
    if (tags.shape[0] != n or tags.shape[1] != 5 or buf_ids.shape[0] != n or offs.shape[0] != n
            or lens.shape[0] != n or lsns.shape[0] != n):
        raise ValueError("page_rows, tags (n, 5), buf_ids, offs, lens and lsns have n entries")
    if not every and check_crc.shape[0] != n:
        raise ValueError("check_crc has n entries")
    cdef const uint8_t** base = <const uint8_t**>malloc(max(nbuf, 1) * sizeof(uint8_t*))
    cdef Py_ssize_t* size = <Py_ssize_t*>malloc(max(nbuf, 1) * sizeof(Py_ssize_t))
    if base == NULL or size == NULL:
        free(base); free(size)
        raise MemoryError()
    views = []
    try:
        for i in range(nbuf):
            v = buffers[i]
            views.append(v)  # keeps every buffer exported while the loop runs
            base[i] = &v[0] if v.shape[0] else NULL
            size[i] = v.shape[0]
        for i in range(n):
            if page_rows[i] < 0 or page_rows[i] >= npages:
                raise IndexError(f"page_rows[{i}] = {page_rows[i]} is outside pages")
            if buf_ids[i] < 0 or buf_ids[i] >= nbuf:
                raise IndexError(f"buf_ids[{i}] = {buf_ids[i]} names no buffer")
            if offs[i] < 0 or lens[i] <= 0 or offs[i] + lens[i] > size[buf_ids[i]]:
                raise ValueError(f"entry {i}: [{offs[i]}, {offs[i] + lens[i]}) is outside buffer {buf_ids[i]}")
        out = np.zeros(n, dtype=np.int8)
        rp = <cnp.int8_t*>cnp.PyArray_DATA(out)
        with nogil:
            for i in range(n):
                if i + PREFETCH_AHEAD < n:
                    lt_prefetch(base[buf_ids[i + PREFETCH_AHEAD]] + offs[i + PREFETCH_AHEAD])
                rc = redo_decode(base[buf_ids[i]] + offs[i], lens[i], &r, False, every or check_crc[i] != 0)
                if rc == 0:
                    rc = redo_find_block(&r, tags[i, 0], tags[i, 1], tags[i, 2], tags[i, 3], tags[i, 4])
                    if rc >= 0:
                        rc = redo_block(&pages[page_rows[i], 0], &r, rc, lsns[i])
                rp[i] = <cnp.int8_t>rc
                if rc < 0:
                    bad = i
                    break
                applied += rc
        return out, applied, bad
    finally:
        free(base)
        free(size)
