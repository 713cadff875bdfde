from libc.stdint cimport uint8_t, uint32_t, uint64_t

# One LogIndex bloom block: 32-byte header + 4064 bytes of bits = 4096 bytes on disk.
cdef enum:
    BLOOM_BLOCK_SIZE = 4096
    BLOOM_HEADER_SIZE = 32
    BLOOM_BITS_BYTES = 4064           # BLOOM_BLOCK_SIZE - BLOOM_HEADER_SIZE
    BLOOM_NBITS = 32512               # BLOOM_BITS_BYTES * 8
    BLOOM_DEFAULT_ELEMENTS = 819
    BLOOM_MAX_K = 10                  # PolarDB/PostgreSQL cap on probes

cdef class Bloom4K:
    cdef uint8_t _bits[BLOOM_BITS_BYTES]
    cdef uint64_t _table_id
    cdef uint64_t _min_lsn
    cdef uint64_t _max_lsn
    cdef int _k
    cdef Py_ssize_t _expected
    cdef void add_raw(self, const uint8_t* key, Py_ssize_t length) noexcept nogil
    cdef bint contains_raw(self, const uint8_t* key, Py_ssize_t length) noexcept nogil


# For writers that run without the GIL (the LogIndex table writer): set the bits of n 20-byte
# PageTags (tags[i] points at one) in a bloom's bit array, and lay out the 4096-byte block of
# (bits, header fields) at out, CRC included.
cdef void bloom_add_tags(uint8_t* bits, int k, const uint8_t* const* tags, Py_ssize_t n) noexcept nogil
cdef void bloom_write_block(const uint8_t* bits, uint64_t table_id, uint64_t min_lsn, uint64_t max_lsn,
                            uint8_t* out) noexcept nogil
