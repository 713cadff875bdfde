"""WalInsert: the primary's WAL insert and group write path (as PostgreSQL's WAL insert + XLogFlush).

Under the WAL insert lock and the page lock(s), the record takes the next LSN (the primary is its
log's only writer), the change is applied to the buffered page(s) with that LSN, and the record is
queued. Then, with no lock held, one writer at a time appends every queued record with one
`append_many` (one fsync) and publishes them in LSN order: LogIndex, meta queue, then the write
LSN. A write returns once its record is durable. Over a log that queues records itself (the
embedded log service) the pipelined committer appends, and calls the same publication per durable
group. A log write that fails stops all writes: the pages may hold changes the log does not, and a
restart redoes the log.
"""
from __future__ import annotations

import threading

import numpy as np

from logtide._ext import xlogwriter as xw
from logtide.engine.group_commit import open_committer
from logtide.errors import LogtideError
from logtide.replay.meta_queue import MetaQueue
from logtide.replay.page_index import PageIndex
from logtide.replay.wal_log import WalLog

SMALL_GROUP = 64   # up to this many block references a group is indexed row by row, not through arrays


class WalInsert:
    """The WAL insert lock, the next LSN and xid, the group committer, and the write LSN (every record
    at or below it is durable and published).

    `_wal_lock`, `_assigned_lsn`, `_xid`, `_closed` and `_log_mismatch` keep these names because
    the single-tuple insert in C (_ext/primary_insert.pyx) reads and writes them directly.
    """

    def __init__(self, log, wal: WalLog, index: PageIndex, queue: MetaQueue) -> None:
        self.wal, self.index, self.queue = wal, index, queue
        self.lock = self._wal_lock = threading.RLock()
        self.write_lsn = wal.latest_lsn()     # all of the log is durable at open: recovered pages may be flushed
        self._assigned_lsn = self.write_lsn   # the LSN of the newest record queued (write LSN: durable)
        self._xid = 0                          # the next xid (recovery sets it from the control file and the log)
        self._closed = False     # no more writes: closed, crashed, or stopped by a failed log write
        self.committer = open_committer(log, publish=self._publish_group, write_group=self._write_group,
                                        on_fail=self._stop_writes)
        self.pipelined = self.committer.pipelined

    @property
    def next_xid(self) -> int:
        """The xid the next record takes."""
        return self._xid

    @property
    def stopped(self) -> bool:
        """No more writes: closed, crashed, or stopped by a failed log write."""
        return self._closed

    def stop(self) -> None:
        """Take no more writes."""
        self._closed = True

    def _next_xid(self) -> int:
        x = self._xid & 0xFFFFFFFF
        self._xid += 1
        return x

    def _queue(self, lsn: int, rec: bytes, tags: list[tuple]) -> int:
        """Under the WAL insert lock and the page lock(s), once the page(s) carry the change: queue the
        record of LSN `lsn` (the next one); the ticket to wait on."""
        if self.pipelined:
            ticket = self.committer.enqueue(rec, (rec, tags))
            if ticket != lsn:
                self._log_mismatch(ticket, lsn)
        else:
            ticket = self.committer.enqueue((lsn, [rec], [tags]))
        self._assigned_lsn = lsn
        return ticket

    def _queue_many(self, first: int, recs: list[bytes], tags: list[list[tuple]]) -> int:
        """_queue for the records of LSNs `first`.. in one go (the leader committer writes them as one
        item); the ticket of the last."""
        if self.pipelined:
            for i, rec in enumerate(recs):
                ticket = self._queue(first + i, rec, tags[i])
            return ticket
        self._assigned_lsn = first + len(recs) - 1
        return self.committer.enqueue((first, recs, tags))

    def _log_mismatch(self, ticket: int, lsn: int) -> None:
        """The record queued for LSN `lsn` got `ticket`: the page carries an LSN its record did not
        get; fail the committer and raise."""
        exc = LogtideError(f"the primary's log was appended to by someone else (LSN {ticket}, expected "
                           f"{lsn}); stopping")
        self.committer.fail(exc)
        raise exc

    def _stop_writes(self, exc: BaseException) -> None:
        """The pipelined committer failed: pages may hold changes the log does not; stop (a restart
        redoes the log)."""
        self._closed = True

    def _publish_group(self, items: list[tuple], lsns: list[int]) -> None:
        """The pipelined committer's publication of durable records, in LSN order: LogIndex, meta
        queue, write LSN."""
        if len(items) == 1:
            tags = items[0][1]
            lsn_of_tags = lsns * len(tags)
        else:
            tags, lsn_of_tags = [], []
            for (_, ts), lsn in zip(items, lsns):
                tags.extend(ts)
                lsn_of_tags.extend([lsn] * len(ts))
        if len(tags) <= SMALL_GROUP:
            self.index.add_rows(tags, lsn_of_tags)
        else:
            self.index.add(np.array(tags, dtype=np.uint32).reshape(-1, 5), np.array(lsn_of_tags, dtype=np.uint64))
        self.queue.push_many(lsns, [xw.wal_meta(rec) for rec, _ in items])
        self.write_lsn = lsns[-1]

    def _write_group(self, group: list[tuple]) -> None:
        """The leader committer's write: append the group's records with one fsync, then publish
        them in order."""
        recs = [r for _, rs, _ in group for r in rs]
        try:
            first = self.wal.append_many(recs)
        except BaseException:
            self._closed = True  # pages hold changes the log does not: stop; a restart redoes the log
            raise
        if first != group[0][0]:
            self._closed = True
            raise LogtideError(f"the primary's log was appended to by someone else (LSN {first}, expected "
                               f"{group[0][0]}); stopping")
        lsns, tags = [], []
        for lsn, _, tag_lists in group:
            for k, ts in enumerate(tag_lists):
                lsns.extend([lsn + k] * len(ts))
                tags.extend(ts)
        self.index.add(np.array(tags, dtype=np.uint32).reshape(-1, 5), np.array(lsns, dtype=np.uint64))
        self.queue.push_many(range(first, first + len(recs)), [xw.wal_meta(r) for r in recs])
        self.write_lsn = first + len(recs) - 1
