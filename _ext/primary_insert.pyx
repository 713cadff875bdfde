# cython: language_level=3
"""SingleInsert: the primary's single-tuple insert, from page choice to queued record, in one call.

    path = SingleInsert(heap)                        # the primary's HeapAccess (replay/heap_access.py)
    ticket, block, offnum = path.insert(rel, tup)    # then heap.committer.wait(ticket)
    block, offnum = path.insert_durable(rel, tup)    # the same, and that wait, in one call

Under the primary's WAL insert lock: the relation's last block if the tuple fits there (pinned on a
buffer-pool hit without leaving C), else a new block; under the page's stripe lock the tuple and its
WAL record (_ext/heap_insert.pyx), the frame marked dirty, the record queued with the pipelined
committer (from C: pipelined_core.pxd). The same locks, in the same order, and the same page and
record bytes as HeapAccess's Python steps; a buffer-pool miss, a waiting pin and every error go
through the pool's and HeapAccess's own Python code.
"""
cimport cython
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t

from logtide._ext.heap_insert cimport insert_into
from logtide._ext.page cimport (ITEM_ID_SIZE, MAX_TUPLE_SIZE, PAGE_ALIGN, PD_LOWER, PD_UPPER, page_is_new,
                                rd16)
from logtide._ext.pipelined_core cimport PipelinedCore

cdef enum:
    DIRTY = 2          # buffer_pool.DIRTY
    USAGE_MAX = 3      # the clock sweep's usage ceiling (buffer_pool.pin)
    SPC = 1663         # row_address.SPC
    DB = 5             # row_address.DB


cdef inline bint fits(const uint8_t* page, Py_ssize_t length) noexcept nogil:
    # page.fits: an initialized page with room for the tuple and a new slot
    if page_is_new(page) or length <= 0 or length > MAX_TUPLE_SIZE:
        return False
    return ((length + PAGE_ALIGN - 1) & ~(PAGE_ALIGN - 1)) + ITEM_ID_SIZE <= \
        <int>rd16(page + PD_UPPER) - <int>rd16(page + PD_LOWER)


