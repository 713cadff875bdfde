# cython: language_level=3
"""Memtable: one LogIndex memtable in PolarDB's fixed arrays.

4096 segments of 48 bytes (id 0 means none), 2048 hash slots chained through item heads, and an
index-order array of u16 entries (slot << 12 | segment id) that records insertion order. An item
head holds a PageTag and 2 suffix LSNs; an item segment holds 10. Every LSN in one memtable shares
its upper 32 bits (the prefix LSN); entries store the lower 32 bits.

    m = Memtable(table_id=0)
    m.insert(tag, lsn) -> status           # INSERTED, DUPLICATE, FULL or PREFIX_CHANGE
    m.insert_many(tags, lsns) -> (n, status)  # n rows consumed; stops at FULL or PREFIX_CHANGE
    m.lsns(tag, min_lsn, max_lsn) -> np.ndarray[uint64]   # ascending, both ends inclusive
    m.iter_order(from_lsn) -> (lsn, PageTag)...          # insertion (= LSN) order
    m.order_arrays(from_lsn) -> (lsns, tags)             # the same, as numpy arrays
    m.to_bytes() / Memtable.from_bytes(b)                # compact form with a CRC-32C

LSNs must be non-decreasing: a smaller LSN raises LsnOrderError; the same (tag, LSN) twice is a
DUPLICATE and stores nothing. FULL and PREFIX_CHANGE leave the memtable untouched.
"""
import struct
from operator import index as _index

import numpy as np
cimport numpy as cnp
cimport cython
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.long cimport PyLong_AsUnsignedLong
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memset, memcmp, memmove

from logtide._ext.murmur3 cimport murmur3_x64_128
from logtide._ext.crc32c cimport crc32c_update
from logtide._ext.le_bytes cimport put_le
from logtide.errors import CorruptBlockError, LsnOrderError
from logtide.pagetag import PageTag, tag_array

INSERTED = MT_INSERTED
FULL = MT_FULL
PREFIX_CHANGE = MT_PREFIX_CHANGE
DUPLICATE = MT_DUPLICATE
SEGMENTS = MT_SEGMENTS
SEG_BYTES = MT_SEG_BYTES
HASH_SLOTS = MT_HASH_SLOTS
ORDER_CAP = MT_ORDER_CAP
USABLE_SEGMENTS = MT_SEGMENTS - 1
NBYTES = sizeof(MemtableData)   # the fixed memory of one memtable's arrays

STATUS_NAMES = {MT_INSERTED: "INSERTED", MT_FULL: "FULL", MT_PREFIX_CHANGE: "PREFIX_CHANGE",
                MT_DUPLICATE: "DUPLICATE"}

# serialised form: header, hash[2048], segments 1..used, order[n], crc32c of everything before it
cdef enum:
    MAGIC_ = 0x544D544C  # "LTMT"
    VERSION_ = 1
MAGIC = MAGIC_
VERSION = VERSION_
_HDR = struct.Struct("<IHHQQQIIHH")  # magic, version, reserved, table_id, min, max, prefix, n_order, used, limit
HEADER_SIZE = _HDR.size
assert HEADER_SIZE == MT_IMAGE_HEADER


