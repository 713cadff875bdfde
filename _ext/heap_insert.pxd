from libc.stdint cimport uint8_t, uint32_t, uint64_t

# the single-tuple insert into one page, with its WAL record: (offnum, record)
cdef tuple insert_into(uint8_t* page, tag, const uint8_t[::1] tup, uint32_t xid, uint64_t lsn, bint init)
