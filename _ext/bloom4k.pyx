# cython: language_level=3
"""Bloom4K: the 4096-byte LogIndex bloom block (PolarDB), hashed with murmur3 x64-128."""
import os
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from libc.math cimport log, lround
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset
cimport cython

from logtide._ext.murmur3 cimport murmur3_x64_128
from logtide._ext.crc32c cimport crc32c_update
from logtide._ext.le_bytes cimport put_le
from logtide._ext.murmur3 import as_key_rows
from cpython.long cimport PyLong_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from operator import index as _index
from logtide.errors import CorruptBlockError

cdef enum:
    CHUNK = 64              # keys hashed ahead of their bit tests
    PARALLEL_MIN = 1 << 17  # below this a second thread costs more than it saves

_HEADER = struct.Struct("<QQQII")  # table_id, min_lsn, max_lsn, bits_size, crc32c
assert _HEADER.size == BLOOM_HEADER_SIZE


_POOL = None
_POOL_PID = 0


def _pool():
    """The worker threads of batch calls; a forked child makes its own (the parent's threads are gone)."""
    global _POOL, _POOL_PID
    if _POOL is None or _POOL_PID != os.getpid():
        _POOL = ThreadPoolExecutor(max_workers=max(1, _cpus() - 1), thread_name_prefix="logtide-batch")
        _POOL_PID = os.getpid()
    return _POOL


