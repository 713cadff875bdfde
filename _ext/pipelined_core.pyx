# cython: language_level=3
"""PipelinedCore: the pipelined committer (engine/group_commit/pipelined.py) in C.

A writer queues its record under its own ordering lock (`enqueue(payload, item)`: the log gives it
the next LSN, so LSN order is the caller's order) and then, with no lock held, waits (`wait(lsn)`)
until the log made it durable; the first writer of a durable group to get the GIL back publishes
every pending item up to the durable LSN, in order, under the publication lock. Over the embedded
log service the record is framed straight into its commit queue and the wait sleeps there
(commit_queue.pxd), without a Python frame; the TN's and the primary's C paths call enqueue_c and
wait_c (pipelined_core.pxd). Any other log is called through its `enqueue` and `wait_durable`.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport uint8_t, uint64_t

from logtide._ext.commit_queue cimport CommitQueue
from logtide.errors import GroupCommitFailed, InvalidArgument, LogtideError

DEF USER_RECORD = 0
DEF WRITER_SPIN_MAX = 60e-6   # seconds (CommitQueue.set_spin_limit)
DEF COMPACT_AT = 1024       # published entries kept at the lists' head before they are cut off


cdef class PipelinedCore:
    """The committer's state and its queue-and-wait; the Python shell adds the rest of its API."""

    def __init__(self, log, publish, lock, on_fail=None) -> None:
        self.log_enqueue = log.enqueue
        self.log_wait = log.wait_durable
        direct = getattr(log, "pipelined_queue", None)
        direct = direct() if callable(direct) else None
        if direct is not None:
            self.q, self.prefix, self.max_payload = direct
            # a writer runs Python for 10-20 us per record: woken, it may wait that long for the
            # GIL, which a sleep on the GIL and a wake across CPUs can cost more than; and with
            # 16-32 writers woken a group at a time, its turn may take several of those
            self.q.set_spin_limit(WRITER_SPIN_MAX, True)
        self.publish_fn = publish
        self.on_fail = on_fail
        self.lock_acquire = lock.acquire
        self.lock_release = lock.release
        self.pend_items = []
        self.pend_lsns = []

    cdef uint64_t enqueue_c(self, object payload, object item) except 0:
        """enqueue, from C."""
        cdef Py_ssize_t n
        cdef uint64_t lsn
        if self.failure is not None:
            raise GroupCommitFailed(f"an earlier group failed ({self.failure!r})") from self.failure
        try:
            if (self.q is not None and PyBytes_CheckExact(payload)
                    and PyBytes_GET_SIZE(payload) <= self.max_payload):
                lsn = self.q.enqueue_record(USER_RECORD, <const uint8_t*>PyBytes_AS_STRING(self.prefix),
                                            PyBytes_GET_SIZE(self.prefix),
                                            <const uint8_t*>PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload))
            else:   # the log's own checks (and typed errors)
                lsn = self.log_enqueue(payload)
        except BaseException as exc:
            # the caller changed its state for this item already: nothing may commit after it
            self.fail(exc)
            raise GroupCommitFailed(f"the log refused the record ({exc!r})") from exc
        ticket = lsn
        # no allocation the collector counts between the two appends: the lists stay in step
        self.pend_items.append(item)
        self.pend_lsns.append(ticket)
        self.queued_lsn = lsn
        return lsn

    cdef int wait_c(self, uint64_t ticket) except -1:
        """wait, from C."""
        cdef uint64_t durable
        if self.published >= ticket:
            return 0
        if self.failure is not None:
            raise GroupCommitFailed(f"the group could not be flushed ({self.failure!r})") from self.failure
        try:
            if self.q is not None:
                if ticket >= self.q.next_lsn:
                    raise InvalidArgument(f"LSN {ticket} was not handed out yet (the next is {self.q.next_lsn})")
                durable = self.q.wait_published(ticket)
            else:
                durable = self.log_wait(ticket)
        except LogtideError as exc:
            self.fail(exc)
            raise GroupCommitFailed(f"the group could not be flushed ({exc!r})") from exc
        if self.published >= ticket:    # published by an earlier writer of its group
            return 0
        self.lock_acquire()
        try:
            self._publish_upto(ticket, durable)
        finally:
            self.lock_release()
        return 0

    cdef int _publish_upto(self, uint64_t ticket, uint64_t durable) except -1:
        """Under the publication lock: publish every pending item up to the durable LSN."""
        cdef Py_ssize_t k, n, head = self.head
        cdef list lsns = self.pend_lsns
        if self.published >= ticket:
            return 0
        if self.failure is not None:    # a publication failed: its items and all after it fail
            raise GroupCommitFailed(f"the group could not be published ({self.failure!r})") from self.failure
        n = PyList_GET_SIZE(lsns)
        k = head
        while k < n and <uint64_t><object>PyList_GET_ITEM(lsns, k) <= durable:
            k += 1
        if k == head:
            return 0            # a ticket of no item of ours (drain with nothing queued)
        items = self.pend_items[head:k]
        done = lsns[head:k]
        self.head = k
        if k >= COMPACT_AT and 2 * k >= n:
            # (the items are held by `items`: no finalizer runs here)
            del self.pend_items[:k]
            del self.pend_lsns[:k]
            self.head = 0
        try:
            self.publish_fn(items, done)
        except BaseException as exc:
            self.fail(exc)
            raise
        self.published = done[-1]
        self.groups += 1
        self.items += k - head
        return 0

    def enqueue(self, payload, item) -> int:
        """Under the caller's ordering lock: queue `payload` in the log and `item` for publication;
        its ticket (LSN) for `wait`."""
        return self.enqueue_c(payload, item)

    def wait(self, ticket) -> None:
        """Return once the item of `ticket` (and everything queued before it) is durable and published."""
        cdef uint64_t t
        if ticket <= self.published:
            return
        try:
            t = ticket
        except (TypeError, OverflowError):
            t = 0       # not an LSN: the log's own check refuses it
        if t:
            self.wait_c(t)
            return
        if self.failure is not None:
            raise GroupCommitFailed(f"the group could not be flushed ({self.failure!r})") from self.failure
        try:
            self.log_wait(ticket)
        except LogtideError as exc:
            self.fail(exc)
            raise GroupCommitFailed(f"the group could not be flushed ({exc!r})") from exc

    def fail(self, exc: BaseException) -> None:
        """Fail the committer (the caller found its state and its log apart): every later enqueue
        and every wait not yet published raise GroupCommitFailed."""
        if self.failure is None:
            self.failure = exc
            if self.on_fail is not None:
                self.on_fail(exc)

    @property
    def queued(self) -> int:
        """The ticket of the newest item queued (0: none)."""
        return self.queued_lsn

    def pending(self) -> int:
        """Items queued, not yet published."""
        return len(self.pend_lsns) - self.head

    def drain(self) -> None:
        """Return once everything queued so far is durable and published."""
        self.wait_c(self.queued_lsn)

    @property
    def failed(self) -> BaseException | None:
        return self.failure
