# cython: language_level=3
"""InsertPath: the per-call `LogIndex.insert(tag, lsn)` in one Cython call.

The common insert (an LSN above every saved LSN and above any record split by a memtable switch,
into the active memtable, which has room and the same LSN prefix) is done here: parse the tag,
check the order, insert into the memtable, count. Everything else (the first insert, rows already
saved, a full memtable or a prefix change, hence the ring and the flushes; bad input) goes to the
manager's Python slow path, which re-arms this object with the state it leaves behind.

    ip = InsertPath(slow)                 # slow(tag, lsn) -> bool: LogIndex._insert_slow
    ip.arm(active_memtable_or_None, guard)   # LSNs <= guard (-1: none) take the slow path
    ip.insert(tag, lsn) -> bool           # True when stored, False when already there / saved
"""
from cpython.long cimport PyLong_AsUnsignedLongLong, PyLong_CheckExact
from libc.stdint cimport uint32_t, uint64_t

from logtide._ext.memtable cimport Memtable, tag_fields, tag_slot, MT_INSERTED, MT_DUPLICATE


cdef class InsertPath:
    """The armed fast path of one LogIndex (single-threaded, like the LogIndex)."""
    cdef Memtable active            # None: every insert takes the slow path
    cdef uint64_t guard
    cdef bint guarded
    cdef public uint64_t last_lsn   # the last indexed LSN (the manager's too)
    cdef public uint64_t inserted   # rows stored (the manager's slow path adds its own)
    cdef object slow

    def __cinit__(self, slow):
        self.slow = slow

    def arm(self, Memtable active, guard: int) -> None:
        """Insert into `active` (None: disarm); LSNs <= guard (when guard >= 0) take the slow path."""
        self.active = active
        self.guarded = guard >= 0
        self.guard = guard if guard >= 0 else 0

    def insert(self, tag, lsn):
        """Index that the record at lsn touched page tag. False when it was already indexed or saved."""
        cdef uint32_t t[5]
        cdef uint64_t l
        cdef int rc
        if self.active is None or not PyLong_CheckExact(lsn):
            return self.slow(tag, lsn)  # disarmed, or an LSN to validate there
        try:
            l = PyLong_AsUnsignedLongLong(lsn)
        except OverflowError:
            return self.slow(tag, lsn)
        if l < self.last_lsn or (self.guarded and l <= self.guard):
            return self.slow(tag, lsn)
        tag_fields(tag, t)
        rc = self.active.insert_raw(t, tag_slot(t), l)
        if rc == MT_INSERTED:
            self.last_lsn = l
            self.inserted += 1
            return True
        if rc == MT_DUPLICATE:
            self.last_lsn = l
            return False
        return self.slow(tag, lsn)  # full, prefix change: the manager switches memtables
