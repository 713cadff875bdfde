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

The log wakes a durable group's writers by handoff (`set_handoff(True)`, see __init__.py), or all
at once when the committer is made on a thread confined to one CPU (logtide.cpu_affinity). There is
no leader and no group boundary in Python: the log's flusher takes everything queued whenever it is
free, and no writer waits for another writer's wake-up to hand its record over.

Over the embedded log service the enqueue frames the record straight into the commit queue and the
wait sleeps there, all in C (_ext/pipelined_core.pyx), and the TN's and the primary's C paths call
both without a Python frame; the publication is the caller's Python, once per durable group.

A failed log fails every writer waiting or coming, and the committer stays failed: the caller's
in-memory state may be ahead of its log.
"""
from __future__ import annotations

import os
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
        # Across CPUs, a durable group's writers woken at once would each wake only to queue for the
        # GIL behind the others (1.6-3.3 context switches more per write and 10-25 us more CPU, in
        # paired runs of the TN and the primary at 16 threads): they are handed on one at a time.
        # Confined to one CPU (logtide.cpu_affinity) the scheduler runs them one after another
        # anyway, each finding the GIL free, so they are woken at once (no chain; about 10% less CPU).
        set_handoff = getattr(log, "set_handoff", None)
        if callable(set_handoff):
            set_handoff(len(os.sched_getaffinity(0)) > 1)
        super().__init__(log, publish, lock if lock is not None else threading.Lock(), on_fail)