cdef inline uint16_t _u16(const uint8_t* p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return v


cdef inline void _set16(uint8_t* p, uint16_t v) noexcept nogil:
    memcpy(p, &v, 2)


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v


cdef inline void _set32(uint8_t* p, uint32_t v) noexcept nogil:
    memcpy(p, &v, 4)


cdef uint32_t tag_slot(const uint32_t* tag) noexcept nogil:
    cdef uint64_t h[2]
    murmur3_x64_128(<const uint8_t*>tag, 20, 0, h)
    return <uint32_t>(h[0] & (MT_HASH_SLOTS - 1))


cdef inline uint8_t* _seg(MemtableData* d, uint16_t sid) noexcept nogil:
    return d.segs + <size_t>sid * MT_SEG_BYTES


cdef extern from *:
    """
    #define lt_mt_prefetch(p) __builtin_prefetch((const void *)(p), 1, 3)
    """
    void _prefetch "lt_mt_prefetch"(const void* p) nogil

cdef enum:
    _AHEAD = 8      # rows hashed ahead of the insert (a power of two)


cdef Py_ssize_t image_size(const MemtableData* d) noexcept nogil:
    return (MT_IMAGE_HEADER + MT_HASH_SLOTS * 2 + <Py_ssize_t>d.used_segs * MT_SEG_BYTES
            + <Py_ssize_t>d.n_order * 2 + 4)


cdef void write_image(const MemtableData* d, uint8_t* p) noexcept nogil:
    cdef Py_ssize_t nseg = <Py_ssize_t>d.used_segs * MT_SEG_BYTES, nord = <Py_ssize_t>d.n_order * 2
    cdef Py_ssize_t pos = MT_IMAGE_HEADER
    # the header as _HDR packs it (little-endian): magic, version, reserved, table_id, min, max,
    # prefix, n_order, used, limit
    put_le(p, MAGIC_, 4)
    put_le(p + 4, VERSION_, 2)
    put_le(p + 6, 0, 2)
    put_le(p + 8, d.table_id, 8)
    put_le(p + 16, d.min_lsn, 8)
    put_le(p + 24, d.max_lsn, 8)
    put_le(p + 32, d.prefix, 4)
    put_le(p + 36, d.n_order, 4)
    put_le(p + 40, d.used_segs, 2)
    put_le(p + 42, d.seg_limit, 2)
    memcpy(p + pos, d.hash, MT_HASH_SLOTS * 2)
    pos += MT_HASH_SLOTS * 2
    memcpy(p + pos, d.segs + MT_SEG_BYTES, nseg)
    pos += nseg
    memcpy(p + pos, d.order, nord)
    pos += nord
    _set32(p + pos, crc32c_update(0, p, pos))


cdef class Memtable:
    """One LogIndex memtable (see the module docstring)."""

    def __cinit__(self):
        self.d = <MemtableData*>calloc(1, sizeof(MemtableData))
        if self.d == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.d)

    def __init__(self, uint64_t table_id=0, int max_segments=MT_SEGMENTS - 1):
        if not 1 <= max_segments <= MT_SEGMENTS - 1:
            raise ValueError(f"max_segments must be in [1, {MT_SEGMENTS - 1}], got {max_segments}")
        self.d.seg_limit = max_segments
        self.reset(table_id)

    def reset(self, uint64_t table_id):
        """Empty the memtable for reuse under a new table id."""
        cdef uint16_t limit = self.d.seg_limit
        # the header and hash slots only: segments are cleared as they are taken, and nothing
        # reads a segment past used_segs or an order entry past n_order
        memset(self.d, 0, <size_t>(<char*>self.d.segs - <char*>self.d))
        self.d.seg_limit = limit
        self.d.table_id = table_id

    # -- core --

    cdef uint16_t find_head(self, const uint32_t* tag, uint32_t slot) noexcept nogil:
        cdef MemtableData* d = self.d
        cdef uint16_t sid = d.hash[slot]
        cdef int guard = 0
        while sid != 0 and guard < MT_SEGMENTS:
            if memcmp(_seg(d, sid) + HEAD_TAG, tag, 20) == 0:
                return sid
            sid = _u16(_seg(d, sid) + HEAD_NEXT_ITEM)
            guard += 1
        return 0

    cdef int insert_raw(self, const uint32_t* tag, uint32_t slot, uint64_t lsn) noexcept nogil:
        cdef MemtableData* d = self.d
        cdef uint16_t head, tail, sid
        cdef uint8_t* h
        cdef uint8_t* t
        cdef uint8_t* s
        cdef uint8_t num
        cdef uint32_t suffix = <uint32_t>lsn
        cdef uint32_t last
        if d.n_order:
            if lsn < d.max_lsn:
                return MT_LSN_ORDER
            if <uint32_t>(lsn >> 32) != d.prefix:
                return MT_PREFIX_CHANGE
        head = self.find_head(tag, slot)
        if head:
            h = _seg(d, head)
            tail = _u16(h + HEAD_TAIL_SEG)
            t = _seg(d, tail) if tail else h
            num = t[ITEM_NUMBER]
            if tail:
                last = _u32(t + SEG_SUFFIX + 4 * (num - 1))
            else:
                last = _u32(t + HEAD_SUFFIX + 4 * (num - 1))
            if lsn == d.max_lsn and last == suffix:
                return MT_DUPLICATE
            if (tail == 0 and num < MT_HEAD_LSNS) or (tail != 0 and num < MT_SEG_LSNS):
                _set32(t + (SEG_SUFFIX if tail else HEAD_SUFFIX) + 4 * num, suffix)
                t[ITEM_NUMBER] = num + 1
                d.order[d.n_order] = <uint16_t>((num << MT_SEG_ID_BITS) | (tail if tail else head))
            else:
                if d.used_segs >= d.seg_limit:
                    return MT_FULL
                d.used_segs += 1
                sid = d.used_segs
                s = _seg(d, sid)
                memset(s, 0, MT_SEG_BYTES)
                s[ITEM_KIND] = KIND_SEG
                _set16(s + SEG_PREV, tail if tail else head)
                _set16(s + SEG_HEAD, head)
                _set32(s + SEG_SUFFIX, suffix)
                s[ITEM_NUMBER] = 1
                if tail:
                    _set16(t + SEG_NEXT, sid)
                else:
                    _set16(h + HEAD_NEXT_SEG, sid)
                _set16(h + HEAD_TAIL_SEG, sid)
                d.order[d.n_order] = sid
        else:
            if d.used_segs >= d.seg_limit:
                return MT_FULL
            d.used_segs += 1
            sid = d.used_segs
            s = _seg(d, sid)
            memset(s, 0, MT_SEG_BYTES)
            s[ITEM_KIND] = KIND_HEAD
            memcpy(s + HEAD_TAG, tag, 20)
            _set32(s + HEAD_SUFFIX, suffix)
            s[ITEM_NUMBER] = 1
            _set16(s + HEAD_NEXT_ITEM, d.hash[slot])
            d.hash[slot] = sid
            d.order[d.n_order] = sid
        if d.n_order == 0:
            d.min_lsn = lsn
            d.prefix = <uint32_t>(lsn >> 32)
        d.n_order += 1
        d.max_lsn = lsn
        return MT_INSERTED

    cdef Py_ssize_t insert_rows(self, const uint32_t* tags, const uint64_t* lsns, Py_ssize_t i,
                                Py_ssize_t n, int* rc) noexcept nogil:
        # Rows are hashed AHEAD rows early and their hash chain's first segment prefetched, so a
        # row's chain walk finds it in cache instead of waiting on the load (the hash and the
        # walk of different rows overlap).
        cdef MemtableData* d = self.d
        cdef uint32_t ring[_AHEAD]
        cdef uint32_t s
        cdef Py_ssize_t k, j
        rc[0] = MT_INSERTED
        for k in range(i, min(i + _AHEAD, n)):
            s = tag_slot(tags + 5 * k)
            ring[k & (_AHEAD - 1)] = s
            _prefetch(_seg(d, d.hash[s]))
        while i < n:
            s = ring[i & (_AHEAD - 1)]
            j = i + _AHEAD
            if j < n:
                ring[j & (_AHEAD - 1)] = tag_slot(tags + 5 * j)
                _prefetch(_seg(d, d.hash[ring[j & (_AHEAD - 1)]]))
            rc[0] = self.insert_raw(tags + 5 * i, s, lsns[i])
            if rc[0] != MT_INSERTED and rc[0] != MT_DUPLICATE:
                break
            i += 1
        if i == n:
            rc[0] = MT_INSERTED
        return i

    cdef Py_ssize_t lookup_raw(self, uint16_t head, uint64_t lo, uint64_t hi, uint64_t* out) noexcept nogil:
        return self.lookup_cap(head, lo, hi, out, PY_SSIZE_T_MAX if out != NULL else 0)

    cdef Py_ssize_t lookup_cap(self, uint16_t head, uint64_t lo, uint64_t hi, uint64_t* out,
                               Py_ssize_t cap) noexcept nogil:
        cdef MemtableData* d = self.d
        cdef uint64_t base = (<uint64_t>d.prefix) << 32, lsn
        cdef uint8_t* h
        cdef uint8_t* s
        cdef uint16_t sid
        cdef Py_ssize_t n = 0
        cdef int i, num, guard = 0
        if head == 0 or hi < d.min_lsn or lo > d.max_lsn:
            return 0
        h = _seg(d, head)
        num = h[ITEM_NUMBER]
        for i in range(num):
            lsn = base | _u32(h + HEAD_SUFFIX + 4 * i)
            if lsn > hi:
                return n
            if lsn >= lo:
                if n < cap:
                    out[n] = lsn
                n += 1
        sid = _u16(h + HEAD_NEXT_SEG)
        while sid != 0 and guard < MT_SEGMENTS:
            s = _seg(d, sid)
            num = s[ITEM_NUMBER]
            for i in range(num):
                lsn = base | _u32(s + SEG_SUFFIX + 4 * i)
                if lsn > hi:
                    return n
                if lsn >= lo:
                    if n < cap:
                        out[n] = lsn
                    n += 1
            sid = _u16(s + SEG_NEXT)
            guard += 1
        return n

    cdef void _entry(self, uint32_t k, uint64_t* lsn, const uint8_t** tag) noexcept nogil:
        cdef MemtableData* d = self.d
        cdef uint16_t e = d.order[k]
        cdef uint16_t sid = e & MT_SEG_ID_MASK
        cdef uint32_t slot = e >> MT_SEG_ID_BITS
        cdef uint8_t* s = _seg(d, sid)
        if s[ITEM_KIND] == KIND_HEAD:
            lsn[0] = ((<uint64_t>d.prefix) << 32) | _u32(s + HEAD_SUFFIX + 4 * slot)
            tag[0] = s + HEAD_TAG
        else:
            lsn[0] = ((<uint64_t>d.prefix) << 32) | _u32(s + SEG_SUFFIX + 4 * slot)
            tag[0] = _seg(d, _u16(s + SEG_HEAD)) + HEAD_TAG

    cdef uint32_t _order_start(self, uint64_t from_lsn) noexcept nogil:
        """The first index-order position whose LSN is >= from_lsn (binary search)."""
        cdef uint32_t lo = 0, hi = self.d.n_order, mid
        cdef uint64_t lsn
        cdef const uint8_t* tag
        while lo < hi:
            mid = (lo + hi) >> 1
            self._entry(mid, &lsn, &tag)
            if lsn < from_lsn:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- per-call API --

    def insert(self, tag, uint64_t lsn):
        """Insert one (tag, lsn); returns INSERTED, DUPLICATE, FULL or PREFIX_CHANGE."""
        cdef uint32_t t[5]
        tag_fields(tag, t)
        cdef int rc = self.insert_raw(t, tag_slot(t), lsn)
        if rc == MT_LSN_ORDER:
            raise LsnOrderError(f"LSN {lsn} is below the memtable's max LSN {self.d.max_lsn}")
        return rc

    def lsns(self, tag, uint64_t min_lsn=0, uint64_t max_lsn=0xFFFFFFFFFFFFFFFF):
        """LSNs of tag within [min_lsn, max_lsn], ascending, as a uint64 array."""
        cdef uint32_t t[5]
        tag_fields(tag, t)
        cdef uint16_t head = self.find_head(t, tag_slot(t))
        cdef Py_ssize_t n = self.lookup_raw(head, min_lsn, max_lsn, NULL)
        out = np.empty(n, dtype=np.uint64)
        cdef uint64_t[::1] o = out
        if n:
            self.lookup_raw(head, min_lsn, max_lsn, &o[0])
        return out

    def __contains__(self, tag):
        cdef uint32_t t[5]
        tag_fields(tag, t)
        return self.find_head(t, tag_slot(t)) != 0

    def iter_order(self, uint64_t from_lsn=0):
        """Yield (lsn, PageTag) in insertion order, from the first LSN >= from_lsn."""
        cdef uint32_t k = self._order_start(from_lsn)
        cdef uint64_t lsn
        cdef const uint8_t* tag
        cdef const uint32_t* tf
        while k < self.d.n_order:
            self._entry(k, &lsn, &tag)
            tf = <const uint32_t*>tag
            yield lsn, tuple.__new__(PageTag, (tf[0], tf[1], tf[2], tf[3], tf[4]))
            k += 1

    # -- batch API --

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def insert_many(self, tags, lsns, Py_ssize_t start=0):
        """Insert rows start.. of (tags, lsns) in order until FULL or PREFIX_CHANGE.

        Returns (next_row, status): rows [start, next_row) were consumed (inserted or duplicate);
        status is INSERTED when every row was consumed. Raises LsnOrderError at a decreasing LSN
        (the rows before it stay inserted).
        """
        cdef const uint32_t[:, ::1] t = tag_array(tags)
        cdef const uint64_t[::1] l = _lsn_array(lsns)
        cdef Py_ssize_t i = start, n = t.shape[0]
        cdef int rc = MT_INSERTED
        if l.shape[0] != n:
            raise ValueError(f"tags and lsns differ in length: {n} vs {l.shape[0]}")
        if start < 0 or start > n:
            raise ValueError(f"start {start} outside [0, {n}]")
        if i < n:
            with nogil:
                i = self.insert_rows(&t[0, 0], &l[0], i, n, &rc)
        if rc == MT_LSN_ORDER:
            raise LsnOrderError(f"row {i}: LSN {l[i]} is below the memtable's max LSN {self.d.max_lsn}")
        if i == n:
            return i, MT_INSERTED
        return i, rc

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def lsns_many(self, tags, uint64_t min_lsn=0, uint64_t max_lsn=0xFFFFFFFFFFFFFFFF):
        """LSNs of many tags: (offsets int64[n+1], lsns uint64); tag i owns lsns[offsets[i]:offsets[i+1]]."""
        cdef const uint32_t[:, ::1] t = tag_array(tags)
        cdef Py_ssize_t n = t.shape[0], i, total = 0
        offsets = np.zeros(n + 1, dtype=np.int64)
        heads = np.zeros(n, dtype=np.uint16)
        cdef int64_t[::1] off = offsets
        cdef uint16_t[::1] hd = heads
        with nogil:
            for i in range(n):
                hd[i] = self.find_head(&t[i, 0], tag_slot(&t[i, 0]))
                total += self.lookup_raw(hd[i], min_lsn, max_lsn, NULL)
                off[i + 1] = total
        out = np.empty(total, dtype=np.uint64)
        cdef uint64_t[::1] o = out
        with nogil:
            for i in range(n):
                if off[i + 1] > off[i]:
                    self.lookup_raw(hd[i], min_lsn, max_lsn, &o[off[i]])
        return offsets, out

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def order_arrays(self, uint64_t from_lsn=0):
        """(lsns uint64[n], tags uint32[n, 5]) in insertion order, from the first LSN >= from_lsn."""
        cdef uint32_t k0 = self._order_start(from_lsn), k
        cdef Py_ssize_t n = self.d.n_order - k0
        lsns = np.empty(n, dtype=np.uint64)
        tags = np.empty((n, 5), dtype=np.uint32)
        cdef uint64_t[::1] lo = lsns
        cdef uint32_t[:, ::1] to = tags
        cdef const uint8_t* tag
        with nogil:
            for k in range(k0, self.d.n_order):
                self._entry(k, &lo[k - k0], &tag)
                memcpy(&to[k - k0, 0], tag, 20)
        return lsns, tags

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def tags(self):
        """Every distinct PageTag in the memtable, as an (n, 5) uint32 array (segment order)."""
        cdef MemtableData* d = self.d
        cdef Py_ssize_t n = 0
        cdef uint16_t sid
        for sid in range(1, d.used_segs + 1):
            n += _seg(d, sid)[ITEM_KIND] == KIND_HEAD
        out = np.empty((n, 5), dtype=np.uint32)
        cdef uint32_t[:, ::1] o = out
        n = 0
        for sid in range(1, d.used_segs + 1):
            if _seg(d, sid)[ITEM_KIND] == KIND_HEAD:
                memcpy(&o[n, 0], _seg(d, sid) + HEAD_TAG, 20)
                n += 1
        return out

    # -- state --

    @property
    def table_id(self):
        return self.d.table_id

    @property
    def min_lsn(self):
        """Smallest LSN stored (0 when empty)."""
        return self.d.min_lsn

    @property
    def max_lsn(self):
        """Largest LSN stored (0 when empty)."""
        return self.d.max_lsn

    @property
    def prefix(self):
        """The upper 32 bits shared by every LSN stored."""
        return self.d.prefix

    @property
    def max_segments(self):
        return self.d.seg_limit

    @property
    def used_segments(self):
        return self.d.used_segs

    @property
    def free_segments(self):
        return self.d.seg_limit - self.d.used_segs

    def __len__(self):
        """Number of (tag, LSN) entries."""
        return self.d.n_order

    @property
    def nbytes(self):
        """Bytes of the fixed arrays (the same for every memtable)."""
        return sizeof(MemtableData)

    def __repr__(self):
        return (f"Memtable(table_id={self.d.table_id}, entries={self.d.n_order}, segments={self.d.used_segs}/"
                f"{self.d.seg_limit}, lsn=[{self.d.min_lsn}, {self.d.max_lsn}])")

    # -- serialisation --

    def to_bytes(self):
        """Compact form: header, hash slots, used segments, index order, CRC-32C."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, image_size(self.d))
        cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(out)
        with nogil:   # the LogIndex flush thread runs this beside inserts
            write_image(self.d, p)
        return out

    @classmethod
    def from_bytes(cls, data):
        """Parse to_bytes() output; raises CorruptBlockError on a bad size, magic, CRC or structure."""
        cdef const uint8_t[::1] v
        try:
            v = memoryview(data).cast("B")
        except TypeError:
            raise TypeError(f"Memtable.from_bytes needs bytes, not {type(data).__name__}") from None
        cdef Py_ssize_t size = v.shape[0]
        if size < HEADER_SIZE + MT_HASH_SLOTS * 2 + 4:
            raise CorruptBlockError(f"memtable image too short: {size} bytes")
        magic, version, _, table_id, min_lsn, max_lsn, prefix, n_order, used, limit = _HDR.unpack_from(v, 0)
        if magic != MAGIC or version != VERSION:
            raise CorruptBlockError(f"not a memtable image (magic {magic:#x}, version {version})")
        if crc32c_update(0, &v[0], size - 4) != _u32(&v[size - 4]):
            raise CorruptBlockError(f"memtable {table_id}: CRC mismatch")
        if not (1 <= limit < MT_SEGMENTS and used <= limit and n_order <= MT_ORDER_CAP and
                size == HEADER_SIZE + MT_HASH_SLOTS * 2 + used * MT_SEG_BYTES + n_order * 2 + 4):
            raise CorruptBlockError(f"memtable {table_id}: inconsistent sizes (used {used}, entries {n_order})")
        cdef Memtable m = cls(table_id, limit)
        cdef MemtableData* d = m.d
        d.min_lsn, d.max_lsn, d.prefix, d.n_order, d.used_segs = min_lsn, max_lsn, prefix, n_order, used
        cdef Py_ssize_t pos = HEADER_SIZE
        memcpy(d.hash, &v[pos], MT_HASH_SLOTS * 2)
        pos += MT_HASH_SLOTS * 2
        memcpy(d.segs + MT_SEG_BYTES, &v[pos], used * MT_SEG_BYTES)
        pos += used * MT_SEG_BYTES
        memcpy(d.order, &v[pos], n_order * 2)
        if not m._valid():
            raise CorruptBlockError(f"memtable {table_id}: segment links out of range")
        return m

    cdef bint _valid(self) noexcept:
        """Every link and order entry points inside the used segments (a CRC-valid image always does)."""
        cdef MemtableData* d = self.d
        cdef uint16_t sid, used = d.used_segs
        cdef uint8_t* s
        cdef uint32_t k
        for k in range(MT_HASH_SLOTS):
            if d.hash[k] > used:
                return False
        for sid in range(1, used + 1):
            s = _seg(d, sid)
            if s[ITEM_KIND] == KIND_HEAD:
                if (s[ITEM_NUMBER] > MT_HEAD_LSNS or _u16(s + HEAD_NEXT_ITEM) > used or
                        _u16(s + HEAD_NEXT_SEG) > used or _u16(s + HEAD_TAIL_SEG) > used):
                    return False
            elif s[ITEM_KIND] == KIND_SEG:
                if (s[ITEM_NUMBER] > MT_SEG_LSNS or _u16(s + SEG_NEXT) > used or _u16(s + SEG_PREV) > used
                        or _u16(s + SEG_HEAD) == 0 or _u16(s + SEG_HEAD) > used
                        or _seg(d, _u16(s + SEG_HEAD))[ITEM_KIND] != KIND_HEAD):
                    return False
            else:
                return False
        for k in range(d.n_order):
            sid = d.order[k] & MT_SEG_ID_MASK
            if sid == 0 or sid > used or (d.order[k] >> MT_SEG_ID_BITS) >= _seg(d, sid)[ITEM_NUMBER]:
                return False
        return True

    def __reduce__(self):
        return (Memtable.from_bytes, (self.to_bytes(),))


cdef int tag_fields(object tag, uint32_t* out) except -1:
    """The five u32 fields of a PageTag (a 5-tuple, list or array); TypeError or OverflowError otherwise."""
    cdef int i
    cdef unsigned long v
    if isinstance(tag, tuple) and PyTuple_GET_SIZE(tag) == 5:
        for i in range(5):
            x = <object>PyTuple_GET_ITEM(tag, i)
            if not isinstance(x, int):
                x = _index(x)  # numpy integers and other __index__ types
            v = PyLong_AsUnsignedLong(x)  # OverflowError on negatives
            if v > 0xFFFFFFFFUL:
                raise OverflowError(f"PageTag fields are u32, got {v}")
            out[i] = <uint32_t>v
        return 0
    if isinstance(tag, (list, np.ndarray)) and len(tag) == 5:
        for i in range(5):
            # __index__, not int(): a float or str field is refused, never truncated to another page
            v = PyLong_AsUnsignedLong(_index(tag[i]))
            if v > 0xFFFFFFFFUL:
                raise OverflowError(f"PageTag fields are u32, got {v}")
            out[i] = <uint32_t>v
        return 0
    raise TypeError(f"a PageTag is five u32 fields, not {type(tag).__name__}")


def _lsn_array(lsns):
    arr = np.asarray(lsns)
    if arr.dtype != np.uint64:
        if arr.size and arr.dtype.kind == "i" and arr.min() < 0:
            raise ValueError("LSNs are unsigned")
        if arr.size and arr.dtype.kind not in "ui":
            raise TypeError(f"LSNs must be integers, not {arr.dtype}")
        arr = arr.astype(np.uint64)
    return np.ascontiguousarray(arr)


# ---------------------------------------------------------------------------------------------
# Lookups across many tables: bloom blocks first (one murmur3 hash per tag, probes as in
# docs/bloom4k.md), then the tables that may hold the tag.

cdef enum:
    BLOOM_BITS_BYTES_ = 4064
    BLOOM_NBITS_ = 32512


cdef inline bint _bloom_test(const uint8_t* bits, int k, uint64_t h1, uint64_t h2) noexcept nogil:
    cdef uint64_t g = h1, step = h2 | 1, x
    cdef int i
    for i in range(k):
        x = ((<uint64_t>(<uint32_t>(g ^ (g >> 32)))) * BLOOM_NBITS_) >> 32
        if not (bits[x >> 3] & (1 << (x & 7))):
            return False
        g += step
    return True


@cython.boundscheck(False)
@cython.wraparound(False)
def bloom_test_many(tags, const uint8_t[::1] bits, int k):
    """Membership of each tag in one bloom bit array (4064 bytes), with the Bloom4K probe sequence."""
    cdef const uint32_t[:, ::1] t = tag_array(tags)
    cdef Py_ssize_t n = t.shape[0], i
    cdef uint64_t h[2]
    if bits.shape[0] != BLOOM_BITS_BYTES_:
        raise ValueError(f"bloom bits are {BLOOM_BITS_BYTES_} bytes, got {bits.shape[0]}")
    out = np.zeros(n, dtype=np.bool_)
    cdef uint8_t[::1] o = out.view(np.uint8)
    with nogil:
        for i in range(n):
            murmur3_x64_128(<const uint8_t*>&t[i, 0], 20, 0, h)
            o[i] = _bloom_test(&bits[0], k, h[0], h[1])
    return out


cdef struct _Buf:
    uint64_t* p
    Py_ssize_t n, cap


cdef int _gather_one(Memtable m, const uint32_t* tag, uint32_t slot, uint64_t lo, uint64_t hi,
                     _Buf* b, Py_ssize_t start) except -1:
    cdef uint16_t head = m.find_head(tag, slot)
    cdef Py_ssize_t got
    cdef uint64_t* q
    if head == 0:
        return 0
    got = m.lookup_cap(head, lo, hi, b.p + b.n, b.cap - b.n)
    if got == 0:
        return 0
    if b.n + got > b.cap:  # did not fit: grow, then fill again
        q = <uint64_t*>realloc(b.p, max(2 * b.cap, b.n + got) * 8)
        if q == NULL:
            raise MemoryError()
        b.p = q
        b.cap = max(2 * b.cap, b.n + got)
        m.lookup_cap(head, lo, hi, b.p + b.n, b.cap - b.n)
    # a record split across two memtables has its LSN in both: keep it once per tag
    if b.n > start and b.p[b.n] == b.p[b.n - 1]:
        memmove(b.p + b.n, b.p + b.n + 1, (got - 1) * 8)
        got -= 1
    b.n += got
    return 0


# ---------------------------------------------------------------------------------------------
# Bit-sliced blooms: slices[p, w] holds bit p of the blooms of tables 64w .. 64w+63, so the k
# probes of one tag test every table at once (k rows of ceil(T/64) words instead of T blocks).

cdef extern from *:
    """
    static inline int lt_popcount64(unsigned long long x) { return __builtin_popcountll(x); }
    static inline int lt_clz64(unsigned long long x) { return __builtin_clzll(x); }
    """
    int lt_popcount64(unsigned long long x) nogil
    int lt_clz64(unsigned long long x) nogil


@cython.boundscheck(False)
@cython.wraparound(False)
def slices_add(uint64_t[:, ::1] slices, const uint8_t[::1] bits, Py_ssize_t j):
    """Set table j's bloom bits (4064 bytes, Bloom4K layout) into the bit-sliced matrix."""
    cdef Py_ssize_t q, r, w = j >> 6
    cdef int sh = j & 63
    cdef uint64_t byte
    if bits.shape[0] != BLOOM_BITS_BYTES_ or slices.shape[0] != BLOOM_NBITS_ or w >= slices.shape[1]:
        raise ValueError("slices_add: wrong shapes")
    with nogil:
        # without a branch per bit: a bloom's bits are set at random, half of them, and a branch
        # on each mispredicted about as often
        for q in range(BLOOM_BITS_BYTES_):
            byte = bits[q]
            if byte:
                for r in range(8):
                    slices[8 * q + r, w] |= ((byte >> r) & 1) << sh


