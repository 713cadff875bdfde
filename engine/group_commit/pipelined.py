"""Pipelined group commit: writers hand their records to the log at once and wait for durability
apart, so the next group forms (and is written) while the previous one is being synced.

For a log that queues a record without waiting for it (the embedded log service: `enqueue(payload)
-> lsn` and `wait_durable(lsn)` on its C commit queue). A writer calls `enqueue(payload, item)`
under its own ordering lock (the TN's commit lock, the primary's WAL insert lock): the log queues
the record and gives it the next LSN, so LSN order is the caller's order, and the item joins the
pending list in that order. Then, with no lock held, `wait(lsn)` sleeps in the log (a futex in C,
the GIL released) until the log's flusher has made the record durable, in a group with whatever
else was queued meanwhile. The first writer of a durable group to get the GIL back publishes, under
the publication lock, every pending item up to the durable LSN, in order (`publish(items, lsns)`);
the others find theirs published. A writer returns only once its item is durable and published.

The log's flusher wakes a durable group's writers all at once, with one futex wake; each then
spins for the GIL about as long as a sleep would cost on this machine (commit_queue.pyx), rather
than being handed on one at a time by the writer before it. There is no leader and no group
boundary in Python: the log's flusher takes everything queued whenever it is free, and no writer
waits for another writer's wake-up to hand its record over.

Over the embedded log service the enqueue frames the record straight into the commit queue and the
wait sleeps there, all in C (_ext/pipelined_core.pyx), and the TN's and the primary's C paths call
both without a Python frame; the publication is the caller's Python, once per durable group.

A failed log fails every writer waiting or coming, and the committer stays failed: the caller's
in-memory state may be ahead of its log.
"""
from __future__ import annotations

import threading
from typing import Callable

from logtide._ext.pipelined_core import PipelinedCore


class PipelinedCommitter(PipelinedCore):
    """Group commit over a log with `enqueue(payload) -> lsn` and `wait_durable(lsn) -> durable lsn`.

    `publish(items, lsns)` makes durable items visible, in LSN order; it runs under `lock` (the
    caller's, when publishing must exclude its writers; else the committer's own). Tickets are LSNs.
    `on_fail(exc)` is called once when the committer fails (the caller stops taking writes).
    `enqueue`, `wait`, `fail`, `drain`, `pending`, `queued`, `failed`, `groups` and `items` are
    PipelinedCore's (_ext/pipelined_core.pyx).
    """

    pipelined = True

    def __init__(self, log, publish: Callable[[list, list[int]], None], lock=None,
                 on_fail: Callable[[BaseException], None] | None = None) -> None:
        # the log wakes a durable group's writers all at once: handing them on one at a time would
        # put one wake across CPUs per writer in series (30 us each on a VM whose idle vCPUs halt)
        super().__init__(log, publish, lock if lock is not None else threading.Lock(), on_fail)
