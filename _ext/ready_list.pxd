# Waiters whose outcome is set and that are woken by handoff: one at once, and each later one by the
# waiter woken before it, when that one gives up the GIL (so it finds the GIL free), with a stall
# clock for an owner thread (the commit queue's flusher) to wake at once the ready waiters nobody
# came back for. Used by the commit queue (waiter_handoff.pxd), whose waiter struct begins with an
# rl_node. Every rl_*
# function but rl_wake and rl_wake_all runs under its owner's mutex; waking happens after unlocking.
from libc.stdint cimport uint64_t

from logtide._ext.futex cimport lt_futex_wake, lt_now, lt_store


cdef struct rl_node:
    int word              # the futex word its waiter sleeps on: 0 while waiting, set to wake it
    rl_node* next


cdef struct ReadyList:
    rl_node* head         # settled and not woken yet, in settling order
    rl_node* tail
    double handed         # when one was last woken
    double stall          # seconds: ready waiters left unclaimed this long are woken all at once
    uint64_t stalls       # times that happened


cdef inline rl_node* rl_push(ReadyList* l, rl_node* first, rl_node* last) noexcept nogil:
    """Queue the settled list first..last, and return the waiter to wake now: first when none was
    ready (the rest become ready), else NULL (they join behind those still there)."""
    if l.head == NULL:
        l.head = first.next
        l.tail = last if first.next != NULL else NULL
        first.next = NULL
        l.handed = lt_now()
        return first
    l.tail.next = first
    l.tail = last
    return NULL


cdef inline rl_node* rl_pop(ReadyList* l) noexcept nogil:
    """The next ready waiter, detached (NULL: none): a waiter about to give up the GIL wakes it."""
    cdef rl_node* r = l.head
    if r != NULL:
        l.head = r.next
        if l.head == NULL:
            l.tail = NULL
        r.next = NULL
        l.handed = lt_now()
    return r


cdef inline rl_node* rl_take(ReadyList* l) noexcept nogil:
    """Every ready waiter, detached."""
    cdef rl_node* r = l.head
    l.head = l.tail = NULL
    return r


cdef inline rl_node* rl_take_stalled(ReadyList* l, double now) noexcept nogil:
    """The ready waiters, when none was woken for `stall` seconds (the waiter woken before them did
    not come back to hand off): its owner then wakes them all."""
    if l.head != NULL and now - l.handed >= l.stall:
        l.stalls += 1
        return rl_take(l)
    return NULL


cdef inline double rl_stall_at(ReadyList* l, double until) noexcept nogil:
    """`until`, or when the ready waiters are to be taken as stalled if that is sooner."""
    if l.head != NULL and l.handed + l.stall < until:
        return l.handed + l.stall
    return until


cdef inline int rl_remove(ReadyList* l, rl_node* w) noexcept nogil:
    """Take w out (a settled waiter claiming its outcome itself): 1 when it headed the list, 2 when
    it was further back, 0 when it was not in it (whoever detached it is waking it)."""
    cdef rl_node* q = l.head
    if q == w:
        l.head = w.next
        if l.head == NULL:
            l.tail = NULL
        return 1
    while q != NULL and q.next != w:
        q = q.next
    if q == NULL:
        return 0
    q.next = w.next
    if l.tail == w:
        l.tail = q
    return 2


cdef inline void rl_wake(rl_node* w, int outcome) noexcept nogil:
    """Set w's word to `outcome` (not 0) and wake it."""
    lt_store(&w.word, outcome)
    lt_futex_wake(&w.word, 1)


cdef inline void rl_wake_all(rl_node* w, int outcome) noexcept nogil:
    """rl_wake every waiter of a detached list. Reads next before the store: once its word is set, a
    waiter may return and its stack frame be reused (a late futex wake there is only spurious)."""
    cdef rl_node* nxt
    while w != NULL:
        nxt = w.next
        rl_wake(w, outcome)
        w = nxt
