# cython: language_level=3
"""GroupWake: the leader committer's writers asleep in C, woken a group at a time.

The leader committer (engine/group_commit/leader.py) keeps its queue and its choice of the next
leader in Python; the sleep is here, with the GIL released. A writer sleeps on one of three futex
words: the group in flight's, the next group's, or the next leader's. It wakes when the tickets
written reach its ticket, when it is named the next leader, when the committer fails, or when its
word is bumped for another reason (it then looks again). Settling a group is one wake of its word,
issued with the GIL released, and each woken writer takes the GIL through the gate (gil_gate.pxd)
rather than queue on it: no writer wakes the next one.
"""
from libc.stdint cimport uint64_t

from logtide._ext.futex cimport lt_futex_wait, lt_futex_wake_all, lt_load, lt_load64, lt_now, lt_store, lt_store64
from logtide._ext.gil_gate cimport lt_py_enter, lt_py_leave, lt_spin_bound, lt_wake_issued, lt_wake_seen

DEF SPIN_MIN = 5e-6

cdef enum:
    S_TIMED_OUT = -1
    S_LOOK_AGAIN = 0
    S_WRITTEN = 1
    S_LEAD = 2
    S_FAILED = 3

LEAD_WORD = 2            # the word of the writer that will lead the next group
TIMED_OUT, LOOK_AGAIN, WRITTEN, LEAD, FAILED = S_TIMED_OUT, S_LOOK_AGAIN, S_WRITTEN, S_LEAD, S_FAILED


cdef class GroupWake:
    """Three futex words, the tickets written, the ticket named to lead next, and a failed flag."""

    cdef uint64_t _done
    cdef uint64_t _lead
    cdef int _failed
    cdef int _words[3]
    cdef double _spin_max
    cdef bint _patient

    def __cinit__(self, double spin_max=60e-6, bint patient=False):
        self._done = 0
        self._lead = 0
        self._failed = 0
        self._words[0] = self._words[1] = self._words[2] = 0
        self._spin_max = spin_max if spin_max > SPIN_MIN else SPIN_MIN
        self._patient = patient

    @property
    def done(self) -> int:
        """Tickets written (a prefix: groups are written in ticket order)."""
        return lt_load64(&self._done)

    @property
    def lead(self) -> int:
        """The ticket named to lead the next group (0: none yet)."""
        return lt_load64(&self._lead)

    def word(self, int k) -> int:
        """Word k's value now: read it under the committer's lock, then pass it to wait()."""
        if k < 0 or k > 2:
            raise ValueError(f"word is 0, 1 or 2, got {k}")
        return lt_load(&self._words[k])

    def set_done(self, uint64_t done) -> None:
        """Record the tickets written (before the wake: a woken writer reads it)."""
        lt_store64(&self._done, done)

    def grant(self, uint64_t ticket) -> None:
        """Name the writer of `ticket` the next leader (woken by wake(..., lead=True))."""
        lt_store64(&self._lead, ticket)

    def wake(self, int k, bint lead=False, bint nudge=False) -> None:
        """Wake group word k's writers, the next leader's word when `lead`, and with `nudge` the
        other group's word (its writers look again: nobody was named to lead them). One wake per
        word, with the GIL released."""
        if k < 0 or k > 1:
            raise ValueError(f"group word is 0 or 1, got {k}")
        with nogil:
            lt_wake_issued()
            lt_futex_wake_all(&self._words[k])
            if lead:
                lt_futex_wake_all(&self._words[2])
            if nudge:
                lt_futex_wake_all(&self._words[1 - k])

    def fail(self) -> None:
        """Fail the committer: every sleeping writer wakes."""
        lt_store(&self._failed, 1)
        with nogil:
            lt_futex_wake_all(&self._words[0])
            lt_futex_wake_all(&self._words[1])
            lt_futex_wake_all(&self._words[2])

    cdef inline int _state(self, uint64_t ticket) noexcept nogil:
        if lt_load64(&self._done) >= ticket:
            return S_WRITTEN
        if lt_load64(&self._lead) == ticket:
            return S_LEAD
        if lt_load(&self._failed):
            return S_FAILED
        return S_LOOK_AGAIN

    def wait(self, int k, int seen, uint64_t ticket, double timeout) -> int:
        """Sleep on word k, whose value was `seen`, until ticket is written (WRITTEN), named to
        lead (LEAD), the committer failed (FAILED), the word moved on for another reason
        (LOOK_AGAIN) or `timeout` seconds passed (TIMED_OUT)."""
        cdef int r
        cdef bint slept = False
        cdef double now, end
        if k < 0 or k > 2:
            raise ValueError(f"word is 0, 1 or 2, got {k}")
        end = lt_now() + (timeout if timeout > 0 else 0)
        with nogil:
            # this thread gives up the GIL: a woken writer on its way in may take it uncontended
            lt_py_leave()
            while True:
                r = self._state(ticket)
                if r != S_LOOK_AGAIN or lt_load(&self._words[k]) != seen:
                    break
                now = lt_now()
                if now >= end:
                    r = S_TIMED_OUT
                    break
                lt_futex_wait(&self._words[k], seen, <long long>((end - now) * 1e9) + 1)
                slept = True
            if slept:
                lt_wake_seen()
            lt_py_enter(lt_spin_bound(SPIN_MIN, self._spin_max), self._patient)
        return r
