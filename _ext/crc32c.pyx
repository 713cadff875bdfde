# cython: language_level=3
"""CRC-32C: SSE4.2 instruction where the CPU has it, slicing-by-8 tables otherwise."""
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy
cimport cython

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    #include <string.h>
    #if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    #define LT_HAVE_SSE42_PATH 1
    __attribute__((target("sse4.2")))
    static uint32_t lt_crc32c_sse42(uint32_t state, const uint8_t *p, size_t n) {
        while (n && ((uintptr_t)p & 7)) { state = __builtin_ia32_crc32qi(state, *p++); n--; }
    #if defined(__x86_64__)
        uint64_t s = state;
        while (n >= 8) { uint64_t v; memcpy(&v, p, 8); s = __builtin_ia32_crc32di(s, v); p += 8; n -= 8; }
        state = (uint32_t)s;
    #endif
        while (n--) state = __builtin_ia32_crc32qi(state, *p++);
        return state;
    }
    static int lt_cpu_has_sse42(void) { __builtin_cpu_init(); return __builtin_cpu_supports("sse4.2"); }
    #else
    #define LT_HAVE_SSE42_PATH 0
    static uint32_t lt_crc32c_sse42(uint32_t state, const uint8_t *p, size_t n) { (void)p; (void)n; return state; }
    static int lt_cpu_has_sse42(void) { return 0; }
    #endif
    """
    uint32_t lt_crc32c_sse42(uint32_t state, const uint8_t* p, size_t n) nogil
    int lt_cpu_has_sse42() nogil


cdef uint32_t _table[8][256]
cdef bint _hw = False


cdef void _init_tables() noexcept:
    cdef uint32_t c
    cdef int i, j
    for i in range(256):
        c = i
        for j in range(8):
            c = (c >> 1) ^ (0x82F63B78 if (c & 1) else 0)  # reflected Castagnoli polynomial
        _table[0][i] = c
    for i in range(256):
        for j in range(1, 8):
            _table[j][i] = (_table[j - 1][i] >> 8) ^ _table[0][_table[j - 1][i] & 0xFF]


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline uint32_t _crc_sw(uint32_t state, const uint8_t* p, size_t n) noexcept nogil:
    cdef uint64_t v
    while n >= 8:
        memcpy(&v, p, 8)
        v ^= state  # little-endian: the state folds into the first four bytes
        state = (_table[7][v & 0xFF] ^ _table[6][(v >> 8) & 0xFF] ^
                 _table[5][(v >> 16) & 0xFF] ^ _table[4][(v >> 24) & 0xFF] ^
                 _table[3][(v >> 32) & 0xFF] ^ _table[2][(v >> 40) & 0xFF] ^
                 _table[1][(v >> 48) & 0xFF] ^ _table[0][v >> 56])
        p += 8
        n -= 8
    while n:
        state = (state >> 8) ^ _table[0][(state ^ p[0]) & 0xFF]
        p += 1
        n -= 1
    return state


cdef uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t length) noexcept nogil:
    cdef uint32_t state = ~crc
    if _hw:
        state = lt_crc32c_sse42(state, data, length)
    else:
        state = _crc_sw(state, data, length)
    return ~state


_init_tables()
_hw = lt_cpu_has_sse42() != 0


def crc32c(data, crc=0):
    """CRC-32C of a bytes-like object, continuing from `crc` (like zlib.crc32)."""
    cdef const uint8_t[::1] view
    cdef uint32_t c = crc
    cdef const uint8_t* p
    cdef size_t n
    if isinstance(data, bytes):
        p = <const uint8_t*><char*>data
        n = len(<bytes>data)
        with nogil:
            c = crc32c_update(c, p, n)
        return c
    view = memoryview(data).cast("B")
    if view.shape[0]:
        with nogil:
            c = crc32c_update(c, &view[0], view.shape[0])
    return c


def crc32c_software(data, crc=0):
    """The table-driven path, always; the hardware path is tested against it."""
    cdef const uint8_t[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return crc
    return ~_crc_sw(~(<uint32_t>crc), &view[0], view.shape[0]) & 0xFFFFFFFF


def hardware_accelerated():
    """True when CRC-32C uses the CPU's crc32 instruction."""
    return _hw
