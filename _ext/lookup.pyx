# cython: language_level=3
"""TableLookup: the per-call `LogIndex.lsns(tag)` path in one call.

One murmur3 hash of the tag gives the k bloom probe rows; ANDing those rows of the bit-sliced
bloom matrix (slices[p, w] = bit p of the blooms of tables 64w..64w+63) tests 64 saved tables per
word. The candidate tables (newest first, within the LSN range) and then the in-memory memtables
are searched in place, and the LSNs are gathered into one uint64 array. No Python object is made
per table or per LSN; the only object per call is the result array.

    lk = TableLookup(load)        # load(j) -> Memtable: saved table j, read into the table cache
    lk.set_tables(slices, has_bloom, tmin, tmax, ntables, tables, memtables, k, referenced, split)
    lk.lsns(tag, min_lsn, max_lsn) -> np.ndarray[uint64], ascending
    lk.counters() -> (lookups, tables read, skipped by bloom, skipped by LSN range)

The saved tables serve LSNs <= split and the memtables LSNs >= split (a tag's LSN at the split, found
in both, is kept once). The manager calls set_tables() again whenever the saved tables, the memtable
ring or the split change.
"""

import numpy as np
cimport numpy as cnp
cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memmove, memcmp

from logtide._ext.murmur3 cimport murmur3_x64_128
from logtide._ext.memtable cimport (Memtable, MemtableData, MT_HASH_SLOTS, MT_SEGMENTS, MT_SEG_BYTES, HEAD_TAG,
                                    HEAD_NEXT_ITEM, HEAD_NEXT_SEG, HEAD_TAIL_SEG, tag_fields)
from cpython.ref cimport PyObject
from logtide._ext.bloom4k cimport BLOOM_NBITS, BLOOM_MAX_K

cnp.import_array()

cdef extern from *:
    """
    static inline int lt_clz64_(unsigned long long x) { return __builtin_clzll(x); }
    static inline int lt_popcount64_(unsigned long long x) { return __builtin_popcountll(x); }
    static inline void lt_prefetch(const void* p) { __builtin_prefetch(p); }
    """
    int lt_clz64_(unsigned long long x) nogil
    int lt_popcount64_(unsigned long long x) nogil
    void lt_prefetch(const void* p) nogil

DEF STACK_LSNS = 512
DEF STACK_SOURCES = 64
DEF SPAN_PREFETCH = 4096   # prefetch a tag's whole segment span when it is at most this many bytes


cdef struct _Out:
    uint64_t* p          # the stack buffer, or a heap one once that overflows
    Py_ssize_t n, cap
    bint heap


cdef inline uint8_t* _seg(MemtableData* d, uint16_t sid) noexcept nogil:
    return d.segs + <size_t>sid * MT_SEG_BYTES