cdef struct _Cands:
    int32_t* p
    Py_ssize_t n, cap


@cython.boundscheck(False)
@cython.wraparound(False)
def lookup_tables(tags, const uint64_t[:, ::1] slices, const uint8_t[::1] has_bloom, int k,
                  const uint64_t[::1] tmin, const uint64_t[::1] tmax, Py_ssize_t ntables, list tables,
                  list memtables, uint64_t lo, uint64_t hi, uint64_t split=0xFFFFFFFFFFFFFFFF):
    """LSNs of each tag in [lo, hi] from saved tables 0..ntables-1 (blooms as bit slices) up to LSN
    split, and then from the in-memory memtables (oldest first) from LSN split on; a tag's LSN at the
    split, found in both, is kept once.

    Walks tables newest first: the walk stops at a table whose max LSN is below lo; a table whose
    min LSN is above hi, or whose bloom lacks the tag, is skipped. Returns either
    ("missing", int32 table indexes that must be loaded into tables[] first) or
    ("ok", offsets int64[n+1], lsns uint64, counts int64[3] = read, skipped by bloom, skipped by range).
    """
    cdef const uint32_t[:, ::1] t = tag_array(tags)
    cdef Py_ssize_t n = t.shape[0], i, j, w, W, jlo, nm = len(memtables), mi, c, c0
    cdef uint64_t h[2]
    cdef uint64_t g, step, x, word
    cdef int q
    cdef int64_t nread = 0, nbloom = 0, nrange = 0, inrange = 0
    cdef int64_t[::1] oo
    cdef uint32_t slot
    cdef uint64_t thi = hi if hi < split else split    # the tables' upper end
    cdef uint64_t mlo = lo if lo > split else split    # the memtables' lower end
    if ntables < 0 or ntables > tmin.shape[0] or ntables > tmax.shape[0] or ntables > has_bloom.shape[0] \
            or ntables > len(tables) or (ntables + 63) // 64 > slices.shape[1]:
        raise ValueError("lookup_tables: ntables exceeds the table arrays")
    W = (ntables + 63) >> 6
    # per call: where the walk stops, which tables the LSN range keeps, which have no bloom
    jlo = ntables - 1
    while jlo >= 0 and tmax[jlo] >= lo:
        jlo -= 1
    jlo += 1
    keep = np.zeros(max(W, 1), np.uint64)
    nobloom = np.zeros(max(W, 1), np.uint64)
    cdef uint64_t[::1] kp = keep
    cdef uint64_t[::1] nb = nobloom
    for j in range(jlo, ntables):
        if tmin[j] > thi or thi < lo:
            nrange += n
        else:
            kp[j >> 6] |= (<uint64_t>1) << (j & 63)
            inrange += 1
            if not has_bloom[j]:
                nb[j >> 6] |= (<uint64_t>1) << (j & 63)
    acc_arr = np.zeros(max(W, 1), np.uint64)
    cdef uint64_t[::1] acc = acc_arr
    cdef _Cands cands
    cdef _Buf b
    cands.cap = 256
    cands.n = 0
    cands.p = <int32_t*>malloc(cands.cap * 4)
    offs = np.zeros(n + 1, np.int64)
    cdef int64_t[::1] co = offs
    b.p = NULL
    try:
        if cands.p == NULL:
            raise MemoryError()
        # 1. candidates per tag, newest table first
        with nogil:
            for i in range(n):
                murmur3_x64_128(<const uint8_t*>&t[i, 0], 20, 0, h)
                for w in range(W):
                    acc[w] = kp[w]
                g = h[0]
                step = h[1] | 1
                for q in range(k):
                    x = ((<uint64_t>(<uint32_t>(g ^ (g >> 32)))) * BLOOM_NBITS_) >> 32
                    for w in range(W):
                        acc[w] &= slices[x, w] | nb[w]
                    g += step
                for w in range(W - 1, -1, -1):
                    word = acc[w]
                    while word:
                        j = 63 - lt_clz64(word)
                        word &= ~((<uint64_t>1) << j)
                        if cands.n == cands.cap:
                            if not _grow_cands(&cands):
                                break
                        cands.p[cands.n] = <int32_t>(w * 64 + j)
                        cands.n += 1
                        nread += 1
                co[i + 1] = cands.n
        if co[n] != cands.n:
            raise MemoryError()
        nbloom = n * inrange - nread
        # 2. every candidate table must be loaded
        missing = set()
        for c in range(cands.n):
            if tables[cands.p[c]] is None:
                missing.add(cands.p[c])
        if missing:
            return ("missing", np.array(sorted(missing), np.int32))
        # 3. gather: oldest candidate first, then the memtables; ascending per tag
        out_off = np.zeros(n + 1, dtype=np.int64)
        oo = out_off
        b.cap = 256
        b.n = 0
        b.p = <uint64_t*>malloc(b.cap * 8)
        if b.p == NULL:
            raise MemoryError()
        for i in range(n):
            slot = tag_slot(&t[i, 0])
            c0 = co[i]
            for c in range(co[i + 1] - 1, c0 - 1, -1):
                _gather_one(<Memtable>tables[cands.p[c]], &t[i, 0], slot, lo, thi, &b, oo[i])
            if mlo <= hi:
                for mi in range(nm):
                    _gather_one(<Memtable?>memtables[mi], &t[i, 0], slot, mlo, hi, &b, oo[i])
            oo[i + 1] = b.n
        out = np.empty(b.n, dtype=np.uint64)
        if b.n:
            memcpy(<void*>cnp.PyArray_DATA(out), b.p, b.n * 8)
        return ("ok", out_off, out, np.array([nread, nbloom, nrange], np.int64))
    finally:
        free(cands.p)
        free(b.p)


cdef bint _grow_cands(_Cands* c) noexcept nogil:
    cdef int32_t* q = <int32_t*>realloc(c.p, c.cap * 2 * 4)
    if q == NULL:
        return False
    c.p = q
    c.cap *= 2
    return True
