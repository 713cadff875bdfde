# cython: language_level=3
"""MurmurHash3 x64-128: per-call and batch forms."""
import numpy as np
from libc.stdint cimport uint8_t, uint32_t, uint64_t
cimport cython

# murmur3_x64_128 comes from murmur3.pxd, which Cython includes into this module by name



cdef uint32_t _seed(object seed) except? 0xFFFFFFFF:
    if not isinstance(seed, int):
        raise TypeError(f"seed must be int, not {type(seed).__name__}")
    if seed < 0 or seed > 0xFFFFFFFF:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    return <uint32_t>seed


def murmur3_128(data, seed=0):
    """MurmurHash3 x64-128 of `data` as an unsigned 128-bit int (h2 << 64 | h1), like mmh3.hash128."""
    cdef uint64_t out[2]
    cdef uint32_t s = _seed(seed)
    cdef const uint8_t[::1] view
    if isinstance(data, str):
        data = (<str>data).encode("utf-8")
    if isinstance(data, bytes):
        murmur3_x64_128(<const uint8_t*><char*>data, len(<bytes>data), s, out)
    else:
        try:
            view = memoryview(data).cast("B")
        except TypeError:
            raise TypeError(f"murmur3_128 needs bytes-like data, not {type(data).__name__}") from None
        if view.shape[0] == 0:
            murmur3_x64_128(<const uint8_t*>b"", 0, s, out)
        else:
            murmur3_x64_128(&view[0], view.shape[0], s, out)
    return (<object>out[1] << 64) | <object>out[0]


def as_key_rows(keys):
    """View an (n, w) array of fixed-width keys as C-contiguous (n, w*itemsize) uint8."""
    arr = np.ascontiguousarray(keys)
    if arr.ndim == 1 and arr.dtype.kind == "S":
        arr = arr.view(np.uint8).reshape(len(arr), arr.dtype.itemsize)
    if arr.ndim != 2:
        raise ValueError(f"keys must be a 2-D (n, width) array, got shape {arr.shape}")
    if arr.dtype.kind not in "uiV" and arr.dtype.kind != "S":
        raise TypeError(f"keys must be an integer or bytes array, got dtype {arr.dtype}")
    return arr.view(np.uint8).reshape(arr.shape[0], arr.shape[1] * arr.dtype.itemsize)


@cython.boundscheck(False)
@cython.wraparound(False)
def murmur3_128_many(keys, seed=0):
    """Hash each row of an (n, w) key array; returns an (n, 2) uint64 array of (h1, h2)."""
    cdef uint32_t s = _seed(seed)
    cdef const uint8_t[:, ::1] rows = as_key_rows(keys)
    cdef Py_ssize_t n = rows.shape[0], w = rows.shape[1], i
    out = np.empty((n, 2), dtype=np.uint64)
    cdef uint64_t[:, ::1] o = out
    if n == 0:
        return out
    with nogil:
        if w == 20:  # PageTags: a constant length lets the compiler unroll the hash
            for i in range(n):
                murmur3_x64_128(&rows[i, 0], 20, s, &o[i, 0])
        else:
            for i in range(n):
                murmur3_x64_128(&rows[i, 0] if w else <const uint8_t*>&o[0, 0], w, s, &o[i, 0])
    return out
