# CRC-32C (Castagnoli), the checksum of every logtide format and of PostgreSQL's WAL.
from libc.stdint cimport uint8_t, uint32_t, uint64_t

# Chainable like zlib.crc32: crc32c_update(crc32c_update(0, a), b) == crc of a+b.
cdef uint32_t crc32c_update(uint32_t crc, const uint8_t* data, size_t length) noexcept nogil

# The CRC-32C of a + b from those of a and b (zlib's crc32_combine), len2 = len(b).
cpdef uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) noexcept nogil
