# CRC-32C (Castagnoli), the checksum of every logtide format and of PostgreSQL's WAL.
from libc.stdint cimport uint8_t, uint32_t

# Chainable like zlib.crc32: crc32c_update(crc32c_update(0, a), b) == crc of a+b.
cdef uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t length) noexcept nogil
