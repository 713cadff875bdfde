# A growing buffer of complete log frames (wal.pxd's framing) with each frame's offset: what the
# commit queue's appenders fill and its flusher writes with one call.
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memset

from logtide._ext.wal cimport WAL_HEADER_SIZE, put_frame


cdef struct FrameBuf:
    uint8_t* data
    size_t len, cap
    uint64_t* starts      # each frame's offset in data
    Py_ssize_t n, ncap


cdef inline int fb_reserve(FrameBuf* b, size_t nbytes, Py_ssize_t frames) noexcept nogil:
    """Room for nbytes more bytes and frames more frames; -1 when memory is out."""
    cdef size_t cap
    cdef Py_ssize_t ncap
    cdef void* p
    if b.len + nbytes > b.cap:
        cap = b.cap * 2 if b.cap else 65536
        while cap < b.len + nbytes:
            cap *= 2
        p = realloc(b.data, cap)
        if p == NULL:
            return -1
        b.data, b.cap = <uint8_t*>p, cap
    if b.n + frames > b.ncap:
        ncap = b.ncap * 2 if b.ncap else 1024
        while ncap < b.n + frames:
            ncap *= 2
        p = realloc(b.starts, ncap * sizeof(uint64_t))
        if p == NULL:
            return -1
        b.starts, b.ncap = <uint64_t*>p, ncap
    return 0


cdef inline void fb_put(FrameBuf* b, uint64_t lsn, uint32_t rtype, const uint8_t* pre, size_t plen,
                        const uint8_t* data, size_t dlen) noexcept nogil:
    """Append one frame (data = pre + data) in room fb_reserve made."""
    put_frame(b.data + b.len, lsn, rtype, pre, plen, data, dlen)
    b.starts[b.n] = b.len
    b.n += 1
    b.len += WAL_HEADER_SIZE + plen + dlen


cdef inline void fb_clear(FrameBuf* b) noexcept nogil:
    b.len = 0
    b.n = 0


cdef inline void fb_free(FrameBuf* b) noexcept nogil:
    free(b.data)
    free(b.starts)
    memset(b, 0, sizeof(FrameBuf))


cdef inline void fb_trim(FrameBuf* b, size_t keep) noexcept nogil:
    """Free the buffer when it grew past `keep` bytes (a huge append is not kept for ever)."""
    if b.cap > keep:
        fb_free(b)
