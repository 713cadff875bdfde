"""What each kind of store process reports in its heartbeat, read from the live objects.

Log store: its replica of the log shard (shard 1; replica id = its Raft id; term, leader, the
membership at `conf_index` as the epoch, the latest and truncated LSN). Log stores are named
`log-<replica id>` unless told otherwise, so a voter's store is known from its id. TN: the TN
shard it runs and the LSN it replayed. CN: its lowest table watermark. Primary: write and
consistent LSN, and the LSN it would truncate below on its own. RO node: consistent, applied and
min used LSN. Values are clamped into what HAKeeper accepts (a report is a snapshot of moving
counters, read without a lock).
"""
from __future__ import annotations

from typing import Any, Callable

from logtide.engine.hakeeper.heartbeat import (CNHeartbeat, LogReplicaInfo, LogStoreHeartbeat, PrimaryHeartbeat,
                                               RoHeartbeat, TNHeartbeat)

LOG_SHARD_ID = 1   # the one data log shard a `logservice serve --raft` group is


def log_store_name(replica_id: int) -> str:
    return f"log-{replica_id}"


def log_store_report(svc: Any, store_id: str, store_of: Callable[[int], str] = log_store_name) -> LogStoreHeartbeat:
    st = svc.status()
    if not st["voters"]:
        return LogStoreHeartbeat(store_id, ())   # a spare (`--join`) that no membership names yet
    voters = tuple((v, store_of(v)) for v in st["voters"])
    learners = tuple((v, store_of(v)) for v in st["learners"])
    leader = st["lead"] if st["lead"] in st["voters"] else 0
    latest = max(st["applied"], 0)
    truncated = min(int(st.get("truncated_lsn") or 0), latest)
    rep = LogReplicaInfo(LOG_SHARD_ID, st["id"], st["term"], leader, max(1, st.get("conf_index", 0)), latest,
                         voters, learners, truncated)
    return LogStoreHeartbeat(store_id, (rep,))


def tn_report(tn: Any, store_id: str, shard_id: int = 1, replica_id: int = 1) -> TNHeartbeat:
    return TNHeartbeat(store_id, ((shard_id, replica_id),), int(getattr(tn, "last_lsn", 0) or 0))


def cn_report(cn: Any, tables: list[str], store_id: str) -> CNHeartbeat:
    marks = [int(cn.watermark(t) or 0) for t in tables]
    return CNHeartbeat(store_id, min(marks) if marks else 0)


def primary_report(primary: Any, store_id: str) -> PrimaryHeartbeat:
    write = int(primary.write_lsn)
    consistent = min(int(primary.consistent_lsn), write)
    # what the primary itself no longer needs: HAKeeper lowers it to the RO nodes' holds
    return PrimaryHeartbeat(store_id, write, consistent, min(int(primary.own_truncation_point()), consistent))


def ro_report(ro: Any, store_id: str) -> RoHeartbeat:
    applied = int(ro.applied_lsn)
    min_used = min(int(ro.min_used_lsn()), applied + 1)
    return RoHeartbeat(store_id, min(int(ro.consistent_lsn), applied), applied, min_used)
