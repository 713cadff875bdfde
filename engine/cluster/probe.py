"""What each live process of a local cluster answers: its role's status call, with a short deadline.

Log stores and meta replicas report their Raft role, term, leader, commit and applied index; the
primary and RO nodes their LSNs; the TN answers a logtail pull. A CN serves nothing: it is `up`
while its process runs. A process that does not answer in time is reported with the error.
"""
from __future__ import annotations

import json
from typing import Any

from logtide.engine.cluster.layout import ProcessRecord
from logtide.errors import LogtideError

PROBE_TIMEOUT_S = 2.0


def probe(p: ProcessRecord, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """{"ok": True, ...the status} or {"ok": False, "error": "..."}."""
    try:
        return {"ok": True, **_STATUS[p.role](p.address, timeout)}
    except LogtideError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _log_store(address: str, timeout: float) -> dict:
    from logtide.engine.logservice import replicated_pb2 as pb
    from logtide.engine.logservice.replicated import REPLICATED_SERVICE
    from logtide.engine.nodehost.channel import connect_replica
    with connect_replica(REPLICATED_SERVICE, address, timeout=timeout, connect_timeout=timeout) as c:
        s = json.loads(c.invoke("Status", pb.REmpty()).json)
    return {"raft_role": s.get("role"), "term": s.get("term"), "leader": s.get("lead"), "commit": s.get("commit"),
            "applied": s.get("applied")}


def _meta(address: str, timeout: float) -> dict:
    from logtide.engine.meta import meta_pb2 as pb
    from logtide.engine.meta.server import META
    from logtide.engine.rpc import connect
    with connect(META, address, carrier="wire", timeout=timeout, connect_timeout=timeout) as c:
        r = c.invoke("Status", pb.StatusRequest(consistency="stale"))
    return {"raft_role": r.role, "term": r.term, "leader": r.leader_id, "commit": r.commit_index,
            "applied": r.applied_index, "seq": r.seq}


def _replay_node(address: str, timeout: float) -> dict:
    from logtide.engine.rpc import connect
    from logtide.replay import replication_pb2 as pb
    from logtide.replay.replication_rpc import REPLAY_NODE
    with connect(REPLAY_NODE, address, carrier="wire", timeout=timeout, connect_timeout=timeout) as c:
        s = json.loads(c.invoke("Status", pb.Empty()).json)
    keep = ("role", "write_lsn", "applied_lsn", "consistent_lsn", "truncated_lsn")
    return {k: s[k] for k in keep if k in s}


def _tn(address: str, timeout: float) -> dict:
    from logtide.engine.cluster.roles import TABLE
    from logtide.engine.logtail.service import LOGTAIL
    from logtide.engine.rpc import connect
    with connect(LOGTAIL, address, carrier="wire", timeout=timeout, connect_timeout=timeout) as c:
        c.Pull(table=TABLE, from_ts=0, to_ts=1)
    return {}


def _cn(address: str, timeout: float) -> dict:
    return {}


_STATUS = {"logservice": _log_store, "spare": _log_store, "meta": _meta, "primary": _replay_node,
           "ro": _replay_node, "tn": _tn, "cn": _cn}
