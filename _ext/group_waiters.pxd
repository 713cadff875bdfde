# The commit queue's waiters, woken a whole durable group at a time. Every wl_* function but
# wl_settle and wl_sleep runs under the queue's mutex; waking happens after it is unlocked.
#
# A waiter lives on its waiting thread's stack and sleeps on its group's shared futex word: the
# flusher sets the outcome of every waiter it settles, then wakes each word once (one FUTEX_WAKE
# for the group), so no waiter waits for another to wake it. Registered waiters are kept in LSN
# order, so making records durable detaches a prefix of the list.
from libc.stdint cimport uint64_t

from logtide._ext.futex cimport lt_bump, lt_futex_wait_forever, lt_futex_wake, lt_load, lt_store

cdef enum:
    W_WAITING = 0
    W_DURABLE = 1
    W_FAILED = 2


cdef struct lt_waiter:
    int word              # the outcome: W_WAITING, W_DURABLE or W_FAILED
    int* shared           # the group word it sleeps on
    uint64_t lsn          # settled once every record up to it is durable
    lt_waiter* next


cdef struct WaitList:
    lt_waiter* head       # registered and not yet durable, in LSN order
    lt_waiter* tail


cdef inline void wl_link(WaitList* l, lt_waiter* w, int* group_word) noexcept nogil:
    """Register w at the tail (its LSN is the newest handed out), sleeping on `group_word`."""
    w.word = W_WAITING
    w.next = NULL
    w.shared = group_word
    if l.tail == NULL:
        l.head = w
    else:
        l.tail.next = w
    l.tail = w


cdef inline void wl_insert(WaitList* l, lt_waiter* w, int* group_word) noexcept nogil:
    """Register w where its LSN belongs (it waits for a record queued earlier), sleeping on
    `group_word`: the word of the group its LSN is in."""
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
    """Every record up to lsn is durable: detach the waiters at or below it (to wake, unlocked)."""
    cdef lt_waiter* first
    cdef lt_waiter* w = l.head
    cdef lt_waiter* last = NULL
    while w != NULL and w.lsn <= lsn:
        last = w
        w = w.next
    if last == NULL:
        return NULL
    first = l.head
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


cdef inline void wake_word(int* word) noexcept nogil:
    """Wake everything sleeping on a group word: bumped first, so a waiter about to sleep does not."""
    lt_bump(word)
    lt_futex_wake(word, 0x7FFFFFFF)


cdef inline void wl_settle(lt_waiter* w, int outcome) noexcept nogil:
    """Give each waiter of a detached list its outcome, then wake each group word once. Reads next
    before the store: once its word is set, a waiter may return and its stack frame be reused."""
    cdef lt_waiter* nxt
    cdef int* sh
    cdef int* w0 = NULL
    cdef int* w1 = NULL
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
                wake_word(sh)
        w = nxt
    if w0 != NULL:
        wake_word(w0)
    if w1 != NULL:
        wake_word(w1)


cdef inline void wl_sleep(lt_waiter* w) noexcept nogil:
    """Sleep until w is settled. The group word is read before the outcome, so a bump after that
    read fails the wait (no wake is lost); a waiter woken for part of its group sleeps again. No
    timeout: a timed wait arms and cancels a timer at every append."""
    cdef int seen
    while True:
        seen = lt_load(w.shared)
        if lt_load(&w.word) != W_WAITING:
            return
        lt_futex_wait_forever(w.shared, seen)
