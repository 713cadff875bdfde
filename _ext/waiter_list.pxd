# The commit queue's waiters, and how durable ones are woken: all at once, a group with one futex
# wake (a woken appender then takes the GIL through gil_gate.pxd). Every wl_* function but wl_settle
# and wl_sleep runs under the queue's mutex; waking happens after it is unlocked.
#
# A waiter lives on its waiting thread's stack. It sleeps on a futex, its group's shared word: one
# FUTEX_WAKE wakes the group. Registered waiters are kept in LSN order, so making records durable
# detaches a prefix of the list.
from libc.stdint cimport uint64_t

from logtide._ext.futex cimport lt_futex_wait_forever, lt_futex_wake_all, lt_load, lt_store
from logtide._ext.gil_gate cimport lt_wake_issued, lt_wake_seen


cdef enum:
    W_WAITING = 0
    W_DURABLE = 1
    W_FAILED = 2


cdef struct lt_waiter:
    int word              # its outcome: W_WAITING, W_DURABLE or W_FAILED
    lt_waiter* next       # its link in the list
    int* shared           # the group word it sleeps on
    uint64_t lsn          # settled once every record up to it is durable


cdef struct WaitList:
    lt_waiter* head       # registered and not yet durable, in LSN order
    lt_waiter* tail


cdef inline void wl_link(WaitList* l, lt_waiter* w, int* group_word) noexcept nogil:
    """Register w at the tail (its LSN is the newest handed out), to sleep on `group_word`, its group's."""
    w.word = W_WAITING
    w.next = NULL
    w.shared = group_word
    if l.tail == NULL:
        l.head = w
    else:
        l.tail.next = w
    l.tail = w


cdef inline void wl_insert(WaitList* l, lt_waiter* w, int* group_word) noexcept nogil:
    """Register w where its LSN belongs (it waits for a record queued earlier), to sleep on
    `group_word`: that of the group its LSN is in (the filling one, or the one the flusher holds).
    Any group word would be correct, since settling wakes the word of every waiter it settles; the
    right one spares the other group a spurious wake-up."""
    cdef lt_waiter* p
    w.word = W_WAITING
    w.shared = group_word
    if l.head == NULL or l.head.lsn > w.lsn:
        w.next = l.head
        l.head = w
        if l.tail == NULL:
            l.tail = w
        return
    p = l.head
    while p.next != NULL and p.next.lsn <= w.lsn:
        p = p.next
    w.next = p.next
    p.next = w
    if w.next == NULL:
        l.tail = w


cdef inline lt_waiter* wl_detach_durable(WaitList* l, uint64_t lsn) noexcept nogil:
    """Every record up to lsn is durable: detach the waiters at or below it, to wake."""
    cdef lt_waiter* w = l.head
    cdef lt_waiter* last = NULL
    cdef lt_waiter* first = l.head
    while w != NULL and w.lsn <= lsn:
        last = w
        w = w.next
    if last == NULL:
        return NULL
    l.head = w
    if w == NULL:
        l.tail = NULL
    last.next = NULL
    return first


cdef inline lt_waiter* wl_take_all(WaitList* l) noexcept nogil:
    """Every registered waiter, detached."""
    cdef lt_waiter* w = l.head
    l.head = l.tail = NULL
    return w


cdef inline void wl_settle(lt_waiter* w, int outcome) noexcept nogil:
    """Give each waiter of a detached list its outcome and wake it: one FUTEX_WAKE per group word,
    after every outcome is set, so the flusher is not preempted per waiter. Reads next before the
    store: once its word is set, a waiter may return and its stack frame be reused."""
    cdef lt_waiter* nxt
    cdef int* sh
    cdef int* w0 = NULL
    cdef int* w1 = NULL
    if w != NULL:
        lt_wake_issued()
    while w != NULL:
        nxt = w.next
        sh = w.shared
        lt_store(&w.word, outcome)
        if sh != w0 and sh != w1:
            if w0 == NULL:
                w0 = sh
            elif w1 == NULL:
                w1 = sh
            else:  # (a queue has two group words) wake it now rather than lose it
                lt_futex_wake_all(sh)
        w = nxt
    if w0 != NULL:
        lt_futex_wake_all(w0)
    if w1 != NULL:
        lt_futex_wake_all(w1)


cdef inline void wl_sleep(lt_waiter* w) noexcept nogil:
    """Sleep until w is settled. No timeout: the word changes before its wake (no wake is lost),
    and a timed wait arms and cancels a timer at every append."""
    cdef int seen
    cdef bint slept = False
    # the group's word: read it before the outcome, so that a bump after that read fails the wait
    while True:
        seen = lt_load(w.shared)
        if lt_load(&w.word) != W_WAITING:
            break
        lt_futex_wait_forever(w.shared, seen)
        slept = True
    if slept:
        lt_wake_seen()
