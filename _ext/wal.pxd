# The log service's record framing, shared by the writer, the reader and recovery.
# One frame: [u32 length][u32 crc32c][u64 lsn][u32 type][data], little-endian.
# `length` is len(data); the CRC covers length, lsn, type and data (every byte but itself).
from libc.stdint cimport uint8_t, uint32_t, uint64_t

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
