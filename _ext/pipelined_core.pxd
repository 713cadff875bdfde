# The pipelined committer's queue-and-wait, callable from C: the TN's small commit (tn_txn.pyx) and
# the primary's single insert (primary_insert.pyx) queue and wait through it without Python frames.
from libc.stdint cimport uint64_t

from logtide._ext.commit_queue cimport CommitQueue


cdef class PipelinedCore:
    cdef CommitQueue q              # the log's commit queue (None: the log's own enqueue / wait_durable)
    cdef bytes prefix               # the data prefix of the user records it frames (replica 0)
    cdef Py_ssize_t max_payload
    cdef object log_enqueue, log_wait
    cdef object publish_fn, on_fail
    cdef object lock_acquire, lock_release
    # queued and not yet published, in LSN order from `head` on (appended under the caller's
    # ordering lock, taken under the publication lock)
    cdef list pend_items, pend_lsns
    cdef Py_ssize_t head
    cdef uint64_t queued_lsn        # the newest LSN queued
    cdef uint64_t published         # the newest LSN published
    cdef object failure
    cdef readonly uint64_t groups   # publications (each one durable prefix at once)
    cdef readonly uint64_t items

    cdef uint64_t enqueue_c(self, object payload, object item) except 0
    cdef int wait_c(self, uint64_t ticket) except -1
    cdef int _publish_upto(self, uint64_t ticket, uint64_t durable) except -1