def _cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _spans(Py_ssize_t n, threads):
    """Split [0, n) into one span per worker thread."""
    if threads is None:
        threads = _cpus()
    threads = max(1, min(int(threads), n // PARALLEL_MIN or 1))
    step = -(-n // threads)
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def optimal_k(Py_ssize_t expected_elements, Py_ssize_t nbits=BLOOM_NBITS):
    """Probes per key: round(ln 2 * m / n), clamped to [1, 10] as PolarDB does (819 -> 10)."""
    if expected_elements <= 0:
        raise ValueError(f"expected_elements must be positive, got {expected_elements}")
    return max(1, min(BLOOM_MAX_K, lround(log(2.0) * nbits / expected_elements)))


# Probe i is g_i = h1 + i*h2 over the full 64 bits, folded to 32 bits and mapped onto
# [0, m) by multiply-shift. Reducing h1, h2 mod m first would leave only ~m^2 = 2^30
# distinct probe sequences: with m = 32512 that floor (n/m^2 ~ 7.7e-7) is above the
# theoretical false-positive rate (3e-7), so the walk keeps all 128 bits in play.
# Module-level inline functions, so the batch loops inline them (a cdef method is a vtable call).

cdef inline uint64_t _probe(uint64_t g) noexcept nogil:
    return ((<uint64_t>(<uint32_t>(g ^ (g >> 32)))) * BLOOM_NBITS) >> 32


cdef inline void _set_bits(uint8_t* bits, int k, const uint8_t* key, Py_ssize_t length) noexcept nogil:
    cdef uint64_t h[2]
    cdef uint64_t g, step, x
    cdef int i
    murmur3_x64_128(key, length, 0, h)
    g = h[0]
    step = h[1] | 1
    for i in range(k):
        x = _probe(g)
        bits[x >> 3] |= <uint8_t>(1 << (x & 7))
        g += step


cdef inline void _set_hashed(uint8_t* bits, int k, uint64_t h1, uint64_t h2) noexcept nogil:
    cdef uint64_t g = h1, step = h2 | 1, x
    cdef int i
    for i in range(k):
        x = _probe(g)
        bits[x >> 3] |= <uint8_t>(1 << (x & 7))
        g += step


cdef void _set_tags(uint8_t* bits, int k, const uint8_t* const* tags, Py_ssize_t n) noexcept nogil:
    # a chunk hashed first, then its bits set: the hashes of different keys overlap in the
    # pipeline instead of each waiting behind the last one's stores
    cdef uint64_t h[CHUNK][2]
    cdef Py_ssize_t i = 0, j, m
    while i < n:
        m = min(CHUNK, n - i)
        for j in range(m):
            murmur3_x64_128(tags[i + j], 20, 0, h[j])
        for j in range(m):
            _set_hashed(bits, k, h[j][0], h[j][1])
        i += m


cdef inline bint _test_bits(const uint8_t* bits, int k, const uint8_t* key, Py_ssize_t length) noexcept nogil:
    cdef uint64_t h[2]
    murmur3_x64_128(key, length, 0, h)
    return _test_hash(bits, k, h[0], h[1])


cdef inline bint _test_hash(const uint8_t* bits, int k, uint64_t h1, uint64_t h2) noexcept nogil:
    cdef uint64_t g = h1, step = h2 | 1, x0, x1
    cdef int i
    cdef bint hit
    # The first two probes are tested without a branch: a per-probe early exit mispredicts
    # about once per absent key, and the flush costs more than the second probe.
    x0 = _probe(g)
    if k == 1:
        return (bits[x0 >> 3] >> (x0 & 7)) & 1
    x1 = _probe(g + step)
    hit = (bits[x0 >> 3] >> (x0 & 7)) & (bits[x1 >> 3] >> (x1 & 7)) & 1
    if not hit:
        return False
    g += 2 * step
    for i in range(2, k):
        x0 = _probe(g)
        if not (bits[x0 >> 3] & (1 << (x0 & 7))):
            return False
        g += step
    return True



cdef inline bint _key_ptr(object key, const uint8_t** p, Py_ssize_t* n, uint8_t* tagbuf) except -1:
    """Point at the bytes of a key: bytes, a 5-int PageTag/tuple (packed to 20 LE bytes), or a buffer."""
    cdef uint32_t v
    cdef int i
    cdef object x
    if isinstance(key, bytes):
        p[0] = <const uint8_t*><char*>key
        n[0] = len(<bytes>key)
        return True
    if isinstance(key, tuple) and len(<tuple>key) == 5:
        for i in range(5):
            x = (<tuple>key)[i]
            if not PyLong_Check(x):
                x = _index(x)     # a float field is a TypeError, never truncated to another page
            v = x                 # OverflowError outside u32
            tagbuf[4 * i] = v & 0xFF
            tagbuf[4 * i + 1] = (v >> 8) & 0xFF
            tagbuf[4 * i + 2] = (v >> 16) & 0xFF
            tagbuf[4 * i + 3] = v >> 24
        p[0] = tagbuf
        n[0] = 20
        return True
    return False


def _rows(keys):
    """A batch's keys as byte rows. Five integer columns are PageTags whatever their dtype (numpy's
    default int64 would otherwise hash as 40-byte keys that no PageTag lookup finds)."""
    arr = np.asarray(keys)
    if arr.ndim == 2 and arr.shape[1] == 5 and arr.dtype.kind in "iu" and arr.dtype != np.uint32:
        if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
            raise ValueError("PageTag fields must fit in u32")
        arr = arr.astype("<u4")
    return as_key_rows(arr)


cdef class Bloom4K:
    """A 4096-byte bloom block over PageTags (or any byte keys) with the LSN range of its table."""

    def __init__(self, uint64_t table_id=0, uint64_t min_lsn=0, uint64_t max_lsn=0,
                 Py_ssize_t expected_elements=BLOOM_DEFAULT_ELEMENTS):
        self._k = optimal_k(expected_elements)
        self._expected = expected_elements
        self._table_id = table_id
        self._min_lsn = min_lsn
        self._max_lsn = max_lsn
        memset(self._bits, 0, BLOOM_BITS_BYTES)

    cdef void add_raw(self, const uint8_t* key, Py_ssize_t length) noexcept nogil:
        _set_bits(self._bits, self._k, key, length)

    cdef bint contains_raw(self, const uint8_t* key, Py_ssize_t length) noexcept nogil:
        return _test_bits(self._bits, self._k, key, length)

    # -- per-call API --

    def add(self, key):
        """Add one key: bytes, a PageTag, or a bytes-like object."""
        cdef const uint8_t* p
        cdef Py_ssize_t n
        cdef uint8_t tagbuf[20]
        cdef const uint8_t[::1] view
        if not _key_ptr(key, &p, &n, tagbuf):
            view = _as_view(key)
            n = view.shape[0]
            p = &view[0] if n else tagbuf
        self.add_raw(p, n)

    def __contains__(self, key):
        cdef const uint8_t* p
        cdef Py_ssize_t n
        cdef uint8_t tagbuf[20]
        cdef const uint8_t[::1] view
        if not _key_ptr(key, &p, &n, tagbuf):
            view = _as_view(key)
            n = view.shape[0]
            p = &view[0] if n else tagbuf
        return self.contains_raw(p, n)

    # -- batch API: (n, 5) uint32 PageTags, (n, 20) uint8, or any (n, w) fixed-width keys --

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def add_many(self, keys):
        """Add every row of an (n, w) key array."""
        cdef const uint8_t[:, ::1] rows = _rows(keys)
        cdef Py_ssize_t i, n = rows.shape[0], w = rows.shape[1]
        if n == 0:
            return
        cdef const uint8_t* ptrs[CHUNK]
        cdef Py_ssize_t j, m
        with nogil:
            if w == 20:
                i = 0
                while i < n:
                    m = min(CHUNK, n - i)
                    for j in range(m):
                        ptrs[j] = &rows[i + j, 0]
                    _set_tags(self._bits, self._k, ptrs, m)
                    i += m
            else:
                for i in range(n):
                    _set_bits(self._bits, self._k, &rows[i, 0] if w else <const uint8_t*>self._bits, w)

    def contains_many(self, keys, threads=None):
        """Membership of every row of an (n, w) key array, as a bool array.

        Large batches are split across `threads` (default: every CPU this process may use),
        each running without the GIL.
        """
        cdef const uint8_t[:, ::1] rows = _rows(keys)
        cdef Py_ssize_t n = rows.shape[0]
        out = np.empty(n, dtype=np.bool_)
        if n == 0:
            return out
        cdef uint8_t[::1] o = out.view(np.uint8)
        spans = _spans(n, threads)
        if len(spans) == 1:
            self._contains_span(rows, o, 0, n)
        else:
            futures = [_pool().submit(self._contains_span, rows, o, lo, hi) for lo, hi in spans[1:]]
            self._contains_span(rows, o, spans[0][0], spans[0][1])
            for f in futures:
                f.result()
        return out

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def _contains_span(self, const uint8_t[:, ::1] rows, uint8_t[::1] o, Py_ssize_t lo, Py_ssize_t hi):
        cdef Py_ssize_t i, j, m, w = rows.shape[1]
        cdef uint64_t h[CHUNK][2]
        cdef const uint8_t* bits = self._bits
        cdef int k = self._k
        with nogil:
            # Hash a chunk first, then test it: the hashes then overlap in the pipeline instead of
            # waiting behind a mispredicted membership branch after every key.
            i = lo
            while i < hi:
                m = min(CHUNK, hi - i)
                if w == 20:  # PageTags: a constant length lets the compiler unroll murmur3
                    for j in range(m):
                        murmur3_x64_128(&rows[i + j, 0], 20, 0, h[j])
                else:
                    for j in range(m):
                        murmur3_x64_128(&rows[i + j, 0] if w else bits, w, 0, h[j])
                for j in range(m):
                    o[i + j] = _test_hash(bits, k, h[j][0], h[j][1])
                i += m

    # -- header fields --

    @property
    def table_id(self):
        return self._table_id

    @table_id.setter
    def table_id(self, uint64_t v):
        self._table_id = v

    @property
    def min_lsn(self):
        return self._min_lsn

    @min_lsn.setter
    def min_lsn(self, uint64_t v):
        self._min_lsn = v

    @property
    def max_lsn(self):
        return self._max_lsn

    @max_lsn.setter
    def max_lsn(self, uint64_t v):
        self._max_lsn = v

    @property
    def k(self):
        """Number of probes per key."""
        return self._k

    @property
    def nbits(self):
        return BLOOM_NBITS

    @property
    def expected_elements(self):
        return self._expected

    def fill_ratio(self):
        """Fraction of bits set."""
        return int(np.unpackbits(np.frombuffer(self._bits[:BLOOM_BITS_BYTES], np.uint8)).sum()) / BLOOM_NBITS

    # -- the on-disk block --

    def to_bytes(self):
        """The 4096-byte block: header (table_id, min_lsn, max_lsn, bits_size, crc32c) then bits."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, BLOOM_BLOCK_SIZE)
        bloom_write_block(self._bits, self._table_id, self._min_lsn, self._max_lsn,
                          <uint8_t*>PyBytes_AS_STRING(out))
        return out

    @classmethod
    def from_bytes(cls, data, Py_ssize_t expected_elements=BLOOM_DEFAULT_ELEMENTS):
        """Parse a 4096-byte block; raises CorruptBlockError on a wrong size or a CRC mismatch."""
        cdef const uint8_t[::1] view
        try:
            view = memoryview(data).cast("B")
        except TypeError:
            raise TypeError(f"Bloom4K.from_bytes needs bytes, not {type(data).__name__}") from None
        if view.shape[0] != BLOOM_BLOCK_SIZE:
            raise CorruptBlockError(f"bloom block must be {BLOOM_BLOCK_SIZE} bytes, got {view.shape[0]}")
        table_id, min_lsn, max_lsn, bits_size, stored = _HEADER.unpack_from(view, 0)
        computed = _block_crc(&view[0])
        if computed != stored:
            raise CorruptBlockError(
                f"bloom block of table {table_id}: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")
        if bits_size != BLOOM_NBITS:
            raise CorruptBlockError(f"bloom block of table {table_id}: bits_size {bits_size}, expected {BLOOM_NBITS}")
        cdef Bloom4K b = cls(table_id, min_lsn, max_lsn, expected_elements)
        memcpy(b._bits, &view[BLOOM_HEADER_SIZE], BLOOM_BITS_BYTES)
        return b

    def __eq__(self, other):
        if not isinstance(other, Bloom4K):
            return NotImplemented
        return self.to_bytes() == (<Bloom4K>other).to_bytes() and self._k == (<Bloom4K>other)._k

    def __repr__(self):
        return (f"Bloom4K(table_id={self._table_id}, min_lsn={self._min_lsn}, max_lsn={self._max_lsn}, "
                f"k={self._k}, fill={self.fill_ratio():.3f})")

    def __reduce__(self):
        return (_from_state, (self.to_bytes(), self._expected))


def _from_state(data, expected):
    return Bloom4K.from_bytes(data, expected)


cdef uint32_t _block_crc(const uint8_t* block) noexcept nogil:
    """CRC-32C over the header before the crc field, then the bits."""
    cdef uint32_t c = crc32c_update(0, block, 28)
    return crc32c_update(c, block + BLOOM_HEADER_SIZE, BLOOM_BITS_BYTES)


cdef void bloom_write_block(const uint8_t* bits, uint64_t table_id, uint64_t min_lsn, uint64_t max_lsn,
                            uint8_t* out) noexcept nogil:
    # the header as _HEADER packs it: table_id, min_lsn, max_lsn, bits_size, crc32c (little-endian)
    put_le(out, table_id, 8)
    put_le(out + 8, min_lsn, 8)
    put_le(out + 16, max_lsn, 8)
    put_le(out + 24, BLOOM_NBITS, 4)
    memcpy(out + BLOOM_HEADER_SIZE, bits, BLOOM_BITS_BYTES)
    put_le(out + 28, _block_crc(out), 4)


cdef void bloom_add_tags(uint8_t* bits, int k, const uint8_t* const* tags, Py_ssize_t n) noexcept nogil:
    _set_tags(bits, k, tags, n)


cdef const uint8_t[::1] _as_view(object key):
    if isinstance(key, str):
        raise TypeError("Bloom4K keys are bytes or PageTags; encode str keys first")
    try:
        return memoryview(key).cast("B")
    except TypeError:
        raise TypeError(f"Bloom4K keys are bytes-like or PageTags, not {type(key).__name__}") from None
