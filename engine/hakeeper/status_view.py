"""HAKeeper's status as JSON-ready data: what `logtide hakeeper status` and `cluster status` show.

Tick, bootstrap state, every store (role, address, last heartbeat tick, down by the down rule under
the serving replica's config), every log shard, and the schedule commands queued and in flight
(`pending_commands`: every accepted command not yet finished or expired, queued ones too).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.engine.hakeeper.hakeeper_state import HAKeeperState
from logtide.engine.hakeeper.heartbeat import LogStoreHeartbeat, RoHeartbeat
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.hakeeper.store_role import ROLE_NAMES


def command_view(c: ScheduleCommand) -> dict[str, Any]:
    return {"type": c.kind.name, "target": c.target, "shard": c.shard_id, "replica": c.replica_id,
            "replica_store": c.replica_store, "learner": c.learner, "expires_tick": c.expires_tick,
            "text": str(c)}


def status_view(state: HAKeeperState, config: HAKeeperConfig) -> dict[str, Any]:
    stores = {}
    for sid, s in sorted(state.stores.items()):
        stores[sid] = {"role": ROLE_NAMES[s.role], "address": s.address, "last_heartbeat_tick": s.tick,
                       "heartbeated": s.report is not None,
                       "down": config.expired(s.role, s.tick, state.tick)}
        if isinstance(s.report, RoHeartbeat):   # its hold on truncation
            stores[sid]["min_used_lsn"] = s.report.min_used_lsn
        if isinstance(s.report, LogStoreHeartbeat):   # the replicas it runs, as its last heartbeat said
            stores[sid]["replicas"] = [{"shard": r.shard_id, "replica": r.replica_id, "latest_lsn": r.latest_lsn}
                                       for r in s.report.replicas]
    shards = {str(k): {"epoch": sh.epoch, "term": sh.term, "leader": sh.leader_id,
                       "voters": {str(r): st for r, st in sorted(sh.voters.items())},
                       "learners": {str(r): st for r, st in sorted(sh.learners.items())},
                       "non_voting": sorted(sh.non_voting)}
              for k, sh in sorted(state.shards.items())}
    queued = [command_view(c) for _sid, cs in sorted(state.queued.items()) for c in cs]
    in_flight = [command_view(c) for _k, c in sorted(state.in_flight.items(), key=lambda kv: str(kv[0]))]
    return {"index": state.index, "tick": state.tick, "term": state.term, "bootstrap": state.bootstrap.name,
            "cluster": None if state.cluster is None else asdict(state.cluster),
            "truncation_lsn": state.truncation_lsn, "stores": stores, "shards": shards, "queued": queued,
            "in_flight": in_flight, "pending_commands": in_flight}
