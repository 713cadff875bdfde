# The timestamp oracle's counter, callable from C (the TN's small commit takes its ts with `take`).
from libc.stdint cimport uint64_t


cdef class TsoWindow:
    cdef uint64_t next_ts           # the next timestamp handed out
    cdef uint64_t limit             # persisted: every timestamp below it may have been handed out
    cdef uint64_t window
    cdef object reserve, lock
    cdef bint closed

    cdef uint64_t take(self, uint64_t count) except 0
    cdef uint64_t _reserve_and_take(self, uint64_t count) except 0
