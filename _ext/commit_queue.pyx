# cython: language_level=3
"""CommitQueue: the log service's append queue and durable-LSN waiters, without Python on the wait path.

It is group commit's pipelined mechanism (engine/group_commit) for every appender of the embedded
log. Appenders frame their records straight into the queue's fill buffer (frame_buffer.pxd; LSNs
are assigned there, under a C mutex), register a waiter for their last LSN and sleep, with the GIL
released (waiter_list.pxd). One flusher thread, in `run`, takes the whole fill buffer at once,
writes it with one write() (segment_prealloc.pxd) at the end of the bound segment (`bind_index`: its
fd, offset array and count cell) and, with fsync="always", one fdatasync(), indexes it and publishes
it: exactly the waiters whose LSN is <= the group's last are settled, and woken at once.
All of it runs without the GIL, group after group; `run` returns only what needs Python (a group
that rolls the segment, reaches the pre-allocation `mark` or fills the index, which the caller
indexes and then publishes with `publish(lsn)`). `fail(exc)` wakes every waiter with
LogServiceFailed; `close()` refuses new appends and lets the flusher drain what is queued. With
`configure(direct=True)` (fsync="batch"/"never") an appender that finds the log idle writes and
indexes its own record, without a thread hand-over.

    q = CommitQueue(next_lsn)
    q.append_one(rtype, prefix, payload) -> lsn           # blocks until published
    q.append_many(rtype, prefix, payloads) -> first lsn   # a list of bytes-like, or a 2-D uint8 array
    q.enqueue_one(rtype, prefix, payload) -> lsn; q.wait_durable(lsn)   # queue now, wait later
    q.enqueue_many(rtype, prefixes, payloads) -> first lsn                # a batch, one group
    q.enqueue_many(..., wake=False); q.commit_here() -> written here?     # an event loop's group
    q.notify_durable(lsn, eventfd) -> already?                            # an event loop's wake-up
    q.bind_index(fd, starts, count, end, roll_at); q.configure(sync_always, direct, batch_interval)
    q.run(timeout, publish) -> (first, last, starts, nbytes) for Python | CLOSED | KICKED | TIMEOUT
    q.publish(lsn); q.fail(exc); q.close(); q.kick()

See docs/wal_format.md ("Durability") for the protocol.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.long cimport PyLong_CheckExact
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
cimport cython
import os
import numpy as np
cimport numpy as cnp

from logtide._ext.frame_buffer cimport FrameBuf, fb_clear, fb_free, fb_put, fb_reserve, fb_trim
from logtide._ext.futex cimport (lt_futex_wait, lt_futex_wake, lt_load64, lt_lock, lt_mutex, lt_mutex_destroy, lt_notify,
                                 lt_mutex_init, lt_now, lt_store64, lt_unlock, lt_errno)
from logtide._ext.gil_gate cimport lt_py_enter, lt_py_leave, lt_py_short_holds, lt_spin_bound
from logtide._ext.segment_prealloc cimport (ZERO_CHUNK, Prealloc, fdatasync, prealloc_fill, prealloc_set_segment,
                                            prealloc_write)
from logtide._ext.waiter_list cimport (W_DURABLE, W_FAILED, WaitList, lt_waiter, wl_detach_durable, wl_insert,
                                       wl_link, wl_settle, wl_sleep, wl_take_all)
from logtide._ext.wal cimport WAL_HEADER_SIZE
from logtide.errors import LogServiceClosed, LogServiceFailed

cnp.import_array()


# run() outcomes other than a group
CLOSED = "closed"
KICKED = "kicked"
TIMEOUT = "timeout"

DEF Q_OPEN = 0
DEF Q_CLOSING = 1
DEF Q_FAILED = 2
# seconds a woken appender waits at least (if another is on its way into Python) before it takes
# the GIL; longer, up to its queue's spin_max, when a sleep and a wake cost more on this machine
DEF PY_SPIN_MIN = 5e-6
DEF KEEP_BYTES = 8 << 20         # a flushed buffer larger than this is freed, not kept for reuse


cdef class CommitQueue:
    """The append queue of one log writer. LSNs start at next_lsn. (Its fields: commit_queue.pxd.)"""

    def __cinit__(self, uint64_t next_lsn, double max_commit_delay=0.001):
        lt_mutex_init(&self.mu)
        self.user_max = -1
        lt_mutex_init(&self.zero.mu)
        self.zero.fd = -1
        self.spin_max = PY_SPIN_MIN
        self.next_lsn = next_lsn
        self.published = next_lsn - 1
        self.durable = self.synced = next_lsn - 1
        self.wfd = -1
        self.dur_fd = -1
        self.mark_at = self.roll_at = 1ULL << 63
        self.max_commit_delay = max_commit_delay

    def __dealloc__(self):
        fb_free(&self.fill)
        fb_free(&self.out)
        fb_free(&self.solo_buf)
        free(self.zero.zeros)
        lt_mutex_destroy(&self.mu)
        lt_mutex_destroy(&self.zero.mu)

    @property
    def generation(self) -> int:
        """Bumped by set_segment: which segment a prefill was meant for."""
        return self.zero.generation

    @property
    def published_lsn(self) -> int:
        """The highest LSN published (written, and synced with fsync="always")."""
        return self.published

    @property
    def next(self) -> int:
        """The LSN the next append gets."""
        return self.next_lsn

    # -- appenders --

    cdef int _refuse(self) except -1:
        if self.state == Q_FAILED:
            raise LogServiceFailed.after(self.failure)
        raise LogServiceClosed("the log service is closed")

    cdef bint _enqueue_locked(self, lt_waiter* w) noexcept nogil:
        """Register w (LSN order) and say whether the flusher must be woken (after unlocking). A group
        word is only for a waiter of the filling group (its LSN in `fill`)."""
        wl_link(&self.waiters, w, &self.gword[self.fill_gen & 1])
        return self._count_append_locked()

    cdef bint _count_append_locked(self) noexcept nogil:
        """Count a queued append (with or without a waiter), and say whether the flusher must be woken."""
        self.appends += 1
        # the first append wakes the flusher only if it sleeps unbounded: a flusher expecting a
        # group (want) looks again within the commit delay by itself, so the whole group costs it
        # one wake, by the append that completes it
        if (self.appends == 1 and not self.fl_timed) or self.appends >= self.want:
            return self._rouse_locked()
        return False

    cdef Py_ssize_t _swap_fill_locked(self, FrameBuf* into) noexcept nogil:
        """Under mu: the filling group moves to *into, whose old buffer becomes the empty fill; returns
        the group's appends (reset). The next group's waiters sleep on the other group word."""
        cdef FrameBuf tmp = into[0]
        cdef Py_ssize_t appends = self.appends
        into[0] = self.fill
        self.fill = tmp
        fb_clear(&self.fill)
        self.fill_gen += 1
        self.appends = 0
        return appends

    cdef bint _idle_for_locked(self, Py_ssize_t n, uint64_t end) noexcept nogil:
        """Under mu: may a thread other than the flusher write n frames ending at segment offset
        `end` itself (a lone appender, an event loop)? Only when the log is open and idle (the
        flusher holds no group, no other solo write runs), the frames fit the bound index, and
        the flusher's Python is not needed: no roll, no pre-allocation mark, no sync requested
        or due."""
        return (self.state == Q_OPEN and not self.busy and not self.solo and self.idx != NULL
                and not self.kicked and lt_load64(self.icount) + <uint64_t>n + 1 <= <uint64_t>self.icap
                and end < self.roll_at and end < self.mark_at and not self._sync_due(lt_now()))

    cdef bint _rouse_locked(self) noexcept nogil:
        """Under mu: mark a sleeping flusher as woken; True when it slept (the caller then wakes it
        with lt_futex_wake after unlocking)."""
        if self.fl_sleeping:
            self.fl_sleeping = False
            self.fl_word += 1
            return True
        return False

    cdef lt_waiter* _end_solo(self, uint64_t last, Py_ssize_t n, int err, uint64_t* counter) noexcept nogil:
        """End a solo write (a lone appender's record, an event loop's group) of the n records up to
        `last`: publish them unless err (counting the write in *counter too), and wake the flusher when
        it waits for this write (appends queued behind it, a close, a sync request or a batch sync
        timer that starts now). Returns the waiters to settle."""
        cdef lt_waiter* woken = NULL
        cdef bint wake, was_synced = False
        lt_lock(&self.mu)
        self.solo = False
        if err == 0:
            was_synced = self.durable <= self.synced
            self.groups += 1
            self.records += n
            counter[0] += 1
            self._set_durable_locked(last, self.sync_always, lt_now())
            woken = self._publish_locked(last)
        wake = ((self.appends > 0 or self.state != Q_OPEN or self.kicked or err != 0
                 or (self.batch_interval > 0 and was_synced and not self.sync_always))
                and self._rouse_locked())
        lt_unlock(&self.mu)
        if wake:
            lt_futex_wake(&self.fl_word, 1)
        return woken

    cdef uint64_t _lock_reserve(self, size_t total, Py_ssize_t n) except? 0:
        """Take mu, check the queue is open and make room in `fill` for n frames of `total` bytes:
        the first of the n LSNs handed out now. mu stays held, unless this raises."""
        cdef uint64_t first
        lt_lock(&self.mu)
        if self.state != Q_OPEN:
            lt_unlock(&self.mu)
            self._refuse()
        if fb_reserve(&self.fill, total, n) < 0:
            lt_unlock(&self.mu)
            raise MemoryError()
        first = self.next_lsn
        self.next_lsn += n
        return first

    cdef uint64_t _wait(self, lt_waiter* w, bint wake) except? 0:
        cdef double bound
        with nogil:
            if wake:
                lt_futex_wake(&self.fl_word, 1)
            # this thread is giving up the GIL: the next durable appender can take it uncontended
            lt_py_leave()
            wl_sleep(w)
            # A group's appenders wake together, on both CPUs, and would queue on the GIL: one that
            # finds another on its way into Python waits for it to be back in a wait rather than
            # sleep on the GIL and need another wake-up (gil_gate.pxd; patient: set_spin_limit).
            bound = lt_spin_bound(PY_SPIN_MIN, self.spin_max)
            lt_py_enter(bound, self.patient and lt_py_short_holds(bound))
        if w.word == W_FAILED:
            self._refuse()
        return w.lsn

    cdef uint64_t _append(self, uint32_t rtype, const uint8_t* pre, size_t plen, const uint8_t* src,
                          size_t dlen) except? 0:
        """Frame one record (data = pre + src), queue it and return its LSN once it is published."""
        if plen + dlen > 0xFFFFFFFF:
            raise ValueError("a record's data does not fit a u32 length")
        cdef size_t size = WAL_HEADER_SIZE + plen + dlen
        cdef lt_waiter w
        cdef bint wake
        lt_lock(&self.mu)
        if self.state != Q_OPEN:
            lt_unlock(&self.mu)
            self._refuse()
        if self.direct and self.appends == 0 and self._idle_for_locked(1, self.wend + size):
            return self._append_solo(rtype, pre, plen, src, dlen, size)  # unlocks
        if fb_reserve(&self.fill, size, 1) < 0:
            lt_unlock(&self.mu)
            raise MemoryError()
        w.lsn = self.next_lsn
        self.next_lsn += 1
        fb_put(&self.fill, w.lsn, rtype, pre, plen, src, dlen)
        wake = self._enqueue_locked(&w)
        lt_unlock(&self.mu)
        return self._wait(&w, wake)

    cdef uint64_t _append_solo(self, uint32_t rtype, const uint8_t* pre, size_t plen, const uint8_t* src,
                               size_t dlen, size_t size) except? 0:
        """The log is idle and needs no sync per append (fsync="batch"/"never"): write the record
        here, without waking the flusher and waiting to be woken (two thread switches, most of the
        cost of such an append). Called with mu held, which it releases; meanwhile appenders queue
        behind (solo) and the flusher waits for it."""
        cdef uint64_t lsn = self.next_lsn
        cdef uint64_t base = self.wend, c
        cdef int err = 0
        cdef lt_waiter* woken = NULL
        self.next_lsn += 1
        self.solo = True
        lt_unlock(&self.mu)
        fb_clear(&self.solo_buf)
        if fb_reserve(&self.solo_buf, size, 1) < 0:
            err = -1
        else:
            fb_put(&self.solo_buf, lsn, rtype, pre, plen, src, dlen)
            with nogil:
                err = self._write_at(self.wfd, self.solo_buf.data, size, base, False)
        if err == 0:
            c = lt_load64(self.icount)
            self.idx[c + 1] = base + size  # idx[c] is the old end: where this frame starts
            lt_store64(self.icount, c + 1)
            self.wend = base + size
        woken = self._end_solo(lsn, 1, err, &self.direct_writes)
        if err == -1:
            self.fail(MemoryError())
            raise MemoryError()
        if err:
            exc = OSError(err, os.strerror(err))
            self.fail(exc)
            self._refuse()
        wl_settle(woken, W_DURABLE)
        return lsn

    def append_one(self, uint32_t rtype, bytes prefix not None, payload) -> int:
        """Frame one record (data = prefix + payload) and return its LSN once it is published."""
        cdef const uint8_t[::1] view
        if PyBytes_CheckExact(payload):
            return self._append(rtype, <const uint8_t*>PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix),
                                <const uint8_t*>PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload))
        view = payload
        return self._append(rtype, <const uint8_t*>PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix),
                            &view[0] if view.shape[0] else NULL, view.shape[0])

    def bind_user(self, slow, Py_ssize_t max_payload) -> None:
        """Set append_user's general path (called as slow()(payload, replica_id, type)) and the
        largest payload it frames itself (bigger ones go to the general path, which refuses them)."""
        self.user_slow = slow
        self.user_max = max_payload

    def append_user(self, payload, replica_id=0, type=0):
        """LogService.append in one call: a bytes payload with an int replica id and type 0 (a user
        record, data = [u32 BE 2][u64 BE replica id][payload]) is framed here; anything else goes
        to the general path bound by bind_user."""
        cdef uint8_t pre[12]
        cdef unsigned long long rid
        cdef Py_ssize_t dlen
        cdef int i
        if (PyBytes_CheckExact(payload) and PyLong_CheckExact(replica_id) and PyLong_CheckExact(type)
                and type == 0):
            dlen = PyBytes_GET_SIZE(payload)
            try:
                rid = replica_id
            except OverflowError:  # negative or too big: the general path refuses it
                dlen = self.user_max + 1
            if dlen <= self.user_max:
                pre[0] = 0; pre[1] = 0; pre[2] = 0; pre[3] = 2  # USER_ENTRY_UPDATE, big-endian
                for i in range(8):
                    pre[4 + i] = <uint8_t>(rid >> (56 - 8 * i))
                return self._append(0, pre, 12, <const uint8_t*>PyBytes_AS_STRING(payload), dlen)
        slow = self.user_slow() if self.user_slow is not None else None
        if slow is None:
            raise LogServiceClosed("the log service is closed")
        return slow(payload, replica_id, type)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def append_many(self, uint32_t rtype, bytes prefix not None, payloads) -> int:
        """Frame consecutive records, one per payload (a list of bytes-like objects, or the rows of a
        C-contiguous 2-D uint8 array), and return the first LSN once the last is published."""
        cdef size_t plen = PyBytes_GET_SIZE(prefix)
        cdef const uint8_t* pre = <const uint8_t*>PyBytes_AS_STRING(prefix)
        cdef const uint8_t[:, ::1] rows
        cdef const uint8_t[::1] view
        cdef Py_ssize_t n, i
        cdef size_t total = 0, dlen, width = 0
        cdef const uint8_t** ptrs = NULL
        cdef size_t* lens = NULL
        cdef list keep = None
        cdef bint is_rows = not isinstance(payloads, list)
        if is_rows:
            rows = payloads
            n, width = rows.shape[0], rows.shape[1]
            if plen + width > 0xFFFFFFFF:
                raise ValueError("rows do not fit a u32 length")
            total = n * (WAL_HEADER_SIZE + plen + width)
        else:
            n = len(payloads)
            ptrs = <const uint8_t**>malloc(max(1, n) * sizeof(void*))
            lens = <size_t*>malloc(max(1, n) * sizeof(size_t))
            if ptrs == NULL or lens == NULL:
                free(ptrs)
                free(lens)
                raise MemoryError()
            keep = []
        if n == 0:
            free(ptrs)
            free(lens)
            raise ValueError("append_many needs at least one payload")
        cdef lt_waiter w
        cdef bint wake
        cdef uint64_t first
        try:
            if not is_rows:
                for i in range(n):
                    p = payloads[i]
                    if PyBytes_CheckExact(p):
                        ptrs[i] = <const uint8_t*>PyBytes_AS_STRING(p)
                        lens[i] = PyBytes_GET_SIZE(p)
                    else:
                        try:
                            view = p
                        except (TypeError, ValueError) as exc:
                            raise TypeError(f"payload {i} must be bytes-like, not {type(p).__name__}") from exc
                        keep.append(view)  # the buffer stays exported until the frames are written
                        lens[i] = view.shape[0]
                        ptrs[i] = &view[0] if lens[i] else NULL
                    if plen + lens[i] > 0xFFFFFFFF:
                        raise ValueError(f"payload {i} does not fit a u32 length")
                    total += WAL_HEADER_SIZE + plen + lens[i]
            first = self._lock_reserve(total, n)
            for i in range(n):
                if is_rows:
                    fb_put(&self.fill, first + i, rtype, pre, plen, &rows[i, 0] if width else NULL, width)
                else:
                    fb_put(&self.fill, first + i, rtype, pre, plen, ptrs[i], lens[i])
            w.lsn = first + n - 1
            wake = self._enqueue_locked(&w)
            lt_unlock(&self.mu)
        finally:
            free(ptrs)
            free(lens)
        self._wait(&w, wake)
        return first

    # -- the flusher --

    cdef int _take(self, double timeout, bint sync) noexcept nogil:
        """Wait (mu not held) for a group and swap it into `out`: 0, or 1 KICKED, 2 CLOSED, 3 TIMEOUT
        (also: a batch sync is due). The flusher's previous group is no longer in hand (busy ends)."""
        cdef double now, until, wait_until, delay, deadline = -1.0
        cdef int seen
        cdef int outcome = 0
        cdef bint napped = False, timed
        cdef Py_ssize_t appends
        lt_lock(&self.mu)
        self.busy = False
        until = lt_now() + timeout
        while True:
            now = lt_now()
            # when to look again; a nap or a due batch sync may bring it nearer, but only `until`
            # ends the wait with TIMEOUT (else an ended nap would return before it ends the
            # expectation, and every later call would nap again)
            wait_until = until
            if self.solo:  # a lone appender is writing its record itself: after it
                pass
            elif self._sync_due(now):
                outcome = 3
                break
            elif self.appends:
                if self.state != Q_OPEN or self.appends >= self.want:
                    break
                if deadline < 0:  # commit delay, from the first sight of this group
                    deadline = now + min(self.max_commit_delay, 0.5 * self.fsync_avg)
                if now >= deadline:
                    break
                wait_until = deadline
            elif self.kicked:
                self.kicked = False
                outcome = 1
                break
            elif self.state != Q_OPEN:
                outcome = 2
                break
            elif now >= until:
                outcome = 3
                break
            if self.batch_interval > 0 and self.unsynced_since > 0 and not self.solo:
                # (a lone appender's write ends with a wake when anything waits for it; a due sync
                # sends the next appender to the queue, which wakes this thread too)
                wait_until = min(wait_until, self.unsynced_since + self.batch_interval)
            timed = False
            if self.appends == 0 and not self.solo and self.want > 1:
                delay = min(self.max_commit_delay, 0.5 * self.fsync_avg)
                if napped or delay <= 0:
                    self.want = 0  # a commit delay passed with nothing queued: the burst is over
                else:  # expecting a group: look again within the delay rather than be woken by its first append
                    wait_until = min(wait_until, now + delay)
                    timed = napped = True
                    self.naps += 1
            seen = self.fl_word
            self.fl_sleeping = True
            self.fl_timed = timed
            lt_unlock(&self.mu)
            lt_futex_wait(&self.fl_word, seen, <long long>(max(0.0, wait_until - now) * 1e9) + 1)
            lt_lock(&self.mu)
            self.fl_sleeping = self.fl_timed = False
        if outcome == 0:
            self.busy = True
            appends = self._swap_fill_locked(&self.out)
            self.out_first = self.next_lsn - <uint64_t>self.out.n
            self.last_groups[0] = self.last_groups[1]
            self.last_groups[1] = appends
            # the next group waits for as many appends as the larger of the last two (only when
            # syncing and appenders are concurrent: a lone appender never waits)
            self.want = max(self.last_groups[0], self.last_groups[1]) if sync else 0
            if self.want <= 1:
                self.want = 0
        lt_unlock(&self.mu)
        return outcome

    cdef bint _sync_due(self, double now) noexcept nogil:
        """fsync="batch": written records have waited batch_interval for their sync."""
        return self.batch_interval > 0 and self.unsynced_since > 0 and now >= self.unsynced_since + self.batch_interval

    cdef int _write_at(self, int fd, const uint8_t* data, size_t n, uint64_t base, bint sync) noexcept nogil:
        """Write n bytes at file offset base (fdatasync when sync): 0, or the errno."""
        cdef int err
        cdef double t0
        err = prealloc_write(&self.zero, fd, data, n, base)
        if not err and sync:
            t0 = lt_now()
            if fdatasync(fd) != 0:
                err = lt_errno()
            else:
                self.fsync_avg = 0.8 * self.fsync_avg + 0.2 * (lt_now() - t0)
        return err

    cdef object _group(self, uint64_t base):
        """The group in `out` as run() hands it to Python: (first LSN, last LSN, absolute frame starts
        u64[n], bytes written); counts it and frees a huge buffer."""
        cdef Py_ssize_t n = self.out.n, i
        cdef cnp.ndarray[cnp.uint64_t, ndim=1] starts = np.empty(n, dtype=np.uint64)
        cdef uint64_t* sp = <uint64_t*>starts.data
        for i in range(n):
            sp[i] = self.out.starts[i] + base
        self.groups += 1
        self.records += n
        nbytes = self.out.len
        fb_trim(&self.out, KEEP_BYTES)
        return self.out_first, self.out_first + <uint64_t>n - 1, starts, nbytes

    cdef void _publish_now(self, uint64_t lsn) noexcept nogil:
        """Publish the flusher's last group, which it no longer holds: in the same step, so that an
        appender it wakes finds the log idle (and may write itself) rather than a group in hand."""
        cdef lt_waiter* first
        lt_lock(&self.mu)
        self.busy = False
        first = self._publish_locked(lsn)
        lt_unlock(&self.mu)
        wl_settle(first, W_DURABLE)

    # -- the bound segment: the flusher's loop without Python, and lone appenders --

    def bind_index(self, int fd, cnp.ndarray starts not None, cnp.ndarray count not None, uint64_t end,
                   uint64_t roll_at) -> None:
        """The segment run() (and a lone appender) writes: its fd, its frame index (uint64 `starts`,
        entry k = the offset of its k-th frame, entry count = its logical end) and the uint64[1] cell
        holding that count, which the queue advances after writing. Only the thread that holds the
        log (the flusher between groups, with busy set) may call it. end: the logical end;
        roll_at: the size at which the flusher's Python takes over (to roll the segment)."""
        if starts.dtype != np.uint64 or count.dtype != np.uint64 or not starts.flags.c_contiguous \
                or not count.flags.c_contiguous or count.shape[0] < 1 or starts.shape[0] < 1:
            raise ValueError("bind_index takes C-contiguous uint64 arrays")
        if (<uint64_t*>count.data)[0] >= <uint64_t>starts.shape[0]:
            raise ValueError("the index is smaller than its count")
        self.idx_owner, self.cnt_owner = starts, count
        self.idx = <uint64_t*>starts.data
        self.icap = starts.shape[0]
        self.icount = <uint64_t*>count.data
        self.wfd = fd
        self.wend = end
        self.roll_at = roll_at

    def configure(self, bint sync_always, bint direct, double batch_interval) -> None:
        """How run() and lone appenders behave: fdatasync every group (fsync="always"); let an
        appender that finds the log idle write its record itself (fsync="batch"/"never"); a batch
        sync falls due batch_interval seconds after the first unsynced write (0: never)."""
        self.sync_always = sync_always
        self.direct = direct
        self.batch_interval = batch_interval

    @property
    def mark(self) -> int:
        """A write whose end reaches this offset is handed to the flusher's Python (pre-allocation)."""
        return self.mark_at

    @mark.setter
    def mark(self, uint64_t value) -> None:
        self.mark_at = value

    @property
    def durable_lsn(self) -> int:
        """The highest LSN written and indexed: what readers may see."""
        return lt_load64(&self.durable)

    @property
    def synced_lsn(self) -> int:
        """The highest LSN known fdatasync'ed."""
        return lt_load64(&self.synced)

    def set_durable(self, uint64_t lsn, bint synced) -> None:
        """The flusher's Python indexed up to lsn (synced: and it is on disk)."""
        lt_lock(&self.mu)
        self._set_durable_locked(lsn, synced, lt_now())
        lt_unlock(&self.mu)

    cdef void _set_durable_locked(self, uint64_t lsn, bint synced, double now) noexcept nogil:
        if lsn > self.durable:
            if self.durable <= self.synced and not synced:
                self.unsynced_since = now  # the batch sync timer starts
            lt_store64(&self.durable, lsn)
        if synced and lsn > self.synced:
            lt_store64(&self.synced, lsn)
            self.unsynced_since = 0.0

    def note_synced(self, uint64_t lsn) -> None:
        """Everything up to lsn is fdatasync'ed (a batch or requested sync)."""
        lt_lock(&self.mu)
        if lsn > self.synced:
            lt_store64(&self.synced, lsn)
        self.unsynced_since = 0.0 if self.synced >= self.durable else lt_now()
        lt_unlock(&self.mu)

    @property
    def failure(self):
        """The exception that failed the queue (a write or sync), or None."""
        return self.failure

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def run(self, double timeout, uint64_t publish=0):
        """The flusher's loop (bind_index first): take each group, write it to the bound segment at its
        end, fdatasync it (sync_always), index it, publish it and wake its waiters, all with the GIL
        released. Returns what needs the flusher's Python: a group (see _group), written but not yet
        indexed nor published (it reaches the roll size or the pre-allocation mark, or the index is
        full), or KICKED (a kick(), once the groups queued with it are published), CLOSED, TIMEOUT
        (idle for `timeout`, or a batch sync due). OSError when a write or sync fails."""
        cdef int outcome = 0, err = 0
        cdef uint64_t base = 0, end, c, last
        cdef Py_ssize_t n, i
        cdef lt_waiter* woken
        if self.idx == NULL:
            raise ValueError("run() needs bind_index() first")
        with nogil:
            if publish:
                self._publish_now(publish)
            while True:
                outcome = self._take(timeout, self.sync_always)
                if outcome != 0:
                    break
                n = self.out.n
                base = self.wend
                end = base + self.out.len
                err = self._write_at(self.wfd, self.out.data, self.out.len, base, self.sync_always)
                if err:
                    break
                c = lt_load64(self.icount)
                if end >= self.roll_at or end >= self.mark_at or c + <uint64_t>n + 1 > <uint64_t>self.icap:
                    outcome = 4
                    break
                for i in range(n):
                    self.idx[c + i] = self.out.starts[i] + base
                self.idx[c + n] = end
                lt_store64(self.icount, c + n)  # release: readers see the entries before the count
                self.wend = end
                last = self.out_first + <uint64_t>n - 1
                lt_lock(&self.mu)
                self.groups += 1
                self.records += n
                self._set_durable_locked(last, self.sync_always, lt_now())
                self.busy = False  # with the publication: see _publish_now
                woken = self._publish_locked(last)
                if self.kicked:  # a sync() request: its caller waits for the flusher's Python
                    self.kicked = False
                    outcome = 1
                lt_unlock(&self.mu)
                wl_settle(woken, W_DURABLE)
                fb_trim(&self.out, KEEP_BYTES)
                if outcome == 1:
                    break
        if err:
            raise OSError(err, os.strerror(err))
        if outcome == 4:
            return self._group(base)
        return KICKED if outcome == 1 else CLOSED if outcome == 2 else TIMEOUT

    # -- pre-allocation --

    def set_segment(self, int fd, uint64_t written) -> None:
        """The flusher now writes to fd, whose bytes up to `written` are frames or zeros (the flusher
        calls it before its first write there, and closes the previous fd only after)."""
        with nogil:
            prealloc_set_segment(&self.zero, fd, written)

    @property
    def zeroed(self) -> int:
        """The current segment's written extent: frames, then pre-allocated zeros, up to here."""
        return lt_load64(&self.zero.zeroed)

    def prefill(self, uint64_t generation, uint64_t upto, bint sync) -> int:
        """Extend the current segment with zero bytes up to offset `upto` (nothing if it is already
        that long, or if the segment is no longer the one of `generation`), fdatasync'ing every
        piece when sync: what the pre-allocation thread does, so that the flusher's fdatasync later
        finds the size and extents already on disk (and never more than one piece of its zeros
        still dirty). Never writes where a frame is or is being written. Returns the bytes added;
        OSError (e.g. EFBIG past RLIMIT_FSIZE, ENOSPC) after keeping what fitted."""
        cdef uint64_t added = 0
        cdef int err
        if self.zero.zeros == NULL:
            self.zero.zeros = <uint8_t*>calloc(ZERO_CHUNK, 1)
            if self.zero.zeros == NULL:
                raise MemoryError()
        with nogil:
            err = prealloc_fill(&self.zero, generation, upto, sync, &added)
        if err:
            raise OSError(err, os.strerror(err))
        return added

    def publish(self, uint64_t lsn) -> None:
        """Every record up to lsn is durable (and indexed): settle exactly the waiters at or below it,
        and wake them at once (a group's with one futex wake; each then takes the GIL through the
        gate of gil_gate.pxd rather than sleep on it)."""
        cdef lt_waiter* first
        with nogil:
            lt_lock(&self.mu)
            first = self._publish_locked(lsn)
            lt_unlock(&self.mu)
            wl_settle(first, W_DURABLE)

    cdef lt_waiter* _publish_locked(self, uint64_t lsn) noexcept nogil:
        """publish under mu: the waiters to wake now (after unlocking)."""
        if lsn > self.published:
            self.published = lsn
        if self.dur_at and self.published >= self.dur_at:
            self.dur_at = 0
            lt_notify(self.dur_fd)
        return wl_detach_durable(&self.waiters, lsn)

    def notify_durable(self, uint64_t lsn, int fd) -> bool:
        """Arm eventfd `fd` to be written once every record up to `lsn` is published, or when the
        queue fails: False when armed, True when that is already so (nothing is written then). Once
        written it is disarmed; arming again replaces the LSN and the fd. (0, -1) disarms. What an
        event loop watches so that a server's batch is answered with no thread between the flusher
        and the loop."""
        cdef bint now
        lt_lock(&self.mu)
        if lsn == 0 or fd < 0:
            self.dur_at, self.dur_fd = 0, -1
            lt_unlock(&self.mu)
            return False
        now = self.state == Q_FAILED or lsn <= self.published
        if not now:
            self.dur_at, self.dur_fd = lsn, fd
        lt_unlock(&self.mu)
        return now

    def fail(self, exc) -> None:
        """A write failed: wake every waiter with LogServiceFailed and refuse every later append."""
        cdef lt_waiter* all_
        lt_lock(&self.mu)
        if self.state != Q_FAILED:
            self.failure = exc
        self.state = Q_FAILED
        if self.dur_at:
            self.dur_at = 0
            lt_notify(self.dur_fd)
        all_ = wl_take_all(&self.waiters)
        fb_clear(&self.fill)
        self.appends = 0
        self.fl_word += 1
        lt_unlock(&self.mu)
        with nogil:
            wl_settle(all_, W_FAILED)
            lt_futex_wake(&self.fl_word, 1)

    def close(self) -> None:
        """Refuse new appends (LogServiceClosed); the flusher drains what is queued, then sees CLOSED."""
        with nogil:
            lt_lock(&self.mu)
            if self.state == Q_OPEN:
                self.state = Q_CLOSING
            self.fl_word += 1
            lt_unlock(&self.mu)
            lt_futex_wake(&self.fl_word, 1)

    def kick(self) -> None:
        """Wake the flusher (it returns KICKED when nothing is queued): a sync() request."""
        with nogil:
            lt_lock(&self.mu)
            self.kicked = True
            self.fl_word += 1
            lt_unlock(&self.mu)
            lt_futex_wake(&self.fl_word, 1)

    # -- queue now, wait for durability later: the pipelined committer's appends (the TN's and the
    # primary's; they queue under their own ordering lock and wait without it) --

    def enqueue_one(self, uint32_t rtype, bytes prefix not None, payload) -> int:
        """Frame one record (data = prefix + payload) and queue it for the flusher without waiting:
        its LSN. Calls made one after another get increasing LSNs in call order; wait_durable(lsn)
        returns once the record is published. It shares groups with every other append."""
        cdef const uint8_t[::1] view
        cdef size_t dlen
        if PyBytes_CheckExact(payload):
            return self.enqueue_record(rtype, <const uint8_t*>PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix),
                                       <const uint8_t*>PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload))
        view = payload
        dlen = view.shape[0]
        return self.enqueue_record(rtype, <const uint8_t*>PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix),
                                   &view[0] if dlen else NULL, dlen)

    cdef uint64_t enqueue_record(self, uint32_t rtype, const uint8_t* pre, size_t plen, const uint8_t* src,
                                 size_t dlen) except? 0:
        """enqueue_one of data = pre + src: its LSN."""
        cdef size_t size
        cdef uint64_t lsn
        cdef bint wake
        if plen + dlen > 0xFFFFFFFF:
            raise ValueError("a record's data does not fit a u32 length")
        size = WAL_HEADER_SIZE + plen + dlen
        lsn = self._lock_reserve(size, 1)
        fb_put(&self.fill, lsn, rtype, pre, plen, src, dlen)
        wake = self._count_append_locked()
        lt_unlock(&self.mu)
        if wake:
            lt_futex_wake(&self.fl_word, 1)
        return lsn

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def enqueue_many(self, uint32_t rtype, list prefixes not None, list payloads not None, bint wake=True) -> int:
        """enqueue_one of each (prefix, payload), all of them bytes, in one hold of the queue: their
        LSNs are consecutive from the one returned. A server's batch of calls is then one group for
        the flusher: queued one by one, the flusher would start on the first records and leave the
        rest to a second write and fsync. wake=False leaves the flusher asleep: the caller then
        calls commit_here() (which commits the group itself or wakes the flusher)."""
        cdef Py_ssize_t n = len(payloads), i
        cdef size_t total = 0, plen, dlen
        cdef uint64_t first
        if n == 0 or len(prefixes) != n:
            raise ValueError("enqueue_many needs as many prefixes as payloads, and at least one")
        for i in range(n):
            pre, p = prefixes[i], payloads[i]
            if not PyBytes_CheckExact(pre) or not PyBytes_CheckExact(p):
                raise TypeError(f"record {i}: prefix and payload must be bytes")
            plen, dlen = PyBytes_GET_SIZE(pre), PyBytes_GET_SIZE(p)
            if plen + dlen > 0xFFFFFFFF:
                raise ValueError(f"record {i}: its data does not fit a u32 length")
            total += WAL_HEADER_SIZE + plen + dlen
        first = self._lock_reserve(total, n)
        for i in range(n):
            pre, p = <bytes>prefixes[i], <bytes>payloads[i]
            fb_put(&self.fill, first + i, rtype, <const uint8_t*>PyBytes_AS_STRING(pre), PyBytes_GET_SIZE(pre),
                   <const uint8_t*>PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p))
        if wake:
            wake = self._count_append_locked()
        else:
            self.appends += 1
        lt_unlock(&self.mu)
        if wake:
            lt_futex_wake(&self.fl_word, 1)
        return first

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def commit_here(self) -> bool:
        """Write what is queued as one group in the calling thread, as the flusher would (fdatasync
        with sync_always, index, publish, wake its waiters), when the log is idle: True once it is
        published. An event loop that queued its batches with enqueue_many(wake=False) calls it
        once it has read them all, so a batch costs no wake of the flusher and no wake back.
        False when nothing is queued, or the flusher must take it (it holds a group, the log is
        closing or failed, a sync is requested or due, or the group reaches the roll size, the
        pre-allocation mark or the index's end): the flusher is woken then. OSError (the queue
        fails) when the write or sync fails. The caller's thread blocks for the write and sync,
        with the GIL released."""
        cdef uint64_t base, end, c, first
        cdef Py_ssize_t n, i
        cdef int err = 0
        cdef bint wake
        cdef lt_waiter* woken = NULL
        lt_lock(&self.mu)
        if self.appends == 0:
            lt_unlock(&self.mu)
            return False
        n = self.fill.n
        base = self.wend
        end = base + self.fill.len
        if not self._idle_for_locked(n, end):
            wake = self._rouse_locked()
            lt_unlock(&self.mu)
            if wake:
                lt_futex_wake(&self.fl_word, 1)
            return False
        # as a lone appender does: the flusher waits while solo; appends queue in the new fill
        self.solo = True
        self._swap_fill_locked(&self.solo_buf)
        first = self.next_lsn - <uint64_t>n
        lt_unlock(&self.mu)
        with nogil:
            err = self._write_at(self.wfd, self.solo_buf.data, self.solo_buf.len, base, self.sync_always)
            if err == 0:
                c = lt_load64(self.icount)
                for i in range(n):
                    self.idx[c + i] = self.solo_buf.starts[i] + base
                self.idx[c + n] = end
                lt_store64(self.icount, c + n)  # release: readers see the entries before the count
                self.wend = end
        fb_trim(&self.solo_buf, KEEP_BYTES)  # while solo: a lone appender may use it after
        woken = self._end_solo(first + <uint64_t>n - 1, n, err, &self.groups_here)
        if err:
            exc = OSError(err, os.strerror(err))
            self.fail(exc)
            raise exc
        wl_settle(woken, W_DURABLE)
        return True

    def wait_durable(self, uint64_t lsn) -> int:
        """Return once every record up to lsn is published (written, and synced with sync_always),
        sleeping on a futex with the GIL released: the published LSN then (>= lsn).
        LogServiceFailed when a write failed first; ValueError for an LSN not handed out yet."""
        return self.wait_published(lsn)

    cdef uint64_t wait_published(self, uint64_t lsn) except? 0:
        """wait_durable: the published LSN once it reaches lsn."""
        cdef lt_waiter w
        cdef uint64_t gen
        lt_lock(&self.mu)
        if lsn <= self.published:
            lsn = self.published
            lt_unlock(&self.mu)
            return lsn
        if self.state == Q_FAILED:
            lt_unlock(&self.mu)
            self._refuse()
        if lsn >= self.next_lsn:
            lt_unlock(&self.mu)
            raise ValueError(f"LSN {lsn} was not handed out (the next is {self.next_lsn})")
        # appends link at the tail as they take their LSNs; this waiter comes later. It sleeps on
        # its record's group word: the filling group's, else that of the group the flusher holds
        w.lsn = lsn
        gen = self.fill_gen if lsn >= self.next_lsn - <uint64_t>self.fill.n else self.fill_gen - 1
        wl_insert(&self.waiters, &w, &self.gword[gen & 1])
        lt_unlock(&self.mu)
        self._wait(&w, False)
        return lt_load64(&self.published)

    def set_spin_limit(self, double seconds, bint patient=False) -> None:
        """How long a woken appender may spin, at most, for another to leave Python before it takes
        the GIL; it spins about as long as a sleep and a wake were measured to cost here (a spin as
        long as a sleep costs is never worse than twice the better choice), and at least 5 us.
        Writers that run much Python per record (the TN, the primary) gain from a longer limit;
        plain appenders, whose Python is a loop step, from the least. `patient`: past the spin, a
        woken appender yields its CPU and waits on for its turn (while others pass regularly)
        instead of sleeping on the GIL; for writer threads whose process has nothing else to run
        meanwhile (see _ext/gil_gate.pxd)."""
        if not (0.0 <= seconds <= 0.001):
            raise ValueError(f"a spin limit is between 0 and 0.001 s, not {seconds!r}")
        self.spin_max = seconds
        self.patient = patient
