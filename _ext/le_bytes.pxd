# Little-endian fields of the on-disk headers that struct packs with "<" (memtable images, bloom
# blocks, table slots), written byte by byte so they are little-endian on every platform.
from libc.stdint cimport uint8_t, uint64_t

cdef inline void put_le(uint8_t* p, uint64_t v, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        p[i] = (v >> (8 * i)) & 0xFF
