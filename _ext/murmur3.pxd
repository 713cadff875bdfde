# MurmurHash3 x64-128, shared by every module that hashes PageTags (bloom4k, memtable, spark
# partitioning). Inline, so a cimport costs no cross-module call on the hot path.
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef extern from *:
    """
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #define LT_LE64(x) __builtin_bswap64(x)
    #define LT_LE32(x) __builtin_bswap32(x)
    #else
    #define LT_LE64(x) (x)
    #define LT_LE32(x) (x)
    #endif
    """
    uint64_t LT_LE64(uint64_t x) nogil
    uint32_t LT_LE32(uint32_t x) nogil

cdef inline uint64_t _rotl64(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))

cdef inline uint64_t _fmix64(uint64_t k) noexcept nogil:
    k ^= k >> 33
    k *= 0xff51afd7ed558ccdULL
    k ^= k >> 33
    k *= 0xc4ceb9fe1a85ec53ULL
    k ^= k >> 33
    return k

cdef inline uint64_t _load64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)  # unaligned-safe; compiles to one load
    return LT_LE64(v)

cdef inline uint64_t _load_partial(const uint8_t* p, int n) noexcept nogil:
    """n < 8 bytes as a little-endian integer, in at most three loads."""
    cdef uint64_t v = 0
    cdef uint32_t w32
    cdef int off = 0
    if n & 4:
        memcpy(&w32, p, 4)
        v = LT_LE32(w32)
        off = 4
    if n & 2:
        v |= (<uint64_t>p[off] | (<uint64_t>p[off + 1] << 8)) << (8 * off)
        off += 2
    if n & 1:
        v |= (<uint64_t>p[off]) << (8 * off)
    return v

cdef inline void murmur3_x64_128(const uint8_t* data, Py_ssize_t length, uint32_t seed,
                                 uint64_t* out) noexcept nogil:
    """out[0] = h1 (low 64 bits), out[1] = h2 (high 64 bits)."""
    cdef uint64_t c1 = 0x87c37b91114253d5ULL
    cdef uint64_t c2 = 0x4cf5ad432745937fULL
    cdef uint64_t h1 = seed, h2 = seed, k1, k2
    cdef Py_ssize_t nblocks = length >> 4, i
    cdef const uint8_t* tail
    for i in range(nblocks):
        k1 = _load64(data + 16 * i)
        k2 = _load64(data + 16 * i + 8)
        k1 *= c1; k1 = _rotl64(k1, 31); k1 *= c2; h1 ^= k1
        h1 = _rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729
        k2 *= c2; k2 = _rotl64(k2, 33); k2 *= c1; h2 ^= k2
        h2 = _rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5
    tail = data + 16 * nblocks
    k1 = 0
    k2 = 0
    cdef int rem = <int>(length & 15)
    # tail bytes 8..14 feed k2 and bytes 0..7 feed k1, little-endian
    if rem > 8:
        k2 = _load_partial(tail + 8, rem - 8)
        k2 *= c2; k2 = _rotl64(k2, 33); k2 *= c1; h2 ^= k2
    if rem >= 8:
        k1 = _load64(tail)
    elif rem > 0:
        k1 = _load_partial(tail, rem)
    if rem > 0:
        k1 *= c1; k1 = _rotl64(k1, 31); k1 *= c2; h1 ^= k1
    h1 ^= <uint64_t>length
    h2 ^= <uint64_t>length
    h1 += h2
    h2 += h1
    h1 = _fmix64(h1)
    h2 = _fmix64(h2)
    h1 += h2
    h2 += h1
    out[0] = h1
    out[1] = h2
