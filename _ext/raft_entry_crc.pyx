# cython: language_level=3
"""The CRC-32C of a Raft entry on the wire (engine/raft/wire.py): over its key (term, index and
type, packed as struct ">QQB" packs them), then over its data.

It runs with the GIL held: an entry is a few hundred bytes, and a leader checksums every entry it
sends, so releasing the GIL around each one would hand the GIL to the event loop's thread (and
wait to get it back) once per entry.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from logtide._ext.crc32c cimport crc32c_update


cdef inline void _put_be64(uint8_t* p, uint64_t v) noexcept nogil:
    cdef int k
    for k in range(8):
        p[k] = <uint8_t>(v >> (56 - 8 * k))


def entry_crc(uint64_t term, uint64_t index, uint8_t etype, data) -> int:
    """crc32c(data, crc32c(pack(">QQB", term, index, etype))) of a bytes-like `data`."""
    cdef uint8_t key[17]
    cdef const uint8_t[::1] view
    cdef uint32_t c
    _put_be64(key, term)
    _put_be64(key + 8, index)
    key[16] = etype
    c = crc32c_update(0, key, 17)
    if type(data) is bytes:
        return crc32c_update(c, <const uint8_t*>PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
    view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return c
    return crc32c_update(c, &view[0], <size_t>view.shape[0])
