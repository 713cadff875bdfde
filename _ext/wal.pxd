# The log service's record framing, shared by the writer, the reader and recovery.
# One frame: [u32 length][u32 crc32c][u64 lsn][u32 type][data], little-endian.
# `length` is len(data); the CRC covers length, lsn, type and data (every byte but itself).
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from logtide._ext.crc32c cimport crc32c_update

cdef enum:
    WAL_HEADER_SIZE = 20
    WAL_OFF_LENGTH = 0
    WAL_OFF_CRC = 4
    WAL_OFF_LSN = 8
    WAL_OFF_TYPE = 16

# scan outcomes: why a scan stopped
cdef enum:
    SCAN_OK = 0            # clean end of buffer, or the record limit was reached
    SCAN_SHORT_HEADER = 1  # fewer than 20 bytes left
    SCAN_SHORT_DATA = 2    # the header promises more data than the buffer holds
    SCAN_BAD_LENGTH = 3    # length beyond the configured maximum record size
    SCAN_BAD_CRC = 4       # checksum mismatch
    SCAN_BAD_LSN = 5       # LSN out of sequence
    SCAN_SIZE_LIMIT = 6    # stopped because the byte budget was spent


# Frame helpers shared by the codec (wal.pyx) and the append queue (commit_queue.pyx).
cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    memcpy(p, &v, 4)  # the format is little-endian, like every platform logtide builds on


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    memcpy(p, &v, 8)


cdef inline uint32_t _get32(const uint8_t* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v


cdef inline uint64_t _get64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v


cdef inline bint _all_zero(const uint8_t* p, size_t n) noexcept nogil:
    """Whether n bytes at p are all zero (a pre-allocated, never written region)."""
    cdef uint64_t acc = 0, w
    cdef size_t i = 0
    while i + 8 <= n:
        memcpy(&w, p + i, 8)
        acc |= w
        if acc:
            return False
        i += 8
    while i < n:
        acc |= p[i]
        i += 1
    return acc == 0


cdef inline uint32_t _frame_crc_start(const uint8_t* frame, size_t data_bytes) noexcept nogil:
    """The frame CRC over its length, LSN and type fields and the first data_bytes of its data:
    the whole frame CRC with data_bytes = length, or a start that crc32c_combine finishes."""
    cdef uint32_t c = crc32c_update(0, frame, 4)
    return crc32c_update(c, frame + WAL_OFF_LSN, 12 + data_bytes)


cdef inline uint32_t _frame_crc(const uint8_t* frame, uint32_t length) noexcept nogil:
    return _frame_crc_start(frame, length)


cdef inline void put_frame(uint8_t* f, uint64_t lsn, uint32_t rtype, const uint8_t* prefix, size_t plen,
                           const uint8_t* data, size_t dlen) noexcept nogil:
    """Write one complete frame at f (20 + plen + dlen bytes): header, prefix + data, CRC."""
    cdef uint32_t length = <uint32_t>(plen + dlen)
    _put32(f + WAL_OFF_LENGTH, length)
    _put64(f + WAL_OFF_LSN, lsn)
    _put32(f + WAL_OFF_TYPE, rtype)
    if plen:
        memcpy(f + WAL_HEADER_SIZE, prefix, plen)
    if dlen:
        memcpy(f + WAL_HEADER_SIZE + plen, data, dlen)
    _put32(f + WAL_OFF_CRC, _frame_crc(f, length))
