"""ReplicaSet: the RO nodes a primary streams WAL meta to, and what it holds for them.

Each subscribed RO node holds back page flushing (no page newer than its apply LSN is written to
storage) and log truncation (nothing at or above its min used LSN is truncated). A node is live
while it reports; one silent for longer than the replica timeout, or one that closed its link, is
dropped: it holds nothing from then on and must re-sync from storage if it comes back. The log
service lists every held node as a reader ("ro-<id>"), so a primary opened later (a restart or a
promotion) keeps holding the log for nodes it has not heard from yet.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from logtide.errors import (InvalidArgument, LogtideError, ReplicaDroppedError, ReplicaError,
                            TruncatedSubscribeError)
from logtide.replay.meta_stream import decode_feedback

log = logging.getLogger("logtide.replay.replica_set")

# an RO node silent for this long is dropped (PostgreSQL's wal_sender_timeout is 60 s; RO nodes
# report every second, so ten missed reports is a dead or stopped node, not a slow one)
REPLICA_TIMEOUT_S = 10.0
# how an RO node subscribes: a fresh node; a running node re-attaching (keeps its cache); a node
# re-syncing from storage after it was dropped (dropped its cache)
FRESH, RESUME, RESYNC = 0, 1, 2
NO_LIMIT = 1 << 64   # the flush limit with no RO node to wait for


@dataclass
class ReplicaState:
    apply_lsn: int
    min_used_lsn: int
    seen: float           # monotonic time of its subscribe or last report (liveness)
    held: bool = False    # adopted at open from the log's registered readers; not heard from yet


def reader_node(name: str) -> int | None:
    """The node id of a log-service reader named "ro-<id>", else None."""
    if name.startswith("ro-") and name[3:].isdigit():
        return int(name[3:])
    return None


class ReplicaSet:
    """The RO nodes one primary holds flushing and truncation for, with their liveness."""

    def __init__(self, log_service, latest_lsn: Callable[[], int], timeout: float = REPLICA_TIMEOUT_S):
        self.log_service = log_service
        self._latest_lsn = latest_lsn      # the log's newest LSN (a report never claims past it)
        self.timeout = float(timeout)
        self.states: dict[int, ReplicaState] = {}   # node id -> its reported LSNs (never rebound)
        self.lock = threading.Lock()                 # guards states, dropped and drops
        self.dropped: dict[int, str] = {}            # node id -> why it was dropped (until it re-syncs)
        self.drops = 0

    def adopt_readers(self) -> None:
        """Hold truncation and flush control for the RO nodes the log still lists as readers ("ro-N"):
        the previous primary (before a restart or a promotion) was holding the log for them, and they
        re-attach with LSNs that must still exist. Each is held until it reports, or is dropped after
        the replica timeout like any silent node."""
        try:
            readers = self.log_service.readers()
        except LogtideError:
            return
        now = time.monotonic()
        for name, replayed in readers.items():
            node = reader_node(name)
            if node is not None:
                self.states[node] = ReplicaState(replayed, replayed + 1, now, held=True)
                log.info("holding the log from LSN %d for RO node %d (a registered reader)", replayed + 1, node)

    def subscribe(self, node_id: int, index_from: int, mode: int, *, gone: int, consistent_lsn: int,
                  ready: int) -> tuple[int, int]:
        """Register an RO node (Primary.subscribe says how); `gone` is the highest LSN that may be
        truncated, `ready` the write LSN (no stored page is newer). Returns (start LSN, ready LSN)."""
        if mode not in (FRESH, RESUME, RESYNC):
            raise InvalidArgument(f"subscribe mode is FRESH, RESUME or RESYNC, got {mode!r}")
        with self.lock:
            if mode == RESYNC:
                index_from = 0
            elif mode == RESUME and node_id not in self.states:
                why = self.dropped.get(node_id, "no truncation hold was recorded for it")
                raise ReplicaDroppedError(f"RO node {node_id} cannot resume ({why}): it must re-sync from storage")
            if index_from and index_from <= gone:
                raise TruncatedSubscribeError(f"RO node {node_id} asked for WAL from LSN {index_from}, but LSNs "
                                              f"up to {gone} are truncated: it must re-sync from storage")
            start = consistent_lsn + 1
            if index_from:
                start = min(start, index_from)
            held = self.states.get(node_id)
            if held is not None and held.held:
                log.info("RO node %d re-attached (held from LSN %d)", node_id, held.min_used_lsn)
            self.dropped.pop(node_id, None)
            self.states[node_id] = ReplicaState(min(consistent_lsn, start - 1), start, time.monotonic())
            try:
                self.log_service.register_reader(f"ro-{node_id}", start - 1)
            except LogtideError:
                pass  # already registered: it keeps its replayed LSN
            return start, ready

    def release(self, node_id: int) -> None:
        """Stop holding the log for `node_id` without counting a drop."""
        with self.lock:
            self.states.pop(node_id, None)
        self._unregister(node_id)

    def drop(self, node_id: int, why: str) -> None:
        """Drop `node_id`: it holds nothing from now on, and must re-sync from storage to come back."""
        with self.lock:
            if self.states.pop(node_id, None) is None:
                return
            self.dropped[node_id] = why
            self.drops += 1
        log.warning("dropped RO node %d: %s; it no longer holds flushing or truncation, and re-syncs from "
                    "storage if it comes back", node_id, why)
        self._unregister(node_id)

    def _unregister(self, node_id: int) -> None:
        try:
            self.log_service.unregister_reader(f"ro-{node_id}")
        except LogtideError:
            pass

    def expire(self) -> list[int]:
        """Drop every RO node not heard from for longer than the timeout; the ids dropped."""
        if self.timeout <= 0:
            return []
        now = time.monotonic()
        with self.lock:
            silent = [(n, now - st.seen) for n, st in self.states.items() if now - st.seen > self.timeout]
        # re-checked under the lock: a node may have reported since it was found silent
        return [n for n, quiet in silent
                if self.drop_if_quiet(n, self.timeout, f"no report for {quiet:.1f} s (replica_timeout "
                                                       f"{self.timeout:g} s)")]

    def check_following(self, node_id: int) -> None:
        """Raise ReplicaDroppedError (or ReplicaError) unless `node_id` is subscribed (a node only
        held since the primary opened must subscribe again first)."""
        st = self.states.get(node_id)
        if st is not None and not st.held:
            return
        why = self.dropped.get(node_id)
        if why is not None:
            raise ReplicaDroppedError(f"RO node {node_id} was dropped ({why}): it must re-sync from storage")
        raise ReplicaError(f"RO node {node_id} is not subscribed")

    def feedback(self, message: bytes, write_lsn: int) -> None:
        """An RO node's (apply LSN, min used LSN) report; it never counts past `write_lsn`."""
        fb = decode_feedback(message)
        with self.lock:
            st = self.states.get(fb.node_id)
            if st is None or st.held:
                # a held node must subscribe (re-attach) before its reports count
                if st is None and fb.node_id in self.dropped:
                    raise ReplicaDroppedError(f"RO node {fb.node_id} was dropped ({self.dropped[fb.node_id]}): "
                                              "it must re-sync from storage")
                raise ReplicaError(f"RO node {fb.node_id} is not subscribed")
            st.apply_lsn = max(st.apply_lsn, min(fb.apply_lsn, write_lsn))
            st.min_used_lsn = max(st.min_used_lsn, min(fb.min_used_lsn, st.apply_lsn + 1))
            st.seen = time.monotonic()
        try:
            self.log_service.report_replayed(f"ro-{fb.node_id}", max(0, min(fb.min_used_lsn - 1,
                                                                              self._latest_lsn())))
        except LogtideError:
            pass

    def flush_limit(self) -> int:
        """The highest page LSN every live RO node has applied (NO_LIMIT with none); drops the
        silent ones first, so a dead node never pins it."""
        self.expire()
        with self.lock:
            if not self.states:
                return NO_LIMIT
            return min(st.apply_lsn for st in self.states.values())

    def truncation_hold(self, low: int) -> int:
        """`low`, lowered below every RO node's min used LSN."""
        with self.lock:
            for st in self.states.values():
                low = min(low, st.min_used_lsn - 1)
        return low

    def drop_if_quiet(self, node_id: int, quiet_s: float, why: str) -> bool:
        """Drop `node_id` if no report came from it for `quiet_s` seconds; True when it was dropped."""
        with self.lock:
            st = self.states.get(node_id)
            if st is None or time.monotonic() - st.seen <= quiet_s:
                return False
        self.drop(node_id, why)
        return True

    def stats(self) -> dict:
        return {"replicas": {k: vars(v) for k, v in self.states.items()}, "replicas_dropped": self.drops,
                "dropped": dict(self.dropped)}