cdef inline uint16_t _u16(const uint8_t* p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v


cdef inline void _prefetch_seg(MemtableData* d, uint16_t sid) noexcept nogil:
    cdef uint8_t* p = _seg(d, sid)
    lt_prefetch(p)
    lt_prefetch(p + MT_SEG_BYTES - 1)   # a 48-byte segment may straddle two cache lines


cdef inline uint16_t _find_from(MemtableData* d, uint16_t sid, const uint32_t* tag) noexcept nogil:
    """The item head of tag on the hash chain starting at sid (0: none); as Memtable.find_head."""
    cdef int guard = 0
    while sid != 0 and guard < MT_SEGMENTS:
        if memcmp(_seg(d, sid) + HEAD_TAG, tag, 20) == 0:
            return sid
        sid = _u16(_seg(d, sid) + HEAD_NEXT_ITEM)
        guard += 1
    return 0


cdef int _gather(Memtable m, uint16_t head, uint64_t lo, uint64_t hi, _Out* o) except -1:
    """Append m's LSNs within [lo, hi] of the item at head; a record split across two tables keeps
    its LSN once."""
    cdef Py_ssize_t got, cap
    cdef uint64_t* q
    got = m.lookup_cap(head, lo, hi, o.p + o.n, o.cap - o.n)
    if got == 0:
        return 0
    if o.n + got > o.cap:  # did not fit: move to a bigger heap buffer, then fill again
        cap = max(2 * o.cap, o.n + got)
        if o.heap:
            q = <uint64_t*>realloc(o.p, cap * 8)
        else:
            q = <uint64_t*>malloc(cap * 8)
            if q != NULL:
                memcpy(q, o.p, o.n * 8)
        if q == NULL:
            raise MemoryError()
        o.p = q
        o.heap = True
        o.cap = cap
        m.lookup_cap(head, lo, hi, o.p + o.n, o.cap - o.n)
    if o.n and o.p[o.n] == o.p[o.n - 1]:
        memmove(o.p + o.n, o.p + o.n + 1, (got - 1) * 8)
        got -= 1
    o.n += got
    return 0


cdef inline Py_ssize_t _first_ge(const uint64_t* a, Py_ssize_t n, uint64_t x) noexcept nogil:
    """The first index i with a[i] >= x in a non-decreasing array (n if none)."""
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline Py_ssize_t _first_gt(const uint64_t* a, Py_ssize_t n, uint64_t x) noexcept nogil:
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline void* _data(cnp.ndarray a, int typenum, int ndim) except NULL:
    if cnp.PyArray_TYPE(a) != typenum or cnp.PyArray_NDIM(a) != ndim or not cnp.PyArray_IS_C_CONTIGUOUS(a) \
            or not cnp.PyArray_ISWRITEABLE(a):
        raise ValueError("TableLookup: table arrays must be writeable, C-contiguous and of the expected dtype")
    return cnp.PyArray_DATA(a)


cdef class TableLookup:
    """Per-call lookups over one LogIndex's saved tables and memtables (see the module docstring)."""
    cdef object _load
    cdef cnp.ndarray _slices, _has_bloom, _tmin, _tmax, _ref, _nobloom
    cdef const uint64_t* sl
    cdef const uint8_t* hb
    cdef const uint64_t* mn
    cdef const uint64_t* mx
    cdef uint8_t* rf
    cdef const uint64_t* nb
    cdef Py_ssize_t W, ntables
    cdef bint monotone, any_nobloom
    cdef list tables, memtables
    cdef int k
    cdef int64_t n_lookups, n_read, n_bloom, n_range
    cdef uint64_t split

    def __init__(self, load):
        self._load = load
        self.tables = []
        self.memtables = []
        self.ntables = 0
        self.W = 0
        self.k = 1
        self.split = 0xFFFFFFFFFFFFFFFF
        self._nobloom = np.zeros(1, np.uint64)
        self.nb = <const uint64_t*>cnp.PyArray_DATA(self._nobloom)

    def set_tables(self, cnp.ndarray slices, cnp.ndarray has_bloom, cnp.ndarray tmin, cnp.ndarray tmax,
                   Py_ssize_t ntables, list tables, list memtables, int k, cnp.ndarray referenced,
                   uint64_t split=0xFFFFFFFFFFFFFFFF):
        """Serve saved tables 0..ntables-1 (tables[j]: the cached Memtable or None; referenced[j] is
        set on every use, for the cache's clock) up to LSN split, and then memtables (oldest first)
        from LSN split on."""
        cdef Py_ssize_t j
        cdef const uint8_t* hb = <const uint8_t*>_data(has_bloom, cnp.NPY_UINT8, 1)
        cdef const uint64_t* mn = <const uint64_t*>_data(tmin, cnp.NPY_UINT64, 1)
        cdef const uint64_t* mx = <const uint64_t*>_data(tmax, cnp.NPY_UINT64, 1)
        _data(slices, cnp.NPY_UINT64, 2)
        _data(referenced, cnp.NPY_UINT8, 1)
        W = cnp.PyArray_DIM(slices, 1)
        if ntables < 0 or ntables > cnp.PyArray_DIM(has_bloom, 0) or ntables > cnp.PyArray_DIM(tmin, 0) \
                or ntables > cnp.PyArray_DIM(tmax, 0) or ntables > cnp.PyArray_DIM(referenced, 0) \
                or ntables > len(tables) or (ntables + 63) >> 6 > W or cnp.PyArray_DIM(slices, 0) != BLOOM_NBITS:
            raise ValueError("TableLookup.set_tables: ntables exceeds the table arrays")
        if not 1 <= k <= BLOOM_MAX_K:
            raise ValueError(f"bloom k must be in [1, {BLOOM_MAX_K}], got {k}")
        for m in memtables:
            if not isinstance(m, Memtable):
                raise TypeError(f"memtables must be Memtable, not {type(m).__name__}")
        nobloom = np.zeros(max(1, W), np.uint64)
        cdef uint64_t* nbp = <uint64_t*>cnp.PyArray_DATA(nobloom)
        self.any_nobloom = False
        self.monotone = True
        for j in range(ntables):
            if not hb[j]:
                nbp[j >> 6] |= (<uint64_t>1) << (j & 63)
                self.any_nobloom = True
            if j and (mn[j] < mn[j - 1] or mx[j] < mx[j - 1]):
                self.monotone = False
        self.sl = <const uint64_t*>cnp.PyArray_DATA(slices)
        self.hb, self.mn, self.mx = hb, mn, mx
        self.rf = <uint8_t*>cnp.PyArray_DATA(referenced)
        self._slices, self._has_bloom, self._tmin, self._tmax, self._ref = slices, has_bloom, tmin, tmax, referenced
        self._nobloom = nobloom
        self.nb = <const uint64_t*>cnp.PyArray_DATA(nobloom)
        self.W = W
        self.ntables = ntables
        self.tables = tables
        self.memtables = list(memtables)
        self.k = k
        self.split = split

    def counters(self):
        """(lookups, tables read, tables skipped by bloom, tables skipped by LSN range)."""
        return self.n_lookups, self.n_read, self.n_bloom, self.n_range

    @cython.boundscheck(False)
    @cython.wraparound(False)
    @cython.cdivision(True)
    def lsns(self, tag, uint64_t min_lsn=0, uint64_t max_lsn=0xFFFFFFFFFFFFFFFF):
        """Every LSN of tag within [min_lsn, max_lsn] in the saved tables and memtables, ascending."""
        cdef uint32_t t[5]
        cdef uint64_t h[2]
        cdef uint64_t rows[BLOOM_MAX_K]
        cdef uint64_t g, step, word, lomask, himask
        cdef Py_ssize_t jlo, jhi, j, w, wlo, whi, W = self.W, n = self.ntables, inrange, nc = 0, c
        cdef Py_ssize_t nrange_mid = 0
        cdef int q, k = self.k
        cdef int32_t cand_stack[256]
        cdef int32_t* cand = cand_stack
        cdef Py_ssize_t cand_cap = 256
        cdef uint32_t slot
        cdef uint64_t buf[STACK_LSNS]
        cdef _Out o
        cdef int32_t* cq
        cdef PyObject* srcs_stack[STACK_SOURCES]
        cdef PyObject** srcs = srcs_stack
        cdef uint16_t heads_stack[STACK_SOURCES]
        cdef uint16_t* heads = heads_stack
        cdef Py_ssize_t nsrc, c2
        cdef MemtableData* d
        cdef uint16_t sid, tail
        cdef uint8_t* p
        cdef list keep = None
        cdef uint64_t thi = max_lsn if max_lsn < self.split else self.split    # the tables' upper end
        cdef uint64_t mlo = min_lsn if min_lsn > self.split else self.split    # the memtables' lower end
        tag_fields(tag, t)
        murmur3_x64_128(<const uint8_t*>t, 20, 0, h)
        slot = <uint32_t>(h[0] & (MT_HASH_SLOTS - 1))
        # the saved tables the LSN range keeps: [jlo, jhi). The walk from the newest stops at a table
        # whose max LSN is below min_lsn; tables whose min LSN is above max_lsn are skipped.
        if self.monotone and not self.any_nobloom:
            jlo = _first_ge(self.mx, n, min_lsn)
            jhi = _first_gt(self.mn, n, thi)
            if jhi < jlo:
                jhi = jlo
        else:
            jlo = n
            while jlo > 0 and self.mx[jlo - 1] >= min_lsn:
                jlo -= 1
            jhi = n
            while jhi > jlo and self.mn[jhi - 1] > thi:
                jhi -= 1
        inrange = 0
        o.p = buf
        o.n = 0
        o.cap = STACK_LSNS
        o.heap = False
        try:
            if jhi > jlo:
                g = h[0]
                step = h[1] | 1
                for q in range(k):  # the k probe rows are the same for every table
                    rows[q] = (((<uint64_t>(<uint32_t>(g ^ (g >> 32)))) * BLOOM_NBITS) >> 32) * W
                    g += step
                wlo = jlo >> 6
                whi = (jhi - 1) >> 6
                for w in range(whi, wlo - 1, -1):
                    word = 0xFFFFFFFFFFFFFFFF
                    if w == whi and (jhi & 63):
                        word = ((<uint64_t>1) << (jhi & 63)) - 1
                    if w == wlo:
                        word &= ~(((<uint64_t>1) << (jlo & 63)) - 1)
                    if not self.monotone or self.any_nobloom:
                        # the LSN range of each table, one by one (a table without a bloom has [0, MAX])
                        for j in range(64):
                            if word & ((<uint64_t>1) << j) and self.mn[w * 64 + j] > thi:
                                word &= ~((<uint64_t>1) << j)
                                nrange_mid += 1
                    inrange += lt_popcount64_(word)
                    if self.any_nobloom:
                        for q in range(k):
                            word &= self.sl[rows[q] + w] | self.nb[w]
                    else:
                        for q in range(k):
                            word &= self.sl[rows[q] + w]
                    while word:
                        j = 63 - lt_clz64_(word)
                        word &= ~((<uint64_t>1) << j)
                        if nc == cand_cap:
                            cq = <int32_t*>malloc(cand_cap * 2 * 4)
                            if cq == NULL:
                                raise MemoryError()
                            memcpy(cq, cand, nc * 4)
                            if cand != cand_stack:
                                free(cand)
                            cand = cq
                            cand_cap *= 2
                        cand[nc] = <int32_t>(w * 64 + j)
                        nc += 1
            # the sources in output order: candidates oldest first, then the memtables (all newer)
            nsrc = nc + len(self.memtables)
            if nsrc > STACK_SOURCES:
                srcs = <PyObject**>malloc(nsrc * sizeof(PyObject*))
                heads = <uint16_t*>malloc(nsrc * sizeof(uint16_t))
                if srcs == NULL or heads == NULL:
                    raise MemoryError()
            for c in range(nc):
                if self.tables[cand[c]] is None:
                    # a miss in the table cache: read the table files; keep every candidate alive,
                    # as loading one may evict another from the cache
                    keep = []
                    for c2 in range(nc):
                        obj = self.tables[cand[c2]]
                        if obj is None:
                            obj = self._load(cand[c2])
                        else:
                            self.rf[cand[c2]] = 1
                        keep.append(obj)
                    break
            for c in range(nc):
                j = cand[nc - 1 - c]
                if keep is None:
                    self.rf[j] = 1   # a hit: the cache's clock gives the table a second chance
                    srcs[c] = <PyObject*>self.tables[j]
                else:
                    srcs[c] = <PyObject*>keep[nc - 1 - c]
            for c in range(nsrc - nc):
                srcs[nc + c] = <PyObject*>self.memtables[c]
            # walk every source's hash chain side by side, so their cache misses overlap
            for c in range(nsrc):
                d = (<Memtable>srcs[c]).d
                heads[c] = 0
                if c < nc and (thi < min_lsn or thi < d.min_lsn or min_lsn > d.max_lsn):
                    continue
                if c >= nc and (max_lsn < mlo or max_lsn < d.min_lsn or mlo > d.max_lsn):
                    continue
                if d.n_order:
                    heads[c] = 1
                    lt_prefetch(&d.hash[slot])
            for c in range(nsrc):
                if heads[c]:
                    d = (<Memtable>srcs[c]).d
                    heads[c] = d.hash[slot]
                    if heads[c]:
                        _prefetch_seg(d, heads[c])
            for c in range(nsrc):
                if heads[c]:
                    d = (<Memtable>srcs[c]).d
                    heads[c] = _find_from(d, heads[c], t)
                    if heads[c]:
                        sid = _u16(_seg(d, heads[c]) + HEAD_NEXT_SEG)
                        tail = _u16(_seg(d, heads[c]) + HEAD_TAIL_SEG)
                        if sid:
                            if tail > sid and (tail - sid) * MT_SEG_BYTES <= SPAN_PREFETCH:
                                # segments are taken in insertion order: the tag's chain lies in [sid, tail]
                                p = _seg(d, sid)
                                while p <= _seg(d, tail) + MT_SEG_BYTES - 1:
                                    lt_prefetch(p)
                                    p += 64
                            else:
                                _prefetch_seg(d, sid)
                                _prefetch_seg(d, tail)
            for c in range(nsrc):
                if heads[c]:
                    if c < nc:
                        _gather(<Memtable>srcs[c], heads[c], min_lsn, thi, &o)
                    else:
                        _gather(<Memtable>srcs[c], heads[c], mlo, max_lsn, &o)
            out = cnp.PyArray_EMPTY(1, <cnp.npy_intp*>&o.n, cnp.NPY_UINT64, 0)
            if o.n:
                memcpy(cnp.PyArray_DATA(out), o.p, o.n * 8)
        finally:
            if o.heap:
                free(o.p)
            if srcs != srcs_stack:
                free(srcs)
            if heads != heads_stack:
                free(heads)
            if cand != cand_stack:
                free(cand)
        self.n_lookups += 1
        self.n_read += nc
        self.n_bloom += inrange - nc
        self.n_range += n - jhi + nrange_mid
        return out
