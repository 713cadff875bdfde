"""Group commit: many writers, one log write (and one fsync) per group, acknowledged in order.

A writer queues its item under its own ordering lock (the TN's commit lock, the primary's WAL
insert lock, the meta-service's proposal lock), so queue order is the order the caller chose, then
waits with no lock held. Its item is acknowledged only once it is durable and published, and items
are published in queue order. A failure fails everything queued after it, and the committer stays
failed: the caller's in-memory state may be ahead of its log.

Two mechanisms, one per kind of log, chosen by `open_committer`:
- pipelined (pipelined.py): the log queues each record at once and its flusher syncs whatever is
  queued, so the next group is written while the previous one syncs (the embedded log service,
  whose C commit queue, _ext/commit_queue.pyx, is this mechanism for every appender);
- leader (leader.py): one writer at a time writes every queued item with one log call (a remote or
  replicated log, which cannot queue a record without waiting for it).

Both wake a durable group's writers at once, with one wake, and no writer wakes another. The
pipelined committer's writers sleep in the C commit queue on their group's futex word (the flusher
wakes it), the leader committer's in _ext/group_wake.pyx on their group's word (the leader wakes
it). Each woken writer takes the GIL through the gate of _ext/gil_gate.pxd rather than sleeping on
it again.
"""
from __future__ import annotations

import threading
from typing import Callable, Union

from logtide.engine.group_commit.leader import LeaderCommitter
from logtide.engine.group_commit.pipelined import PipelinedCommitter

Committer = Union[PipelinedCommitter, LeaderCommitter]


def open_committer(log, *, publish: Callable[[list, list[int]], None],
                   write_group: Callable[[list], None],
                   lock: threading.Lock | threading.RLock | None = None,
                   on_fail: Callable[[BaseException], None] | None = None) -> Committer:
    """The committer for `log`: pipelined when the log can queue records, else leader.

    Pipelined: `enqueue(payload, item)`, and `publish(items, lsns)` runs under `lock` once the
    items are durable; `on_fail(exc)` is told once when the committer fails. Leader: `enqueue(item)`,
    and `write_group(items)` writes and publishes a group. `committer.pipelined` says which one it is."""
    if callable(getattr(log, "enqueue", None)) and callable(getattr(log, "wait_durable", None)):
        return PipelinedCommitter(log, publish, lock, on_fail=on_fail)
    return LeaderCommitter(write_group)


__all__ = ["Committer", "LeaderCommitter", "PipelinedCommitter", "open_committer"]
