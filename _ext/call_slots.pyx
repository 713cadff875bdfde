# cython: language_level=3
"""CallSlots: the calls of one framed-carrier connection, queued and waited for without Python on the wait path.

A caller's `call(method, request, timeout)` packs its call frame straight into the connection's
pending buffer (the id is assigned there, under a C mutex), registers a waiter on its own stack and
sleeps on the waiter's futex with the GIL released. The sender `take()`s (or `poll()`s) the pending
frames as one blob (the batch rule of docs/rpc.md: once every caller whose reply was just handed over has
called again, or LINGER_S after the last call, at most LINGER_MAX_S after the first). The reader
`deliver()`s a REPLIES frame: one call splits the reply frames, settles the waiters by id and
wakes them, as `handoff` says:
- HANDOFF_ALL: all at once (they then queue on the GIL: a wake-up and a GIL wait each).
- HANDOFF_AT_WAKE: the first at once, the others are *ready*, and each caller, as soon as its futex
  wait returns and before it takes the GIL, wakes the next ready one.
- HANDOFF_AT_CALL: the first at once, and each caller wakes the next ready one when its next call
  gives up the GIL, in the same GIL release as its own wait: each woken caller finds the GIL free,
  one context switch per call. The next call of a woken caller may never come (it went on to other
  work): the sender then wakes every ready one left after `stall_s`, counted from when the last
  woken caller ran (all at once: one by one, each would wait a stall_s more than the one before).
(The stall wake-up is a defence only with HANDOFF_AT_WAKE. A settled caller nobody woke claims its
outcome itself after RECHECK_S.)
`fail(exc)` ends every call queued or in flight with `exc`. A sender on an event loop (the
client's WireLoop) uses poll() and open_notify()'s eventfd instead of blocking in take().

    s = CallSlots(linger_s, linger_max_s, max_batch_bytes, stall_s, handoff=HANDOFF_AT_WAKE)
    s.call(method, request, timeout) -> reply bytes | a delivered error object | None (deadline) |
                                        the failure (an exception) | False (already failed: not queued)
    s.take(timeout=-1) -> frames blob | b"" (timeout) | None (failed)
    s.poll() -> frames blob | None (failed) | seconds to wait at most (-1.0: until the eventfd)
    s.open_notify() -> an eventfd written whenever a blocked take() would have been woken
    s.deliver(frames, errors) -> settled; s.fail(exc)

Frames are those of engine/rpc/call_frames.py (little-endian):
    call frame:  [u64 id][u16 method][u32 length][request]
    reply frame: [u64 id][u32 length][response]
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.math cimport INFINITY
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memmove
from posix.unistd cimport close
cimport cython



cdef object _malformed(str msg):
    """MalformedFrames(msg) (imported here: engine.rpc imports this module while it initializes)."""
    from logtide.engine.rpc.call_frames import MalformedFrames
    return MalformedFrames(msg)

cdef extern from *:
    """
    #include <unistd.h>
    #include <stdint.h>
    #include <sys/eventfd.h>

    /* the notify eventfd (see CallSlots.poll) lives as long as the slots, so a write never hits another file */
    static inline void cs_drain(int fd) { uint64_t v; ssize_t r = read(fd, &v, 8); (void)r; }
    static inline int cs_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

    /* The CallSlots whose reply this thread got last (and the batch-rule epoch then): its next call
       on the same slots counts as "returned" (see take). */
    static __thread void* cs_last_slots = NULL;
    static __thread uint64_t cs_last_epoch = 0;
    static inline void* cs_get_last(uint64_t* epoch) { *epoch = cs_last_epoch; return cs_last_slots; }
    static inline void cs_set_last(void* s, uint64_t epoch) { cs_last_slots = s; cs_last_epoch = epoch; }

    """
    void cs_drain(int fd) nogil
    int cs_eventfd() nogil
    void* cs_get_last(uint64_t* epoch) nogil
    void cs_set_last(void* s, uint64_t epoch) nogil

# the call and reply frames' layout is the framed carrier's (one format, one place)
from logtide._ext.wire_format cimport CALL_HEADER, REPLY_HEADER, get32, get64, put16, put32, put64
from logtide._ext.futex cimport (lt_futex_wait, lt_futex_wake, lt_load, lt_lock, lt_mutex, lt_mutex_destroy,
                                 lt_mutex_init, lt_notify, lt_now, lt_unlock)
from logtide._ext.ready_list cimport (ReadyList, rl_node, rl_pop, rl_push, rl_remove, rl_stall_at, rl_take,
                                      rl_take_stalled, rl_wake, rl_wake_all)
DEF S_WAITING = 0
DEF S_REPLY = 1
DEF S_FAILED = 2
DEF RECHECK_S = 0.05      # a sleeping thread re-checks at least this often (a settled caller that
                          # nobody woke, the sender being busy, then claims its outcome itself)
cdef enum:
    H_ALL = 0         # deliver wakes every settled caller at once
    H_AT_WAKE = 1     # a woken caller wakes the next ready one before it takes the GIL
    H_AT_CALL = 2     # a caller wakes the next ready one when its next call gives up the GIL
HANDOFF_ALL, HANDOFF_AT_WAKE, HANDOFF_AT_CALL = H_ALL, H_AT_WAKE, H_AT_CALL
DEF KEEP_BYTES = 4 << 20  # a sent buffer larger than this is freed, not kept
DEF WOKEN = 1             # a waiter's word once it is woken (0 while it waits)


cdef struct cs_waiter:
    # one waiting call, on its caller's stack
    rl_node r             # first: the futex word it sleeps on (0 waiting, WOKEN), its link in the ready list
    int state             # S_WAITING, S_REPLY or S_FAILED: whether its outcome is set and which
    uint64_t id
    PyObject* result      # the outcome (a new reference)


cdef inline void _futex_wait_s(int* w, int val, double s) noexcept nogil:
    """Sleep while *w == val, at most s seconds."""
    lt_futex_wait(w, val, <long long>((s if s > 0 else 0.0) * 1e9))


cdef inline void _settle(cs_waiter* w, object result, rl_node** head, rl_node** tail):
    """Give waiter `w` its outcome (a new reference to `result`) and append it to the list
    head..tail of callers to wake."""
    Py_INCREF(result)
    w.result = <PyObject*>result
    w.state = S_REPLY
    w.r.next = NULL
    if tail[0] == NULL:
        head[0] = &w.r
    else:
        tail[0].next = &w.r
    tail[0] = &w.r


cdef class CallSlots:
    """The queued calls and the waiting callers of one call stream."""
    cdef lt_mutex mu
    cdef uint8_t* pend          # packed call frames not taken by the sender yet
    cdef size_t pend_len, pend_cap
    cdef Py_ssize_t pend_n
    cdef uint8_t* out           # the sender's copy of a taken batch (only the sender uses it)
    cdef size_t out_cap
    cdef uint64_t next_id
    cdef dict table             # call id -> address of its waiter (GIL and mutex held)
    cdef ReadyList ready        # settled callers not woken yet (handoff), in delivery order; stall_s its stall
    cdef Py_ssize_t returning   # callers whose reply was handed over and that have not called again
    cdef uint64_t epoch         # bumped when the batch rule stops waiting for the returning callers
    cdef double first_at, last_call
    cdef int snd_word           # the sender's futex word: bumped to wake it
    cdef bint snd_sleeping
    cdef int notify_fd          # an eventfd also written to wake the sender (-1: none; see poll)
    cdef bint cbroken
    cdef object broken
    cdef readonly double linger_s, linger_max_s
    cdef readonly size_t max_batch_bytes
    cdef readonly int handoff   # HANDOFF_ALL, HANDOFF_AT_WAKE or HANDOFF_AT_CALL (module doc)
    cdef readonly uint64_t batches, calls

    def __cinit__(self, double linger_s=0.001, double linger_max_s=0.01, size_t max_batch_bytes=256 << 10,
                  double stall_s=0.0002, int handoff=H_AT_WAKE):
        lt_mutex_init(&self.mu)
        self.next_id = 1
        self.table = {}
        self.linger_s, self.linger_max_s, self.ready.stall = linger_s, linger_max_s, stall_s
        self.max_batch_bytes = max(max_batch_bytes, <size_t>1)
        if handoff < H_ALL or handoff > H_AT_CALL:
            raise ValueError(f"handoff must be 0, 1 or 2, got {handoff}")
        self.handoff = handoff
        self.broken = None
        self.notify_fd = -1

    def __dealloc__(self):
        if self.notify_fd >= 0:
            close(self.notify_fd)
        free(self.pend)
        free(self.out)
        lt_mutex_destroy(&self.mu)

    @property
    def failure(self):
        """The exception that failed the slots, or None."""
        return self.broken

    @property
    def inflight(self) -> int:
        """Calls queued or in flight that no reply or failure settled yet."""
        return len(self.table)

    @property
    def pending(self) -> int:
        """Call frames queued and not taken by the sender yet."""
        return self.pend_n

    @property
    def stall_s(self) -> float:
        """Seconds after which the sender wakes the ready callers nobody handed off to."""
        return self.ready.stall

    @property
    def stalls(self) -> int:
        """Times the sender did that."""
        return self.ready.stalls

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def call(self, unsigned int method, bytes request, double timeout):
        """Queue one call and wait for its outcome (see the module doc); `timeout` in seconds."""
        cdef cs_waiter w
        cdef size_t n = PyBytes_GET_SIZE(request)
        cdef size_t need, cap
        cdef void* p
        cdef uint8_t* f
        cdef uint64_t ep
        cdef bint wake_sender
        cdef rl_node* hand
        cdef int where
        cdef double now, end, left
        if method > 0xFFFF or n > 0xFFFFFFFF:
            raise ValueError("call frame: method index or request too large")
        w.r.word = 0
        w.r.next = NULL
        w.state = S_WAITING
        w.result = NULL
        lt_lock(&self.mu)
        if self.cbroken:
            lt_unlock(&self.mu)
            return False
        need = self.pend_len + CALL_HEADER + n
        if need > self.pend_cap:
            cap = self.pend_cap * 2 if self.pend_cap else 65536
            while cap < need:
                cap *= 2
            p = realloc(self.pend, cap)
            if p == NULL:
                lt_unlock(&self.mu)
                raise MemoryError("call stream: no memory for the pending calls")
            self.pend, self.pend_cap = <uint8_t*>p, cap
        w.id = self.next_id
        self.next_id += 1
        f = self.pend + self.pend_len
        put64(f, w.id)
        put16(f + 8, <uint16_t>method)
        put32(f + 10, <uint32_t>n)
        memcpy(f + CALL_HEADER, PyBytes_AS_STRING(request), n)
        self.pend_len = need
        self.pend_n += 1
        now = lt_now()
        if self.pend_n == 1:
            self.first_at = now
        self.last_call = now
        if cs_get_last(&ep) == <void*>self:
            if ep == self.epoch and self.returning > 0:
                self.returning -= 1
            cs_set_last(NULL, 0)
        self.table[w.id] = <size_t>&w
        wake_sender = self.snd_sleeping and (self.pend_n == 1 or self.returning == 0)
        if wake_sender:
            self.snd_word += 1
        hand = rl_pop(&self.ready) if self.handoff == H_AT_CALL else NULL
        lt_unlock(&self.mu)
        end = now + timeout
        while True:
            with nogil:
                # in the same GIL release as the sleep: a woken thread never waits for this one's GIL
                if wake_sender:
                    wake_sender = False
                    lt_futex_wake(&self.snd_word, 1)
                    if self.notify_fd >= 0:
                        lt_notify(self.notify_fd)
                if hand != NULL:       # this thread gives up the GIL now: the next one finds it free
                    rl_wake(hand, WOKEN)
                    hand = NULL
                while lt_load(&w.r.word) == 0:
                    left = end - lt_now()
                    if left <= 0:
                        break
                    _futex_wait_s(&w.r.word, 0, left if left < RECHECK_S else RECHECK_S)
                    if lt_load(&w.r.word) == 0 and lt_load(&w.state) != S_WAITING:
                        break                   # settled, and nobody woke it for RECHECK_S: claim it
                if lt_load(&w.r.word) != 0 and self.handoff == H_AT_WAKE:
                    # woken: pass the wake-up on at once, before taking the GIL, so the next
                    # caller's wake-up latency overlaps this one's GIL wait and Python work
                    lt_lock(&self.mu)
                    hand = rl_pop(&self.ready)
                    lt_unlock(&self.mu)
                    if hand != NULL:
                        rl_wake(hand, WOKEN)
                elif lt_load(&w.r.word) != 0 and self.handoff == H_AT_CALL:
                    # the stall clock runs from when the woken caller runs, not from its wake-up:
                    # one still waiting for a CPU is late, not gone
                    lt_lock(&self.mu)
                    if self.ready.head != NULL:
                        self.ready.handed = lt_now()
                    lt_unlock(&self.mu)
            if lt_load(&w.r.word) != 0:
                break
            lt_lock(&self.mu)
            if w.state == S_WAITING:
                if lt_now() < end:          # a spurious wake-up
                    lt_unlock(&self.mu)
                    continue
                self.table.pop(w.id, None)  # the deadline passed: forget the call (a late reply is dropped)
                lt_unlock(&self.mu)
                return None
            # settled: if it is still in the ready list, take it out; else someone detached it
            # and is waking it right now
            where = rl_remove(&self.ready, &w.r)
            if where == 1:
                hand = rl_pop(&self.ready)      # it headed a stalled list: pass the wake-up on
                lt_unlock(&self.mu)
                if hand != NULL:
                    with nogil:
                        rl_wake(hand, WOKEN)
            else:
                lt_unlock(&self.mu)
                if where == 0:
                    with nogil:
                        while lt_load(&w.r.word) == 0:
                            _futex_wait_s(&w.r.word, 0, RECHECK_S)
            break
        r = <object>w.result
        Py_XDECREF(w.result)
        if w.state == S_REPLY:
            cs_set_last(<void*>self, self.epoch)
        return r

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def take(self, double timeout=-1.0):
        """The sender: wait for the next batch of call frames (the batch rule of the module doc) and
        return them as one blob of whole frames, at most max_batch_bytes unless one frame is larger;
        b"" when `timeout` (>= 0) passed with nothing queued; None once the slots failed."""
        cdef double now, until, due, give_up
        cdef int word
        cdef size_t cut = 0
        cdef bint broken = False, empty = False
        cdef rl_node* stalled = NULL
        give_up = lt_now() + timeout if timeout >= 0 else -1.0
        with nogil:
            lt_lock(&self.mu)
            while True:
                if self.cbroken:
                    broken = True
                    break
                now = lt_now()
                due = self._batch_due_locked(now, &stalled)
                if due == 0:
                    break
                if due > 0:
                    until = due
                elif give_up >= 0:
                    if now >= give_up:
                        empty = True
                        break
                    until = give_up
                else:
                    until = now + RECHECK_S
                until = rl_stall_at(&self.ready, until)
                self.snd_sleeping = True
                word = self.snd_word
                lt_unlock(&self.mu)
                rl_wake_all(stalled, WOKEN)
                stalled = NULL
                _futex_wait_s(&self.snd_word, word, until - now)
                lt_lock(&self.mu)
                self.snd_sleeping = False
            if not broken and not empty:
                cut = self._cut_locked()
            lt_unlock(&self.mu)
            rl_wake_all(stalled, WOKEN)
        if broken:
            return None
        if empty:
            return b""
        return self._out_blob(cut)

    cdef double _batch_due_locked(self, double now, rl_node** stalled) noexcept nogil:
        """Under the mutex, the batch rule (module doc) for take() and poll(): 0 when a batch goes
        now, else when it goes at the latest (the linger's end), or -1 with nothing queued. A ready
        list left unclaimed for stall_s is detached into *stalled, to wake once the mutex is released
        (the caller woken before them did not come back): all of them at once, so a caller that goes
        on to other work delays the others of its frame by one stall_s, not one each."""
        cdef double lend
        stalled[0] = rl_take_stalled(&self.ready, now)
        if self.pend_n and self.returning == 0:
            return 0
        if self.pend_n:
            lend = min(self.first_at + self.linger_max_s, self.last_call + self.linger_s)
            if now >= lend:
                self.returning = 0     # those callers went on to other work
                self.epoch += 1
                return 0
            return lend
        return -1

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef size_t _cut_locked(self) noexcept nogil:
        """Under the mutex: move whole pending frames, up to max_batch_bytes (at least one), into
        `out`; returns their size (0 only when no memory)."""
        cdef size_t cut = 0, flen
        cdef Py_ssize_t k = 0
        cdef void* p
        while cut < self.pend_len:
            flen = CALL_HEADER + get32(self.pend + cut + 10)
            if cut and cut + flen > self.max_batch_bytes:
                break
            cut += flen
            k += 1
        if cut > self.out_cap:
            p = realloc(self.out, cut)
            if p == NULL:
                return 0
            self.out, self.out_cap = <uint8_t*>p, cut
        if cut:
            memcpy(self.out, self.pend, cut)
            memmove(self.pend, self.pend + cut, self.pend_len - cut)
            self.pend_len -= cut
            self.pend_n -= k
            if self.pend_n:
                self.first_at = lt_now()
            self.batches += 1
            self.calls += k
        return cut

    cdef object _out_blob(self, size_t cut):
        if cut == 0:
            raise MemoryError("call stream: no memory for a batch")
        blob = PyBytes_FromStringAndSize(<char*>self.out, cut)
        if self.out_cap > KEEP_BYTES:
            free(self.out)
            self.out, self.out_cap = NULL, 0
        return blob

    def open_notify(self) -> int:
        """An eventfd the slots write to whenever take() would have been woken: for a sender that
        runs on an event loop and calls poll() instead of blocking in take(). Owned by the slots
        (closed when they are freed)."""
        if self.notify_fd < 0:
            fd = cs_eventfd()
            if fd < 0:
                raise OSError("call stream: eventfd() failed")
            self.notify_fd = fd
        return self.notify_fd

    def drain_notify(self) -> None:
        """Reset the notify eventfd (after the event loop saw it readable)."""
        if self.notify_fd >= 0:
            with nogil:
                cs_drain(self.notify_fd)

    def poll(self):
        """take() for an event loop, without blocking: the next batch of call frames (the same
        batch rule) as one blob; None once the slots failed; else how many seconds at most to wait
        before polling again (-1.0: only when open_notify()'s eventfd becomes readable), a call
        that completes the batch rule writing that eventfd meanwhile."""
        cdef double now, due, wait = -1.0
        cdef size_t cut = 0
        cdef bint broken = False, send = False
        cdef rl_node* stalled = NULL
        with nogil:
            lt_lock(&self.mu)
            self.snd_sleeping = False
            if self.cbroken:
                broken = True
            else:
                now = lt_now()
                due = self._batch_due_locked(now, &stalled)
                if due == 0:
                    send = True
                    cut = self._cut_locked()
                else:
                    due = rl_stall_at(&self.ready, due if due > 0 else INFINITY)
                    wait = max(0.0, due - now) if due < INFINITY else -1.0
                    self.snd_sleeping = True
            lt_unlock(&self.mu)
            rl_wake_all(stalled, WOKEN)
        if broken:
            return None
        if not send:
            return wait
        return self._out_blob(cut)

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def deliver(self, bytes frames, errors=()):
        """The reader: settle the callers of every reply frame in `frames` and of every error object
        in `errors` (anything with an `.id`); returns how many were still waiting (a call whose
        deadline passed is not). MalformedFrames, before settling any, when the frames do not split."""
        cdef const uint8_t* b = <const uint8_t*>PyBytes_AS_STRING(frames)
        cdef size_t end = PyBytes_GET_SIZE(frames)
        cdef size_t pos = 0
        cdef uint64_t cid
        cdef uint32_t n
        cdef rl_node* head = NULL
        cdef rl_node* tail = NULL
        cdef rl_node* now_wake = NULL
        cdef Py_ssize_t settled = 0
        while pos < end:                   # check first: a blob that does not split settles nothing
            if end - pos < REPLY_HEADER:
                raise _malformed(f"reply frame at offset {pos}: {end - pos} bytes left, "
                                      f"a header needs {REPLY_HEADER}")
            cid = get64(b + pos)
            n = get32(b + pos + 8)
            if n > end - pos - REPLY_HEADER:
                raise _malformed(f"reply frame {cid} at offset {pos}: length {n} runs "
                                      f"{n - (end - pos - REPLY_HEADER)} bytes past the end of the batch")
            pos += REPLY_HEADER + n
        err_ids = [(e.id, e) for e in errors]
        table = self.table
        lt_lock(&self.mu)
        try:
            pos = 0
            while pos < end:
                cid = get64(b + pos)
                n = get32(b + pos + 8)
                addr = table.pop(cid, None)
                if addr is not None:
                    _settle(<cs_waiter*><size_t>addr,
                            PyBytes_FromStringAndSize(<const char*>b + pos + REPLY_HEADER, n), &head, &tail)
                    settled += 1
                pos += REPLY_HEADER + n
            for cid_obj, e in err_ids:
                addr = table.pop(cid_obj, None)
                if addr is not None:
                    _settle(<cs_waiter*><size_t>addr, e, &head, &tail)
                    settled += 1
        except BaseException:
            # out of memory half way: the callers settled so far still get their replies
            now_wake = self._settle_locked(head, tail, settled)
            lt_unlock(&self.mu)
            with nogil:
                rl_wake_all(now_wake, WOKEN)
            raise
        now_wake = self._settle_locked(head, tail, settled)
        lt_unlock(&self.mu)
        with nogil:
            rl_wake_all(now_wake, WOKEN)
        return settled

    cdef rl_node* _settle_locked(self, rl_node* head, rl_node* tail, Py_ssize_t settled) noexcept nogil:
        """Under the mutex: queue the settled list head..tail; returns what to wake now."""
        if head == NULL:
            return NULL
        self.returning += settled
        if self.handoff == H_ALL:
            return head
        return rl_push(&self.ready, head, tail)

    def fail(self, exc):
        """End every call queued or in flight with `exc` (the first failure sticks); later calls
        return False without being queued."""
        cdef rl_node* head
        cdef cs_waiter* w
        cdef rl_node* ready
        lt_lock(&self.mu)
        if not self.cbroken:
            self.cbroken = True
            self.broken = exc
        exc = self.broken
        head = NULL
        for addr in self.table.values():
            w = <cs_waiter*><size_t>addr
            Py_INCREF(exc)
            w.result = <PyObject*>exc
            w.state = S_FAILED
            w.r.next = head
            head = &w.r
        self.table.clear()
        ready = rl_take(&self.ready)       # settled with their replies before the failure
        self.pend_len = 0
        self.pend_n = 0
        self.returning = 0
        self.snd_word += 1
        lt_unlock(&self.mu)
        with nogil:
            lt_futex_wake(&self.snd_word, 1)
            rl_wake_all(ready, WOKEN)
            rl_wake_all(head, WOKEN)
