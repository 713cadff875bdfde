"""Cluster metadata on the meta-service: node leases, RO-node LSNs, the truncation LSN, checkpoints.

Works on anything with the MetaService API (the embedded service or a connect_meta client).
Key layout (all under "cluster/"):

    cluster/nodes/<node_id>             JSON node info, held by a TTL lease renewed by heartbeat
    cluster/ro/<node_id>                JSON {consistent_lsn, applied_lsn, min_used_lsn}, same lease
    cluster/truncation_lsn              ASCII decimal; only ever moves forward
    cluster/checkpoints/<kind>/<lsn:020> JSON {lsn, location}
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

from logtide.engine.meta.command import check_key, op
from logtide.engine.meta.match_seq import AS_IS, GE, Exact
from logtide.engine.meta.meta_format import U64_MAX
from logtide.errors import MetaInvalidArgument

NODES = "cluster/nodes/"
RO = "cluster/ro/"
TRUNCATION = "cluster/truncation_lsn"
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
class RoLsns:
    """What an RO node reports: consistent LSN, applied LSN and min used LSN."""
    consistent_lsn: int
    applied_lsn: int
    min_used_lsn: int


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
        """Renew the node's lease (and its RO report's); False if the lease had already run out."""
        key = NODES + _node_id(node_id)
        _, cur = self.meta.upsert(key, AS_IS, match_seq=GE(1), ttl_ms=ttl_ms)
        if cur is None:
            return False
        self.meta.upsert(RO + node_id, AS_IS, match_seq=GE(1), ttl_ms=ttl_ms)
        return True

    def deregister(self, node_id: str) -> None:
        self.meta.txn(if_then=[op.delete(NODES + _node_id(node_id)), op.delete(RO + node_id)])

    def nodes(self, role: Optional[str] = None) -> Dict[str, Dict]:
        """Live nodes (lease not run out) and their info, optionally only those with info["role"] == role."""
        out = {}
        for key, v in self.meta.list(NODES):
            info = json.loads(v.data)
            if role is None or info.get("role") == role:
                out[key[len(NODES):]] = info
        return out

    # ------------------------------------------------------------------ RO-node LSNs
    def report_ro_lsns(self, node_id: str, consistent_lsn: int, applied_lsn: int, min_used_lsn: int,
                       ttl_ms: Optional[int] = None) -> None:
        """An RO node reports its LSNs; with ttl_ms the report lapses with the node's lease."""
        body = {"consistent_lsn": _lsn("consistent_lsn", consistent_lsn),
                "applied_lsn": _lsn("applied_lsn", applied_lsn),
                "min_used_lsn": _lsn("min_used_lsn", min_used_lsn)}
        self.meta.upsert(RO + _node_id(node_id), json.dumps(body, sort_keys=True).encode(), ttl_ms=ttl_ms)

    def ro_lsns(self) -> Dict[str, RoLsns]:
        return {k[len(RO):]: RoLsns(**json.loads(v.data)) for k, v in self.meta.list(RO)}

    def min_used_lsn(self) -> Optional[int]:
        """The smallest min used LSN over the live RO reports (None when there are none)."""
        r = self.ro_lsns()
        return min(x.min_used_lsn for x in r.values()) if r else None

    # ------------------------------------------------------------------ truncation LSN
    def truncation_lsn(self) -> int:
        v = self.meta.get(TRUNCATION)
        return int(v.data) if v is not None else 0

    def advance_truncation_lsn(self, lsn: int) -> int:
        """Move the truncation LSN forward to `lsn` (never back); returns the value now stored."""
        _lsn("truncation lsn", lsn)
        while True:
            cur = self.meta.get(TRUNCATION)
            cur_lsn = int(cur.data) if cur is not None else 0
            if cur_lsn >= lsn:
                return cur_lsn
            prev, res = self.meta.upsert(TRUNCATION, str(lsn).encode(),
                                         match_seq=Exact(cur.seq if cur is not None else 0))
            if res is not None and res != prev:
                return lsn      # our CAS won; otherwise someone moved it meanwhile: look again

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


# ---------------------------------------------------------------- the log service's side

def publish_logservice(cm: ClusterMeta, log, node_id: str, addr: str, ttl_ms: int) -> int:
    """Register a log-service node (HAKeeper-style lease) with the LSNs it holds, and carry its
    truncated LSN into the cluster's truncation LSN. Returns the truncation LSN now stored."""
    info = {"role": "logservice", "addr": addr, "latest_lsn": log.get_latest_lsn(),
            "truncated_lsn": log.get_truncated_lsn(), "readers": log.readers()}
    cm.register(node_id, info, ttl_ms)
    return cm.advance_truncation_lsn(info["truncated_lsn"])


def truncate_log_to_cluster(cm: ClusterMeta, log) -> int:
    """Truncate a log-service log up to the cluster's truncation LSN (never past its end, never
    back). The log service still keeps what its registered readers have not replayed.
    Returns the log's truncated LSN afterwards."""
    target = min(cm.truncation_lsn(), log.get_latest_lsn())
    if target > log.get_truncated_lsn():
        log.truncate(target)
    return log.get_truncated_lsn()


class Heartbeater:
    """Keeps one node's lease alive from a background thread: renews every ttl_ms/3."""

    def __init__(self, cluster: ClusterMeta, node_id: str, ttl_ms: int):
        self.cluster, self.node_id, self.ttl_ms = cluster, node_id, ttl_ms
        self.beats = 0
        self.lost = False          # set when a renewal found the lease gone
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"heartbeat-{node_id}")

    def start(self) -> "Heartbeater":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000.0):
            if self.cluster.heartbeat(self.node_id, self.ttl_ms):
                self.beats += 1
            else:
                self.lost = True
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


