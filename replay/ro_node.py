"""ReadOnlyNode: serves reads from shared storage plus WAL, replaying pages only when they are read.

- The *receiver* (`receive`) checks each WAL-meta batch message and queues it.
- The *startup worker* indexes the batch's block references into the LogIndex and marks cached
  pages OUTDATED, all under the mini-transaction locks of the batch's pages, then advances the
  applied LSN. It never reads WAL payload and never replays.
- A *backend read* locks the page, takes the applied LSN N, and brings the page to N: a missing
  page is read from the PageStore, then the page's LSNs in (page LSN, N] come from the LogIndex,
  their full records from the log through the XLOG buffer, and redo applies them.
- The *background replayer* walks the LogIndex in LSN order; it replays resident pages, and
  evicts those whose changes the consistent LSN already covers (storage has them).
- *min used LSN* (reported about once a second with the applied LSN) is the lowest LSN the node
  may still read from the log: min(consistent LSN + 1, background position + 1, active reads).

mode="eager" is the shared-nothing baseline: every record is read in full and replayed on
receipt, into pages it keeps resident (it cannot write them back to shared storage).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from logtide._ext import page as pg
from logtide._ext import redo
from logtide.arg_checks import int_arg, lsn_arg, seconds_arg
from logtide.errors import (CorruptionError, ReplicaDroppedError, ReplicaError,
                            ReplicaTimeoutError, TruncatedSubscribeError)
from logtide.replay.buffer_pool import BufferPool
from logtide.replay.meta_stream import MetaBatch, decode_batch, encode_feedback
from logtide.replay.mini_trans import MiniTransLocks
from logtide.replay.page_index import PageIndex
from logtide.replay.page_store import PageStore
from logtide.replay.primary import INDEX_DIR, PAGES_DIR
from logtide.replay.row_address import DB, SPC, check_page_tag, check_rel, check_tid, rel_tag
from logtide.replay.wal_log import WalLog
from logtide.replay.xlog_buffer import XlogBuffer

log = logging.getLogger("logtide.replay.ro")

LAZY, EAGER = "lazy", "eager"


def _unique_tags(tags: np.ndarray) -> np.ndarray:
    """The distinct rows of an (n, 5) tag array (order not kept)."""
    if len(tags) and (tags[:, (0, 1, 3)] == tags[0, (0, 1, 3)]).all():
        # one tablespace, database and fork (the usual batch): dedupe (rel, block) as one u64
        keys = np.unique((tags[:, 2].astype(np.uint64) << np.uint64(32)) | tags[:, 4].astype(np.uint64))
        out = np.empty((len(keys), 5), dtype=np.uint32)
        out[:, (0, 1, 3)] = tags[0, (0, 1, 3)]
        out[:, 2] = (keys >> np.uint64(32)).astype(np.uint32)
        out[:, 4] = (keys & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return out
    return np.array(list({t: None for t in map(tuple, tags.tolist())}), dtype=np.uint32).reshape(-1, 5)



class ReadOnlyNode:
    """An RO node over the shared directory, fed by a link to the primary (see transport modules)."""

    def __init__(self, directory: str | os.PathLike, log_service, node_id: int = 1, *, mode: str = LAZY,
                 pool_pages: int = 2048, xlog_buffer_bytes: int = 64 << 20, background: bool = True,
                 feedback_interval: float = 1.0, bg_batch: int = 4096, logindex_segments: int | None = None,
                 index_hook: Callable[[int, tuple, int], None] | None = None):
        if mode not in (LAZY, EAGER):
            raise ValueError(f"mode is {LAZY!r} or {EAGER!r}, got {mode!r}")
        # a bad node id broke every feedback (the primary then dropped the node); bg_batch 0 never advanced
        int_arg("node_id", node_id, 0, 1 << 32)
        int_arg("bg_batch", bg_batch, 1)
        int_arg("xlog_buffer_bytes", xlog_buffer_bytes, 1)
        seconds_arg("feedback_interval", feedback_interval, allow_none=False)
        if logindex_segments is not None:
            int_arg("logindex_segments", logindex_segments, 1)
        self.dir = Path(directory)
        self.node_id = node_id
        self.mode = mode
        self.wal = WalLog(log_service)
        self.store = PageStore(self.dir / PAGES_DIR)
        self.index = PageIndex.open(self.dir / INDEX_DIR, "ro", logindex_segments)
        # eager pages are newer than storage and cannot be written back: they must stay resident
        self.pool = BufferPool(pool_pages, evict_dirty=(lambda tag, page: False) if mode == EAGER else None)
        self.locks = MiniTransLocks()
        self.xlog = XlogBuffer(self.wal.read, capacity_bytes=xlog_buffer_bytes)
        self.applied_lsn = 0
        self.ready_lsn = 0
        self.write_lsn = 0        # as last heard from the primary
        self.consistent_lsn = 0   # as last heard from the primary
        self.bg_lsn = 0           # the background replayer has handled every LSN up to here
        self.error: BaseException | None = None
        self.counts = {"batches": 0, "records": 0, "refs": 0, "marked_outdated": 0, "reads": 0, "hot": 0,
                       "cold": 0, "outdated": 0, "replayed": 0, "bg_replayed": 0, "bg_evicted": 0,
                       "rejected_messages": 0, "resyncs": 0}
        self._rel_blocks: dict[int, int] = {}
        self._active: dict[int, int] = {}   # reading thread id -> the lowest LSN it may read
        self._active_lock = threading.Lock()
        self._q: deque[MetaBatch] = deque()
        self._q_cv = threading.Condition()
        self._applied_cv = threading.Condition()
        self._stop = threading.Event()
        self._send_feedback: Callable[[bytes], None] | None = None
        self._bg_batch = bg_batch
        # instrumentation: called as hook(i, tag, lsn) after each page's LSN list is extended inside a
        # mini-transaction (the startup worker then indexes reference by reference)
        self._index_hook = index_hook
        self._feedback_interval = feedback_interval
        self.read_wait_s = 30.0   # how long a read waits for the node to catch up to its ready LSN
        # the primary's replica timeout: a node whose reports went unacknowledged for most of it
        # must assume it was dropped (storage may soon hold pages from its future) and stop serving
        from logtide.replay.replica_set import REPLICA_TIMEOUT_S
        self.replica_timeout = REPLICA_TIMEOUT_S
        self._last_ack = 0.0      # monotonic time the primary last acknowledged a report (or attach)
        self._feedback_seq = 0
        self._link = None
        self._apply_lock = threading.Lock()   # the startup worker's batch vs a re-sync
        self._dropped: str | None = None      # why the primary dropped us, until we re-sync
        self._threads = [threading.Thread(target=self._startup_loop, name=f"ro{node_id}-startup", daemon=True)]
        if background and mode == LAZY:
            self._threads.append(threading.Thread(target=self._bg_loop, name=f"ro{node_id}-bg", daemon=True))
        self._threads.append(threading.Thread(target=self._feedback_loop, name=f"ro{node_id}-fb", daemon=True))
        self._started = False

    # ------------------------------------------------------------------ link to the primary
    def attach(self, start_lsn: int, ready_lsn: int, send_feedback: Callable[[bytes], None]) -> None:
        """Start from `start_lsn` (the primary's consistent LSN + 1); serve reads once `ready_lsn` is applied.

        A node attached again (its primary restarted, or it follows a promoted one) keeps what it has
        applied: the WAL it indexed is the same WAL, and the stream resumes after its applied LSN.
        """
        self._send_feedback = send_feedback
        self._last_ack = time.monotonic()
        if self._started:
            if self._dropped is not None:
                self._resync(start_lsn, ready_lsn)
            return
        self.applied_lsn = start_lsn - 1
        self.bg_lsn = start_lsn - 1
        self.consistent_lsn = start_lsn - 1
        self.ready_lsn = ready_lsn
        self._send_feedback = send_feedback
        if not self._started:
            self._started = True
            for t in self._threads:
                t.start()

    def join(self, subscribe: Callable[[int, int, int], tuple[int, int]]) -> tuple[int, int]:
        """Subscribe through `subscribe(node_id, index_from, mode)`; returns (start LSN, ready LSN).

        A running node re-attaches (RESUME) with its min used LSN. A primary that dropped it, holds
        nothing for it, or has truncated the WAL it would resume from refuses: the node then
        re-syncs from storage (RESYNC; `attach` drops its cached pages) instead of resuming from
        LSNs that are gone."""
        from logtide.replay.replica_set import FRESH, RESUME, RESYNC
        if not self._started:
            try:
                return subscribe(self.node_id, self.resume_from(), FRESH)
            except TruncatedSubscribeError:
                return subscribe(self.node_id, 0, FRESH)
        if self._dropped is None:
            try:
                return subscribe(self.node_id, self.resume_from(), RESUME)
            except (ReplicaDroppedError, TruncatedSubscribeError) as exc:
                self.dropped(str(exc))
        return subscribe(self.node_id, 0, RESYNC)

    def dropped(self, why: str) -> None:
        """The primary dropped this node: stop serving until it re-syncs (the next join + attach)."""
        if self._dropped is None:
            log.warning("RO node %s stops serving (%s); re-syncing from storage", self.node_id, why)
        self._dropped = why

    def _resync(self, start_lsn: int, ready_lsn: int) -> None:
        """Forget every cached page (storage may hold pages newer than what this node applied while it
        was dropped, and the WAL to bring old cached pages forward may be gone), skip to `start_lsn`,
        and serve again once `ready_lsn` is applied."""
        with self._apply_lock:
            for tag, _ in self.pool.resident():
                with self.locks.page(tag):
                    self.pool.drop(tag)
            skipped = max(0, start_lsn - 1 - self.applied_lsn)
            self.applied_lsn = max(self.applied_lsn, start_lsn - 1)
            self.bg_lsn = max(self.bg_lsn, self.applied_lsn)
            self.consistent_lsn = max(self.consistent_lsn, start_lsn - 1)
            self.ready_lsn = ready_lsn
            self.counts["resyncs"] += 1
            self._dropped = None
        log.warning("RO node %s re-synced from storage: cached pages dropped, following from LSN %d "
                    "(%d LSNs skipped, storage has them), serving once LSN %d is applied",
                    self.node_id, start_lsn, skipped, ready_lsn)
        with self._applied_cv:
            self._applied_cv.notify_all()

    def resume_from(self) -> int:
        """What to subscribe with: the LSN the primary must keep the WAL from for this node (0 = from
        the start of the log). A fresh node needs the WAL its LogIndex must index again; a running one
        its min used LSN."""
        return self.min_used_lsn() if self._started else self.index.replay_needed_from()

    def receive(self, message: bytes) -> int:
        """The receiver: verify a WAL-meta batch message and queue it; returns its record count.

        A truncated or altered message raises StreamFormatError and is dropped (the node keeps its state).
        """
        try:
            batch = decode_batch(message)
        except CorruptionError:
            self.counts["rejected_messages"] += 1
            raise
        with self._q_cv:
            self._q.append(batch)
            self._q_cv.notify()
        return len(batch)

    # ------------------------------------------------------------------ startup worker
    def _startup_loop(self) -> None:
        while not self._stop.is_set():
            with self._q_cv:
                while not self._q and not self._stop.is_set():
                    self._q_cv.wait(0.1)
                if self._stop.is_set():
                    return
                batch = self._q.popleft()
            try:
                with self._apply_lock:
                    self.apply_batch(batch)
            except BaseException as exc:  # bad WAL: stop applying, never apply garbage
                self._fail(exc)
                return

    def _fail(self, exc: BaseException) -> None:
        log.error("RO node %s stops applying: %s", self.node_id, exc)
        self.error = exc
        with self._applied_cv:
            self._applied_cv.notify_all()

    def apply_batch(self, batch: MetaBatch) -> None:
        """Index one batch (lazy) or replay it (eager), then advance the applied LSN."""
        self.write_lsn = max(self.write_lsn, batch.write_lsn)
        if len(batch):
            keep = batch.lsns > self.applied_lsn   # a resent prefix is skipped
            if not keep.all():
                idx = np.nonzero(keep)[0]
                if not len(idx):
                    self._heard(batch)
                    return
                lo = int(idx[0])
                batch = MetaBatch(batch.write_lsn, batch.consistent_lsn, batch.lsns[lo:],
                                  batch.metas[batch.offsets[lo]:], batch.offsets[lo:] - batch.offsets[lo])
            tags, rec = redo.meta_tags(batch.metas, batch.offsets)
            lsns = batch.lsns[rec]
            self._note_blocks(tags)
            if self.mode == LAZY:
                self._index(tags, lsns, int(batch.lsns[-1]))
            else:
                self._replay_eager(tags, lsns, batch)
            self.counts["batches"] += 1
            self.counts["records"] += len(batch)
            self.counts["refs"] += len(tags)
        self._heard(batch)

    def _note_blocks(self, tags: np.ndarray) -> None:
        ours = (tags[:, 0] == SPC) & (tags[:, 1] == DB) & (tags[:, 3] == 0)
        rels, inv = np.unique(tags[ours, 2], return_inverse=True)
        top = np.zeros(len(rels), dtype=np.int64)
        np.maximum.at(top, inv.reshape(-1), tags[ours, 4].astype(np.int64) + 1)
        for r, t in zip(rels.tolist(), top.tolist()):
            if t > self._rel_blocks.get(r, 0):
                self._rel_blocks[r] = t

    def nblocks(self, rel: int) -> int:
        """Blocks of `rel` known to this node: in the page store, or referenced by indexed WAL."""
        check_rel(rel)
        return max(self._rel_blocks.get(rel, 0), self.store.nblocks(SPC, DB, rel, 0))

    def _heard(self, batch: MetaBatch) -> None:
        self.consistent_lsn = max(self.consistent_lsn, min(batch.consistent_lsn, self.applied_lsn))
        with self._applied_cv:
            self._applied_cv.notify_all()

    def _index(self, tags: np.ndarray, lsns: np.ndarray, last: int) -> None:
        uniq = _unique_tags(tags)
        with self.locks.record(uniq):   # the batch is one mini-transaction for its pages
            if self._index_hook is None:
                self.index.add(tags, lsns)
            else:
                for i in range(len(tags)):
                    self.index.add(tags[i:i + 1], lsns[i:i + 1])
                    self._index_hook(i, tuple(tags[i].tolist()), int(lsns[i]))
            self.counts["marked_outdated"] += self.pool.mark_outdated_many(uniq)
            self.applied_lsn = last

    def _replay_eager(self, tags: np.ndarray, lsns: np.ndarray, batch: MetaBatch) -> None:
        # record by record; a record's pages are replayed under all their locks, and the applied LSN
        # moves under them too, so no reader sees one page of a record applied and another not
        tl, ll = tags.tolist(), lsns.tolist()
        i, n = 0, len(ll)
        while i < n:
            j = i
            while j < n and ll[j] == ll[i]:
                j += 1
            lsn = ll[i]
            rec = self.xlog.get(lsn)
            refs = [tuple(t) for t in tl[i:j]]
            with self.locks.record(refs):
                for t in refs:
                    f, _ = self.pool.pin(t, self._load)
                    try:
                        if redo.apply(self.pool.frames[f], t, rec, lsn) == redo.APPLIED:
                            self.pool.mark_dirty(f, lsn)
                            self.counts["replayed"] += 1
                    finally:
                        self.pool.unpin(f)
                self.applied_lsn = lsn
            i = j
        self.applied_lsn = int(batch.lsns[-1])

    # ------------------------------------------------------------------ backend reads
    def _load(self, tag, frame) -> None:
        self.store.read_into(tag, frame)

    def wait_applied(self, lsn: int, timeout: float = 30.0) -> bool:
        """Wait until the applied LSN reaches `lsn` (True). ReplicaTimeoutError at the deadline;
        ReplicaError if the node stopped on bad WAL or was closed; InvalidArgument for an `lsn`
        that is not an int in [0, 2**64) or a `timeout` that is not a finite number of seconds >= 0
        (0: no wait)."""
        lsn_arg("lsn", lsn)
        timeout = seconds_arg("timeout", timeout, allow_none=False,
                              zero="no wait: applied already or timed out")
        deadline = time.monotonic() + timeout
        with self._applied_cv:
            while self.applied_lsn < lsn:
                if self.error is not None:
                    raise ReplicaError(f"RO node {self.node_id} stopped applying: {self.error}") from self.error
                if self._stop.is_set():
                    raise ReplicaError(f"RO node {self.node_id} is closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ReplicaTimeoutError(f"RO node {self.node_id}: applied LSN {self.applied_lsn} did not "
                                              f"reach {lsn} within {timeout:g} s")
                self._applied_cv.wait(min(left, 0.1))
        return True

    def _check_serving(self, timeout: float | None = None) -> None:
        if self.error is not None:
            raise ReplicaError(f"RO node {self.node_id} stopped applying: {self.error}") from self.error
        if self._stop.is_set():
            raise ReplicaError(f"RO node {self.node_id} is closed")
        if self._dropped is None and self.replica_timeout > 0 and self._last_ack:
            quiet = time.monotonic() - self._last_ack
            if quiet > 0.8 * self.replica_timeout:   # the primary drops us at replica_timeout: stop first
                self.dropped(f"no report acknowledged by the primary for {quiet:.1f} s")
        if self._dropped is not None:
            raise ReplicaDroppedError(f"RO node {self.node_id} is re-syncing from storage ({self._dropped})")
        if self.applied_lsn < self.ready_lsn:
            self.wait_applied(self.ready_lsn, self.read_wait_s if timeout is None else timeout)

    def read_page(self, tag) -> tuple[bytes, int]:
        """The page at the node's applied LSN N, and N."""
        self._check_serving()
        tag = check_page_tag(tag)
        with self.locks.page(tag):
            target = self.applied_lsn   # under the page lock: no half-indexed record for this page
            f, hit = self.pool.pin(tag, self._load)
            try:
                if self.mode == EAGER:
                    self.counts["hot" if hit else "cold"] += 1
                else:
                    outdated = self.pool.is_outdated(f)
                    self.counts["outdated" if outdated else "hot" if hit else "cold"] += 1
                    if outdated or not hit:
                        self._replay_page(tag, f, target)
                        self.pool.clear_outdated(f)
                data = self.pool.frames[f].tobytes()
            finally:
                self.pool.unpin(f)
        self.counts["reads"] += 1
        return data, target

    def _replay_page(self, tag: tuple, f: int, target: int) -> None:
        page = self.pool.frames[f]
        start = 0 if pg.is_new(page) else pg.get_lsn(page)
        me = threading.get_ident()
        with self._active_lock:
            self._active[me] = start + 1
        try:
            lsns = self.index.lsns(tag, start + 1, target)
            if len(lsns):
                recs, offs = self.xlog.get_many(lsns.tolist())
                n = len(lsns)
                res, applied, bad = redo.apply_batch(
                    self.pool.frames, np.full(n, f, dtype=np.int64), np.tile(np.array(tag, dtype=np.uint32), (n, 1)),
                    recs, offs, lsns.astype(np.uint64))
                if bad >= 0:
                    redo.raise_for(int(res[bad]), int(lsns[bad]))
                self.counts["replayed"] += applied
        except BaseException as exc:
            if isinstance(exc, CorruptionError):
                self._fail(exc)
            raise
        finally:
            with self._active_lock:
                self._active.pop(me, None)

    def get(self, rel: int, tid) -> bytes | None:
        """The live tuple at `tid` as of the applied LSN, or None."""
        check_rel(rel)
        block, off = check_tid(tid)
        return pg.get(self.read_page(rel_tag(rel, block))[0], off)

    def scan(self, rel: int) -> Iterator[tuple[tuple[int, int], bytes]]:
        """Every live tuple of `rel` as of the applied LSN, as ((block, slot), bytes)."""
        blocks = self.nblocks(rel)      # checks rel now, not at the first next()
        return (((b, off), t) for b in range(blocks)
                for off, t in pg.items(self.read_page(rel_tag(rel, b))[0]).items())

    # ------------------------------------------------------------------ background replayer
    def _bg_loop(self) -> None:
        while not self._stop.wait(0.02):
            if self.error is not None:
                return
            try:
                self.background_step()
            except BaseException as exc:
                if isinstance(exc, CorruptionError):
                    self._fail(exc)
                    return
                log.exception("background replay step failed")

    def background_step(self) -> int:
        """Handle the next batch of LSNs after bg_lsn; returns how many LSNs it walked."""
        hi = min(self.applied_lsn, self.bg_lsn + self._bg_batch)
        if hi <= self.bg_lsn:
            return 0
        lsns, tags = self.index.range(self.bg_lsn + 1, hi)
        if len(lsns):
            last = {}
            for t, l in zip(map(tuple, tags.tolist()), lsns.tolist()):
                last[t] = l
            for t, l in last.items():
                if t not in self.pool:
                    continue
                with self.locks.page(t):
                    f = self.pool.lookup(t)
                    if f < 0 or not self.pool.is_outdated(f):
                        continue
                    if l <= self.consistent_lsn and self.pool.evict(t):
                        self.counts["bg_evicted"] += 1   # storage already has this change
                        continue
                    f = self.pool.pin_resident(t)
                    if f < 0:
                        continue
                    try:
                        target = self.applied_lsn
                        self._replay_page(t, f, target)
                        self.pool.clear_outdated(f)
                        self.counts["bg_replayed"] += 1
                    finally:
                        self.pool.unpin(f)
        walked = hi - self.bg_lsn
        self.bg_lsn = hi
        return walked

    # ------------------------------------------------------------------ feedback and truncation
    def min_used_lsn(self) -> int:
        """The lowest LSN this node may still read from the log."""
        low = min(self.consistent_lsn + 1, (self.bg_lsn if self.mode == LAZY else self.applied_lsn) + 1,
                  self.applied_lsn + 1)
        with self._active_lock:
            for v in self._active.values():
                low = min(low, v)
        return low

    def feedback_message(self) -> bytes:
        self._feedback_seq += 1
        return encode_feedback(self.node_id, self.applied_lsn, self.min_used_lsn(), self._feedback_seq)

    def _feedback_loop(self) -> None:
        while not self._stop.wait(self._feedback_interval):
            self.send_feedback()

    def send_feedback(self) -> None:
        if self._send_feedback is None or self.error is not None:
            return
        try:
            self._send_feedback(self.feedback_message())
            self._last_ack = time.monotonic()
            if self._dropped is not None:   # it stopped serving on its own (no contact): re-sync now
                self._rejoin()
            # learn which memtables the primary has saved since: they become reusable
            self.index.refresh()
            self.xlog.drop_below(self.min_used_lsn())
        except ReplicaDroppedError as exc:  # we were silent too long (stopped, partitioned): re-sync
            self.dropped(str(exc))
            self._rejoin()
        except Exception as exc:  # the primary may be down; the next round retries
            log.warning("RO node %s: feedback failed: %s", self.node_id, exc)

    def _rejoin(self) -> None:
        rejoin = getattr(self._link, "rejoin", None)
        if rejoin is not None:
            try:
                rejoin()
            except Exception as exc:  # the next round retries
                log.warning("RO node %s: re-sync failed: %s", self.node_id, exc)

    # ------------------------------------------------------------------ promotion
    def promote(self, log_service=None, **primary_options):
        """Become the primary (the old one is gone): returns a Primary over the same directory.

        The node stops receiving, and the new primary redoes every WAL record after the last
        checkpoint's consistent LSN onto the stored pages, so every change the old primary
        acknowledged (it was durable in the log before the ack) is there. `log_service` is the log
        to write to: the shared embedded one, or None to open the shared directory's log (the old
        primary process, which held it, is dead).
        """
        from logtide.replay.primary import Primary
        self.close()
        if log_service is None:
            p = Primary(self.dir, **primary_options)  # opens (and owns) the shared log
        else:
            p = Primary(self.dir, log=log_service, **primary_options)
        p.release_hold(self.node_id)   # the log was held for this node as an RO node; it is the primary now
        return p

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        with self._q_cv:
            self._q_cv.notify_all()
        for t in self._threads:
            if t.is_alive():
                t.join(timeout=10)
        if self._link is not None:
            self._link.close()
        self.store.close()
        self.index.close()

    def __enter__(self) -> "ReadOnlyNode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stats(self) -> dict:
        return dict(self.counts, applied_lsn=self.applied_lsn, bg_lsn=self.bg_lsn, min_used_lsn=self.min_used_lsn(),
                    xlog=self.xlog.stats(), resident=len(self.pool), mode=self.mode)
