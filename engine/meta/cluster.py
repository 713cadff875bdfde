"""Cluster metadata on the meta-service: node leases and checkpoint locations.

Works on anything with the MetaService API (the embedded service or a connect_meta client).
Key layout (all under "cluster/"):

    cluster/nodes/<node_id>             JSON node info, held by a TTL lease renewed by heartbeat
    cluster/checkpoints/<kind>/<lsn:020> JSON {lsn, location}

The RO nodes' LSN feedback and the truncation LSN are not here: they go through HAKeeper
(docs/hakeeper.md, section 6).
"""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

from logtide.engine.meta.command import check_key, op
from logtide.engine.meta.match_seq import AS_IS, GE
from logtide.engine.meta.meta_format import U64_MAX
from logtide.errors import LogtideError, MetaClosedError, MetaInvalidArgument
from logtide.failure_log import worth_logging

log = logging.getLogger(__name__)

NODES = "cluster/nodes/"
RETRY_FIRST_S = 0.05      # a failed lease renewal is retried this soon, then backing off to the period
CHECKPOINTS = "cluster/checkpoints/"


def _lsn(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= U64_MAX:
        raise MetaInvalidArgument(f"{name} must be a u64 LSN, got {v!r}")
    return v


def _node_id(node_id: str) -> str:
    check_key(node_id, "node_id", allow_empty=False)
    if "/" in node_id:
        raise MetaInvalidArgument(f"node_id must not contain '/': {node_id!r}")
    return node_id


@dataclass(frozen=True)
class Checkpoint:
    kind: str
    lsn: int
    location: str


class ClusterMeta:
    """The cluster's metadata home, as small typed calls over meta-service keys."""

    def __init__(self, meta):
        self.meta = meta

    # ------------------------------------------------------------------ nodes (HAKeeper-style leases)
    def register(self, node_id: str, info: Dict, ttl_ms: int) -> int:
        """Register (or re-register) a node under a lease of ttl_ms; returns the registration's seq."""
        _, cur = self.meta.upsert(NODES + _node_id(node_id), json.dumps(info, sort_keys=True).encode(), ttl_ms=ttl_ms)
        return cur.seq

    def heartbeat(self, node_id: str, ttl_ms: int) -> bool:
        """Renew the node's lease; False if the lease had already run out."""
        key = NODES + _node_id(node_id)
        _, cur = self.meta.upsert(key, AS_IS, match_seq=GE(1), ttl_ms=ttl_ms)
        return cur is not None

    def deregister(self, node_id: str) -> None:
        self.meta.txn(if_then=[op.delete(NODES + _node_id(node_id))])

    def nodes(self, role: Optional[str] = None) -> Dict[str, Dict]:
        """Live nodes (lease not run out) and their info, optionally only those with info["role"] == role."""
        out = {}
        for key, v in self.meta.list(NODES):
            info = json.loads(v.data)
            if role is None or info.get("role") == role:
                out[key[len(NODES):]] = info
        return out

    # ------------------------------------------------------------------ checkpoints
    def add_checkpoint(self, kind: str, lsn: int, location: str) -> Checkpoint:
        """Record that a checkpoint of `kind` covering up to `lsn` lives at `location`."""
        check_key(kind, "kind", allow_empty=False)
        if "/" in kind or not isinstance(location, str):
            raise MetaInvalidArgument("kind must have no '/', location must be a str")
        key = f"{CHECKPOINTS}{kind}/{_lsn('lsn', lsn):020d}"
        self.meta.upsert(key, json.dumps({"lsn": lsn, "location": location}, sort_keys=True).encode())
        return Checkpoint(kind, lsn, location)

    def checkpoints(self, kind: str) -> List[Checkpoint]:
        """Every checkpoint of `kind`, oldest LSN first."""
        out = []
        for _, v in self.meta.list(f"{CHECKPOINTS}{kind}/"):
            d = json.loads(v.data)
            out.append(Checkpoint(kind, d["lsn"], d["location"]))
        return out

    def latest_checkpoint(self, kind: str) -> Optional[Checkpoint]:
        cps = self.checkpoints(kind)
        return cps[-1] if cps else None

    def drop_checkpoints_below(self, kind: str, lsn: int) -> int:
        """Forget checkpoints of `kind` older than `lsn`; returns how many went."""
        dropped = 0
        for cp in self.checkpoints(kind):
            if cp.lsn < lsn:
                r = self.meta.txn(if_then=[op.delete(f"{CHECKPOINTS}{kind}/{cp.lsn:020d}")])
                dropped += int(r.responses[0].success)
        return dropped


class Heartbeater:
    """Keeps one node's lease alive from a background thread: renews every interval_ms (by
    default ttl_ms/3, so that two renewals in a row may fail before the lease runs out).

    A renewal the meta-service does not answer (unreachable, no leader) is counted in `failures`
    and retried soon, 50 ms after the first failure and twice as long after each next one, up to
    the period: a renewal only extends the lease, so a repeated one is harmless, and a leader
    change of half a second must not cost the lease a whole period. The thread outlives failures.
    `lost` is set, and renewals stop, when a renewal finds the lease gone: the node must register
    again."""

    def __init__(self, cluster: ClusterMeta, node_id: str, ttl_ms: int, interval_ms: Optional[int] = None):
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 3 <= ttl_ms <= U64_MAX:
            # renewals come every ttl_ms / 3: a zero lease would renew in a busy loop
            raise MetaInvalidArgument(f"ttl_ms must be an int >= 3, got {ttl_ms!r}")
        if interval_ms is None:
            interval_ms = ttl_ms // 3
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or not 1 <= interval_ms < ttl_ms:
            raise MetaInvalidArgument(f"interval_ms must be an int in [1, ttl_ms), got {interval_ms!r}")
        self.cluster, self.node_id, self.ttl_ms = cluster, _node_id(node_id), ttl_ms
        self.interval_ms = interval_ms
        self.beats = 0
        self.failures = 0          # renewals that ended in an error
        self.last_error: Optional[LogtideError] = None
        self.lost = False          # set when a renewal found the lease gone
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"heartbeat-{node_id}")

    def start(self) -> "Heartbeater":
        self._thread.start()
        return self

    def _run(self) -> None:
        period = wait = self.interval_ms / 1000.0
        while not self._stop.wait(wait):
            try:
                renewed = self.cluster.heartbeat(self.node_id, self.ttl_ms)
            except MetaClosedError as exc:    # the client was closed under it: nothing to retry
                self.last_error = exc
                return
            except LogtideError as exc:
                self.failures += 1
                self.last_error = exc
                if worth_logging(self.failures):
                    log.warning("heartbeat of %s: the meta-service did not answer (%d so far): %s",
                                self.node_id, self.failures, exc)
                wait = min(period, RETRY_FIRST_S if wait >= period else 2 * wait)
                continue
            wait = period
            if renewed:
                self.beats += 1
            else:
                self.lost = True
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