cdef class SingleInsert:
    """One primary's single-tuple insert path (pipelined committer only)."""
    cdef uint8_t[:, ::1] frames
    cdef int32_t[::1] pins
    cdef uint8_t[::1] usage, state
    cdef uint64_t[::1] version, rec_lsn
    cdef dict table, rel_blocks
    cdef list page_locks
    cdef Py_ssize_t stripes
    cdef object primary, pool, locks, load, check
    cdef PipelinedCore committer
    # bound methods of the locks: one C call each, no attribute lookup
    cdef object pool_acquire, pool_release, wal_acquire, wal_release

    def __cinit__(self, primary):
        pool = primary.pool
        self.primary, self.pool, self.pool_acquire, self.pool_release = primary, pool, pool.lock.acquire, pool.lock.release
        self.frames, self.pins, self.usage, self.state = pool.frames, pool.pins, pool.usage, pool.state
        self.version, self.rec_lsn, self.table = pool.version, pool.rec_lsn, pool.table
        self.rel_blocks, self.load, self.check = primary._rel_blocks, primary._load, primary._check
        self.wal_acquire, self.wal_release = primary._wal_lock.acquire, primary._wal_lock.release
        self.locks = primary.locks
        self.page_locks, self.stripes = self.locks.page_locks, self.locks.stripes
        self.committer = primary.committer     # a PipelinedCore: queued from C

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef Py_ssize_t pin(self, tuple tag) except -1:
        cdef object hit
        cdef Py_ssize_t f
        self.pool_acquire()
        try:
            hit = self.table.get(tag)
            if hit is not None:
                f = hit
                self.pins[f] += 1
                if self.usage[f] < USAGE_MAX:
                    self.usage[f] += 1
                self.pool.hits += 1
                return f
        finally:
            self.pool_release()
        return self.pool.pin(tag, self.load)[0]   # a miss: the pool loads (or evicts) in Python

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int unpin(self, Py_ssize_t f) except -1:
        cdef int32_t n
        self.pool_acquire()
        try:
            n = self.pins[f]
            if n <= 0 or self.pool.waiters:
                self.pool.unpin(f)   # the pool raises, or notifies its waiters (an RLock: re-entered)
            else:
                self.pins[f] = n - 1
        finally:
            self.pool_release()
        return 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int mark_dirty(self, Py_ssize_t f, uint64_t lsn) except -1:
        cdef uint8_t st
        self.pool_acquire()
        try:
            st = self.state[f]
            if not st & DIRTY:
                self.rec_lsn[f] = lsn
                self.state[f] = st | DIRTY
            self.version[f] += 1
        finally:
            self.pool_release()
        return 0

    cdef object stripe_lock(self, uint32_t rel, uint32_t block):
        # mini_trans.MiniTransLocks._stripe of (SPC, DB, rel, 0, block): no overflow below 2**63
        cdef uint64_t h = <uint64_t>SPC * 1 + <uint64_t>DB * 17 + <uint64_t>rel * 7919 + <uint64_t>block * 104729
        return self.page_locks[<Py_ssize_t>(h % <uint64_t>self.stripes)]

    def insert(self, relobj, tupobj) -> tuple:
        """Apply and queue one insert of tuple `tupobj` into relation `relobj`: (ticket, block, offnum).
        Input that is not a u32 int and a bytes tuple of 1..MAX_TUPLE_SIZE bytes, or a closed
        primary, goes through the primary's own checks (which raise its typed errors)."""
        cdef uint64_t ticket = 0
        res = self._insert(relobj, tupobj, &ticket)
        return ticket, res[0], res[1]

    def insert_durable(self, relobj, tupobj) -> tuple:
        """insert, then wait (no lock held) until the record is durable and published: (block, offnum)."""
        cdef uint64_t ticket = 0
        res = self._insert(relobj, tupobj, &ticket)
        self.committer.wait_c(ticket)
        return res

    cdef tuple _insert(self, object relobj, object tupobj, uint64_t* ticket_out):
        """insert: (block, offnum), the ticket in *ticket_out."""
        cdef Py_ssize_t f = -1, size
        cdef uint32_t rel
        cdef bytes tup
        cdef object nobj, lk, xid, rec
        cdef Py_ssize_t n, block
        cdef bint init = False
        cdef uint64_t lsn, ticket = 0
        cdef tuple tag, res
        p = self.primary
        if (type(relobj) is int and 0 <= relobj <= 0xFFFFFFFF and type(tupobj) is bytes
                and 1 <= len(<bytes>tupobj) <= MAX_TUPLE_SIZE and p._closed is False):
            tup = <bytes>tupobj
        else:
            tup = self.check(relobj, tupobj)
        rel, size = relobj, len(tup)
        self.wal_acquire()
        try:
            nobj = self.rel_blocks.get(rel)
            n = 0 if nobj is None else nobj
            if n:
                f = self.pin((SPC, DB, rel, 0, n - 1))
                if fits(&self.frames[f, 0], size):
                    block = n - 1
                else:
                    self.unpin(f)
                    f = -1
            if f < 0:
                block, init = n, True
                self.rel_blocks[rel] = n + 1
            tag = (SPC, DB, rel, 0, block)
            lk = self.stripe_lock(rel, <uint32_t>block)
            if not lk.acquire(False):
                self.locks.waits += 1
                lk.acquire()
            try:
                if f < 0:
                    f = self.pin(tag)
                lsn = p._assigned_lsn + 1
                xid = p._xid
                p._xid = xid + 1
                res = insert_into(&self.frames[f, 0], tag, tup, <uint32_t>(xid & 0xFFFFFFFF), lsn, init)
                rec = res[1]
                self.mark_dirty(f, lsn)
                ticket = self.committer.enqueue_c(rec, (rec, [tag]))
                if ticket != lsn:
                    p._log_mismatch(ticket, lsn)
                p._assigned_lsn = lsn
            finally:
                lk.release()
        finally:
            try:
                if f >= 0:
                    self.unpin(f)
            finally:
                self.wal_release()
        ticket_out[0] = ticket
        return block, res[0]
