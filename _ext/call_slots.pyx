# cython: language_level=3
"""CallSlots: the calls of one framed-carrier connection, queued and waited for without Python on the wait path.

A caller's `call(method, request, timeout)` packs its call frame straight into the connection's
pending buffer (the id is assigned there, under a C mutex), registers a waiter on its own stack and
sleeps with the GIL released. The sender `take()`s (or `poll()`s) the pending
frames as one blob (the batch rule of docs/rpc.md: once every caller whose reply was just handed over has
called again, or LINGER_S after the last call, at most LINGER_MAX_S after the first). The reader
`deliver()`s a REPLIES frame: one call splits the reply frames, settles the waiters by id and
wakes them all with one futex wake (every waiting caller sleeps on the slots' group word). Woken
together, the callers would queue on the GIL, each sleeping on it and needing one more wake-up: so a
woken caller that finds another on its way into Python spins for it first, as long as a sleep would
cost on this host, then yields its CPU and waits its turn (_ext/gil_gate.pxd, patient). A chain of
one caller waking the next costs one wake-up's latency per caller in series (33 us on a VM whose idle vCPUs halt): 32K calls/s from 32 threads,
where the group wake gives 55K.
`fail(exc)` ends every call queued or in flight with `exc`. A sender on an event loop (the
client's WireLoop) uses poll() and open_notify()'s eventfd instead of blocking in take().
Attached to the connection's socket (attach(fd), for a poll() sender), the caller whose call
completes a batch sends it as a CALLS frame itself, with the GIL released, and the loop writes
its own frames through write() (_ext/socket_writer.pxd has the rule that keeps the bytes in order);
after a deliver() the loop polls once and keeps a timer by the linger, so no returning caller
needs to wake it.

    s = CallSlots(linger_s, linger_max_s, max_batch_bytes)
    s.call(method, request, timeout) -> reply bytes | a delivered error object | None (deadline) |
                                        the failure (an exception) | False (already failed: not queued)
    s.take(timeout=-1) -> frames blob | b"" (timeout) | None (failed)
    s.poll() -> frames blob | None (failed) | seconds to wait at most (-1.0: until the eventfd)
    s.open_notify() -> an eventfd written whenever a blocked take() would have been woken
    s.deliver(frames, errors) -> settled; s.fail(exc)
    s.attach(fd); s.release(); s.write(frame) -> None | bytes for the transport; s.take_rest();
    s.bind_methods(n); s.detach()

Frames are those of engine/rpc/call_frames.py (little-endian):
    call frame:  [u64 id][u16 method][u32 length][request]
    reply frame: [u64 id][u32 length][response]
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
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
    /* _cut_locked: a frame names a method the server does not know yet */
    #define CS_NOT_BOUND ((size_t)-1)
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
    size_t NOT_BOUND "CS_NOT_BOUND"
    void cs_drain(int fd) nogil
    int cs_eventfd() nogil
    void* cs_get_last(uint64_t* epoch) nogil
    void cs_set_last(void* s, uint64_t epoch) nogil

# the call and reply frames' layout is the framed carrier's (one format, one place)
from logtide._ext.wire_format cimport (CALL_HEADER, FRAME_HEADER, K_CALLS, REPLY_HEADER, get16, get32, get64,
                                      put16, put32, put64, wire_seal)
from logtide._ext.socket_writer cimport (SW_LOOP, SW_SENT, SocketWriter, sw_attach, sw_can_send_locked,
                                         sw_destroy, sw_detach, sw_init, sw_send_locked)
from logtide._ext.futex cimport (lt_futex_wait, lt_futex_wake, lt_futex_wake_all, lt_load, lt_lock, lt_mutex,
                                 lt_mutex_destroy, lt_mutex_init, lt_notify, lt_now, lt_store, lt_unlock)
from logtide._ext.gil_gate cimport (lt_py_enter, lt_py_got, lt_py_leave, lt_py_queue_spin, lt_py_queued_now,
                                    lt_py_short_holds, lt_spin_bound, lt_wake_issued, lt_wake_seen)
DEF S_WAITING = 0
DEF S_REPLY = 1
DEF S_FAILED = 2
DEF RECHECK_S = 0.05      # a sleeping caller re-checks its deadline at least this often
DEF KEEP_BYTES = 4 << 20  # a sent buffer larger than this is freed, not kept
DEF MAX_METHOD = 0x10000   # no method index reaches it (u16)

DEF WOKEN = 1             # a waiter's word once it is settled (0 while it waits)
# a woken caller's spin for the GIL: at least this, at most SPIN_MAX (a caller's Python between
# calls is 5-20 us, so a longer wait is for a caller that went on to other work)
DEF SPIN_MIN = 5e-6
DEF SPIN_MAX = 60e-6


cdef struct cs_waiter:
    # one waiting call, on its caller's stack
    int word              # 0 while it waits, WOKEN once its outcome is set
    int state             # S_WAITING, S_REPLY or S_FAILED: whether its outcome is set and which
    uint64_t id
    PyObject* result      # the outcome (a new reference)
    cs_waiter* next       # its link in a settled list


cdef inline void _futex_wait_s(int* w, int val, double s) noexcept nogil:
    """Sleep while *w == val, at most s seconds."""
    lt_futex_wait(w, val, <long long>((s if s > 0 else 0.0) * 1e9))


cdef inline void _settle(cs_waiter* w, object result, cs_waiter** head):
    """Give waiter `w` its outcome (a new reference to `result`) and push it on the list of callers to wake."""
    Py_INCREF(result)
    w.result = <PyObject*>result
    w.state = S_REPLY
    w.next = head[0]
    head[0] = w


cdef inline void _wake_all(cs_waiter* w, int* group_word) noexcept nogil:
    """Mark every settled waiter of the list woken, then wake the group word's sleepers at once.
    Reads next before the store: once its word is set, a waiter may return and its stack frame be
    reused."""
    cdef cs_waiter* nxt
    if w == NULL:
        return
    lt_wake_issued()
    while w != NULL:
        nxt = w.next
        lt_store(&w.word, WOKEN)
        w = nxt
    lt_futex_wake_all(group_word)


def gil_queue() -> int:
    """Callers woken by a reply and not back in Python yet (this process, every CallSlots): 0 when
    no call is returning. A caller's GIL spin depends on it (gil_gate.pxd, lt_py_queue_spin)."""
    return lt_py_queued_now()


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
    cdef Py_ssize_t live_n      # len(table), for code without the GIL
    cdef int group_word         # every waiting caller sleeps on it; bumped to wake them
    cdef Py_ssize_t returning   # callers whose reply was handed over and that have not called again
    cdef uint64_t epoch         # bumped when the batch rule stops waiting for the returning callers
    cdef double first_at, last_call
    cdef int snd_word           # the sender's futex word: bumped to wake it
    cdef bint snd_sleeping
    cdef int notify_fd          # an eventfd also written to wake the sender (-1: none; see poll)
    cdef bint cbroken
    cdef object broken
    cdef SocketWriter sw        # the socket, for callers that send their own batch (attach())
    cdef bint direct            # attached (read under the mutex; the writer rechecks under its own)
    cdef uint8_t* dout          # a direct sender's batch (the writer's mutex guards it)
    cdef size_t dout_cap
    cdef unsigned int methods_bound   # a direct batch names only methods below it (writer's mutex)
    cdef bint timed             # the sender has a timer armed that polls by the linger (see poll)
    cdef double delivered_at    # when replies last settled callers
    cdef readonly uint64_t direct_batches
    cdef readonly double linger_s, linger_max_s
    cdef readonly size_t max_batch_bytes
    cdef readonly uint64_t batches, calls

    def __cinit__(self, double linger_s=0.001, double linger_max_s=0.01, size_t max_batch_bytes=256 << 10):
        lt_mutex_init(&self.mu)
        self.next_id = 1
        self.table = {}
        self.linger_s, self.linger_max_s = linger_s, linger_max_s
        self.max_batch_bytes = max(max_batch_bytes, <size_t>1)
        self.broken = None
        self.notify_fd = -1
        sw_init(&self.sw)

    def __dealloc__(self):
        if self.notify_fd >= 0:
            close(self.notify_fd)
        free(self.pend)
        free(self.out)
        free(self.dout)
        sw_destroy(&self.sw)
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
        cdef bint wake_sender, direct, slept = False
        cdef int seen
        cdef double now, end, left, bound
        if method > 0xFFFF or n > 0xFFFFFFFF:
            raise ValueError("call frame: method index or request too large")
        w.word = 0
        w.next = NULL
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
        self.live_n += 1
        # attached, the caller that completes a batch sends it, unless calls of another batch are
        # in flight (_send_direct); the sender is woken only for a first call that no armed timer
        # will see by the linger
        direct = self.direct and self.returning == 0 and self.live_n <= self.pend_n
        wake_sender = self.snd_sleeping and not direct and (
            self.returning == 0 or (self.pend_n == 1 and not self.timed))
        if wake_sender:
            self.snd_word += 1
        lt_unlock(&self.mu)
        end = now + timeout
        with nogil:
            if direct and self._send_direct() and self.notify_fd >= 0:
                lt_notify(self.notify_fd)
            if wake_sender:
                lt_futex_wake(&self.snd_word, 1)
                if self.notify_fd >= 0:
                    lt_notify(self.notify_fd)
            lt_py_leave()          # this thread gives up the GIL: a woken caller need not wait for it
            while True:
                # the group word before the own word: a wake after this read fails the sleep
                seen = lt_load(&self.group_word)
                if lt_load(&w.word) != 0:
                    break
                left = end - lt_now()
                if left <= 0:
                    break
                _futex_wait_s(&self.group_word, seen, left if left < RECHECK_S else RECHECK_S)
                slept = True
            if lt_load(&w.word) != 0:
                if slept:
                    lt_wake_seen()
                # patient while callers pass the gate on quickly (gil_gate.pxd): a caller's
                # turn is then nearer than a sleep on the GIL and the wake after it
                bound = lt_spin_bound(SPIN_MIN, SPIN_MAX)
                lt_py_enter(lt_py_queue_spin(bound), lt_py_short_holds(bound))
        lt_py_got()
        if lt_load(&w.word) == 0:
            lt_lock(&self.mu)
            if w.state == S_WAITING:
                self.table.pop(w.id, None)  # the deadline passed: forget the call (a late reply is dropped)
                self.live_n -= 1
                lt_unlock(&self.mu)
                return None
            lt_unlock(&self.mu)
            # settled just now: its deliverer is about to mark it woken, and must not find the frame gone
            with nogil:
                while True:
                    seen = lt_load(&self.group_word)
                    if lt_load(&w.word) != 0:
                        break
                    _futex_wait_s(&self.group_word, seen, RECHECK_S)
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
        give_up = lt_now() + timeout if timeout >= 0 else -1.0
        with nogil:
            lt_lock(&self.mu)
            while True:
                if self.cbroken:
                    broken = True
                    break
                now = lt_now()
                due = self._batch_due_locked(now)
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
                self.snd_sleeping = True
                word = self.snd_word
                lt_unlock(&self.mu)
                _futex_wait_s(&self.snd_word, word, until - now)
                lt_lock(&self.mu)
                self.snd_sleeping = False
            if not broken and not empty:
                cut = self._cut_locked(&self.out, &self.out_cap, MAX_METHOD)
            lt_unlock(&self.mu)
        if broken:
            return None
        if empty:
            return b""
        return self._out_blob(cut)

    cdef double _batch_due_locked(self, double now) noexcept nogil:
        """Under the mutex, the batch rule (module doc) for take() and poll(): 0 when a batch goes
        now, else when it goes at the latest (the linger's end), or -1 with nothing queued."""
        cdef double lend
        if self.pend_n and self.returning == 0:
            return 0
        if self.pend_n:
            lend = min(self.first_at + self.linger_max_s, self.last_call + self.linger_s)
            if now >= lend:
                self.returning = 0     # those callers went on to other work
                self.epoch += 1
                return 0
            return lend
        if self.direct and self.returning > 1:
            # attached, a returning caller's call wakes no one: the sender's timer is what lets
            # its batch go by the linger, and callers that stay away that long count as gone. A
            # lone returning caller needs no timer: its call completes the batch (a timer per call
            # cost a one-thread client's loop a wake-up per call, 88 us of CPU per call against 69)
            lend = self.delivered_at + self.linger_s
            if now >= lend:
                self.returning = 0
                self.epoch += 1
                return -1
            return lend
        return -1

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef size_t _cut_locked(self, uint8_t** out, size_t* out_cap, unsigned int bound) noexcept nogil:
        """Under the mutex: move whole pending frames, up to max_batch_bytes (at least one), into
        out[0] (grown as needed); returns their size: 0 when no memory, NOT_BOUND (and nothing
        moved) when one of them names a method index of `bound` or more."""
        cdef size_t cut = 0, flen
        cdef Py_ssize_t k = 0
        cdef void* p
        while cut < self.pend_len:
            flen = CALL_HEADER + get32(self.pend + cut + 10)
            if cut and cut + flen > self.max_batch_bytes:
                break
            if get16(self.pend + cut + 8) >= bound:
                return NOT_BOUND
            cut += flen
            k += 1
        if cut > out_cap[0]:
            p = realloc(out[0], cut)
            if p == NULL:
                return 0
            out[0], out_cap[0] = <uint8_t*>p, cut
        if cut:
            memcpy(out[0], self.pend, cut)
            memmove(self.pend, self.pend + cut, self.pend_len - cut)
            self.pend_len -= cut
            self.pend_n -= k
            if self.pend_n:
                self.first_at = lt_now()
            self.batches += 1
            self.calls += k
        return cut

    cdef bint _send_direct(self) noexcept nogil:
        """A caller that completed a batch sends it (every due batch) on the attached socket, with
        the GIL released; True when the sender must do it instead: the loop owns the writes, a
        batch names a method the server does not know yet, or the send would block."""
        cdef size_t cut
        cdef uint8_t hdr[FRAME_HEADER + 1]
        cdef bint loop = False
        lt_lock(&self.sw.mu)
        while True:
            if not sw_can_send_locked(&self.sw):
                loop = True
                break
            lt_lock(&self.mu)
            if self.cbroken or self.pend_n == 0 or self.returning != 0:
                lt_unlock(&self.mu)
                break                      # sent already, failed, or no longer due
            if self.live_n > self.pend_n:
                # Calls of another batch are in flight: the loop sends this one. Sent at once, the
                # two batches' callers would stay two cohorts, each frame half full, for good; the
                # loop, woken, often reads the other batch's replies first, and the batch rule
                # then waits for their callers too, which merges them.
                lt_unlock(&self.mu)
                loop = True
                break
            cut = self._cut_locked(&self.dout, &self.dout_cap, self.methods_bound)
            lt_unlock(&self.mu)
            if cut == 0 or cut == NOT_BOUND:
                loop = True
                break
            hdr[FRAME_HEADER] = K_CALLS
            wire_seal(hdr, self.dout, cut)
            self.direct_batches += 1
            if sw_send_locked(&self.sw, hdr, FRAME_HEADER + 1, self.dout, cut) != SW_SENT:
                loop = True
                break
        lt_unlock(&self.sw.mu)
        return loop

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
        with nogil:
            lt_lock(&self.mu)
            self.snd_sleeping = False
            if self.cbroken:
                broken = True
            else:
                now = lt_now()
                due = self._batch_due_locked(now)
                self.timed = False
                if due == 0:
                    send = True
                    cut = self._cut_locked(&self.out, &self.out_cap, MAX_METHOD)
                else:
                    wait = max(0.0, due - now) if due > 0 else -1.0
                    self.timed = due > 0
                    self.snd_sleeping = True
            lt_unlock(&self.mu)
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
        cdef cs_waiter* head = NULL
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
                    self.live_n -= 1
                    _settle(<cs_waiter*><size_t>addr,
                            PyBytes_FromStringAndSize(<const char*>b + pos + REPLY_HEADER, n), &head)
                    settled += 1
                pos += REPLY_HEADER + n
            for cid_obj, e in err_ids:
                addr = table.pop(cid_obj, None)
                if addr is not None:
                    self.live_n -= 1
                    _settle(<cs_waiter*><size_t>addr, e, &head)
                    settled += 1
        except BaseException:
            # out of memory half way: the callers settled so far still get their replies
            self._release_settled(head, settled)
            raise
        self._release_settled(head, settled)
        return settled

    cdef void _release_settled(self, cs_waiter* head, Py_ssize_t settled) noexcept:
        """With the mutex held: count the settled callers as returning, unlock, and wake them with
        the GIL released (woken while this thread holds it, they would all sleep on it)."""
        self.returning += settled
        self.delivered_at = lt_now()
        if self.direct:
            self.timed = True          # the loop that delivers polls next (the linger's timer)
        lt_unlock(&self.mu)
        with nogil:
            _wake_all(head, &self.group_word)

    def fail(self, exc):
        """End every call queued or in flight with `exc` (the first failure sticks); later calls
        return False without being queued."""
        cdef cs_waiter* head = NULL
        cdef cs_waiter* w
        lt_lock(&self.mu)
        if not self.cbroken:
            self.cbroken = True
            self.broken = exc
        exc = self.broken
        for addr in self.table.values():
            w = <cs_waiter*><size_t>addr
            Py_INCREF(exc)
            w.result = <PyObject*>exc
            w.state = S_FAILED
            w.next = head
            head = w
        self.table.clear()
        self.live_n = 0
        self.pend_len = 0
        self.pend_n = 0
        self.returning = 0
        self.snd_word += 1
        lt_unlock(&self.mu)
        with nogil:
            lt_futex_wake(&self.snd_word, 1)
            _wake_all(head, &self.group_word)

    # --- the attached socket (the event loop's side) ----------------------------------------------

    def attach(self, int fd) -> None:
        """From now on a caller that completes a batch sends it itself, on a dup of socket `fd`,
        once the loop released the writes (release()); every write of the loop then goes through
        write(), so the bytes on the socket stay in order."""
        if sw_attach(&self.sw, fd) < 0:
            raise OSError("call stream: dup() of the socket failed")
        lt_lock(&self.mu)
        self.direct = True
        lt_unlock(&self.mu)

    def detach(self) -> None:
        """Stop sending on the socket (before the loop closes it); every batch is the sender's again."""
        with nogil:
            sw_detach(&self.sw)
        lt_lock(&self.mu)
        self.direct = False
        lt_unlock(&self.mu)

    def bind_methods(self, unsigned int n) -> None:
        """Method indexes below n are known to the server (their METHODS frame is written)."""
        with nogil:
            lt_lock(&self.sw.mu)
            self.methods_bound = n
            lt_unlock(&self.sw.mu)

    def write(self, bytes data):
        """The loop writes `data`: None when it went on the socket (or the socket failed: the
        reader sees the break), else the bytes that the loop's transport must write now (the rest
        of a send that would have blocked comes first)."""
        cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
        cdef size_t n = PyBytes_GET_SIZE(data)
        cdef int r = -1                    # -1: the loop owns the writes
        with nogil:
            lt_lock(&self.sw.mu)
            if sw_can_send_locked(&self.sw):
                r = sw_send_locked(&self.sw, p, n, NULL, 0)
        try:
            if r == SW_LOOP:               # the unsent part of data is the rest
                return self._take_rest_locked()
            if r >= 0:
                return None
            return self._take_rest_locked() + data if self.sw.rest_len else data
        finally:
            lt_unlock(&self.sw.mu)

    def take_rest(self):
        """The bytes a caller's send left for the loop to write first (None: none)."""
        with nogil:
            lt_lock(&self.sw.mu)
        try:
            return self._take_rest_locked() if self.sw.rest_len else None
        finally:
            lt_unlock(&self.sw.mu)

    cdef bytes _take_rest_locked(self):
        out = PyBytes_FromStringAndSize(<char*>self.sw.rest, self.sw.rest_len)
        self.sw.rest_len = 0
        return out

    def release(self) -> None:
        """The loop's transport wrote everything: callers may send again."""
        with nogil:
            lt_lock(&self.sw.mu)
            if self.sw.fd >= 0 and self.sw.rest_len == 0:
                self.sw.loop_owns = False
            lt_unlock(&self.sw.mu)
