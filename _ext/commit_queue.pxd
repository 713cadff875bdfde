# The commit queue's declarations, for a writer that queues and waits from C (the pipelined
# committer, _ext/pipelined_core.pyx): enqueue_record and wait_published are enqueue_one and
# wait_durable without their Python calls. See commit_queue.pyx.
cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from logtide._ext.frame_buffer cimport FrameBuf
from logtide._ext.futex cimport lt_mutex
from logtide._ext.segment_prealloc cimport Prealloc
from logtide._ext.waiter_list cimport WaitList, lt_waiter


@cython.final
cdef class CommitQueue:
    cdef lt_mutex mu
    cdef FrameBuf fill      # appenders write here
    cdef FrameBuf out       # the group the flusher is writing
    cdef uint64_t next_lsn
    cdef uint64_t published
    cdef Py_ssize_t appends         # appends in fill
    cdef WaitList waiters
    cdef int state
    cdef object failure
    # the flusher: its futex word (bumped to wake it), whether it sleeps (timed: its sleep ends by
    # itself within the commit delay), a sync() request, and the commit delay's group forming
    cdef int fl_word
    cdef bint fl_sleeping
    cdef bint fl_timed
    cdef bint kicked
    cdef Py_ssize_t want            # commit delay: appends the flusher waits for (0: none)
    cdef Py_ssize_t last_groups[2]
    cdef double fsync_avg
    cdef double spin_max            # a woken appender's longest spin for the GIL (set_spin_limit)
    cdef bint patient               # past the spin, a woken appender yields and waits on (set_spin_limit)
    cdef readonly double max_commit_delay
    cdef readonly uint64_t groups, records
    cdef readonly uint64_t naps     # times the flusher napped for an expected group (see _take)
    # the futex words the waiters of the filling group sleep on: one per group
    # parity, since only the group in the flusher's hands and the one filling have waiters
    cdef int gword[2]
    cdef uint64_t fill_gen
    cdef Prealloc zero              # the current segment's pre-allocation (see prefill)
    cdef object user_slow           # append_user's general path (a weak method of the LogService)
    cdef Py_ssize_t user_max        # the largest payload append_user frames itself
    # The bound segment (bind_index): run() and lone appenders write at wend and index there.
    cdef uint64_t out_first         # the first LSN of the group in `out`
    cdef bint busy                  # the flusher holds a group (from taking it to its next _take)
    cdef bint solo                  # a lone appender is writing its own record (see _append)
    cdef int wfd
    cdef uint64_t wend              # the segment's logical end: where the next frame goes
    cdef uint64_t* idx              # its frame offsets (a numpy array's data), icap entries
    cdef Py_ssize_t icap
    cdef uint64_t* icount           # its frame count (a numpy uint64[1] cell): entries below are final
    cdef object idx_owner, cnt_owner
    cdef uint64_t roll_at, mark_at  # an end reaching either goes through the flusher's Python
    cdef uint64_t durable           # written and indexed (readers see up to here)
    cdef uint64_t synced            # fdatasync'ed
    cdef bint sync_always, direct
    cdef double batch_interval, unsynced_since
    cdef FrameBuf solo_buf
    cdef readonly uint64_t direct_writes  # appends a lone appender wrote itself
    cdef readonly uint64_t groups_here    # groups a caller of commit_here wrote itself (also in groups)
    # notify_durable: an eventfd written once `published` reaches dur_at (0: none armed), or on a failure
    cdef int dur_fd
    cdef uint64_t dur_at

    # queue now, wait later (the pipelined committer's calls)
    cdef uint64_t enqueue_record(self, uint32_t rtype, const uint8_t* pre, size_t plen, const uint8_t* src,
                                 size_t dlen) except? 0
    cdef uint64_t wait_published(self, uint64_t lsn) except? 0

    cdef int _refuse(self) except -1
    cdef bint _enqueue_locked(self, lt_waiter* w) noexcept nogil
    cdef bint _count_append_locked(self) noexcept nogil
    cdef Py_ssize_t _swap_fill_locked(self, FrameBuf* into) noexcept nogil
    cdef bint _idle_for_locked(self, Py_ssize_t n, uint64_t end) noexcept nogil
    cdef bint _rouse_locked(self) noexcept nogil
    cdef lt_waiter* _end_solo(self, uint64_t last, Py_ssize_t n, int err, uint64_t* counter) noexcept nogil
    cdef uint64_t _lock_reserve(self, size_t total, Py_ssize_t n) except? 0
    cdef uint64_t _wait(self, lt_waiter* w, bint wake) except? 0
    cdef uint64_t _append(self, uint32_t rtype, const uint8_t* pre, size_t plen, const uint8_t* src,
                          size_t dlen) except? 0
    cdef uint64_t _append_solo(self, uint32_t rtype, const uint8_t* pre, size_t plen, const uint8_t* src,
                               size_t dlen, size_t size) except? 0
    cdef int _take(self, double timeout, bint sync) noexcept nogil
    cdef bint _sync_due(self, double now) noexcept nogil
    cdef int _write_at(self, int fd, const uint8_t* data, size_t n, uint64_t base, bint sync) noexcept nogil
    cdef object _group(self, uint64_t base)
    cdef void _publish_now(self, uint64_t lsn) noexcept nogil
    cdef void _set_durable_locked(self, uint64_t lsn, bint synced, double now) noexcept nogil
    cdef lt_waiter* _publish_locked(self, uint64_t lsn) noexcept nogil
