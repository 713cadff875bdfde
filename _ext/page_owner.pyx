# cython: language_level=3
"""Page ownership for partitioned replay: a page belongs to partition murmur3(tag) mod P.

The hash is the MurmurHash3 x64-128 of the tag's 20 little-endian bytes with seed 0, low 64 bits
(the h1 that `mmh3.hash64(tag, signed=False)[0]` gives), the same murmur3 the LogIndex uses.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t
cimport cython
import numpy as np
cimport numpy as cnp

from logtide._ext.murmur3 cimport murmur3_x64_128

cnp.import_array()


@cython.boundscheck(False)
@cython.wraparound(False)
def page_owner(const uint32_t[:, ::1] tags, uint32_t partitions):
    """The owning partition of each (n, 5) uint32 PageTag row, as int32[n]."""
    cdef Py_ssize_t n = tags.shape[0], i
    cdef uint64_t h[2]
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if n and tags.shape[1] != 5:
        raise ValueError("tags is an (n, 5) uint32 array")
    out = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] o = out
    with nogil:
        for i in range(n):
            murmur3_x64_128(<const uint8_t*>&tags[i, 0], 20, 0, h)
            o[i] = <int32_t>(h[0] % partitions)
    return out
