"""A log store's side of HAKeeper: its heartbeat sender, the runner of the commands the replies
carry, and (in a local cluster, `--cluster-dir D`) its role in D/cluster.json."""
from __future__ import annotations

import argparse

from logtide.engine.hakeeper.heartbeat_sender import HeartbeatSender
from logtide.engine.hakeeper.replica_stores import ReplicaStores
from logtide.engine.hakeeper.store_reports import log_store_name, log_store_report
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.engine.logservice.replica_slot import ReplicaSlot
from logtide.engine.logservice.schedule_runner import ScheduleRunner
from logtide.errors import UnknownReplicaError


def start_store_sender(args: argparse.Namespace, slot: ReplicaSlot) -> HeartbeatSender:
    """Heartbeat to HAKeeper at `args.hakeeper` as `args.store_id` (default log-ID), running what it sends."""
    store_id = args.store_id or log_store_name(args.id)
    sender: HeartbeatSender | None = None

    def status() -> dict:
        return sender.client.status()

    def members(shard_id: int) -> dict[int, str]:
        st = status()
        sh = st["shards"].get(str(shard_id))
        if sh is None:
            raise UnknownReplicaError(f"HAKeeper knows no log shard {shard_id}")
        return {int(r): st["stores"][s]["address"] for r, s in {**sh["voters"], **sh["learners"]}.items()
                if s in st["stores"]}

    stores = ReplicaStores(status)
    heartbeat = lambda svc, sid: log_store_report(svc, sid, stores)   # noqa: E731
    launch = on_killed = None
    report = lambda: slot.report(store_id, heartbeat)   # noqa: E731
    if args.cluster_dir:
        from logtide.engine.cluster.log_store_role import SPARE, LogStoreRole
        from logtide.engine.cluster.process_restart import restart_store
        role = LogStoreRole(args.cluster_dir, store_id, lambda: slot.replica_id)
        launch = lambda sid: restart_store(args.cluster_dir, sid)   # noqa: E731
        on_killed = lambda _rid: role.record(SPARE)                 # noqa: E731
        report = lambda: role.observe(slot.report(store_id, heartbeat))   # noqa: E731
    # a new learner's address is the one its store registered with HAKeeper
    runner = ScheduleRunner(slot, store_id, lambda sid: status()["stores"][sid]["address"], members=members,
                            launch=launch, on_killed=on_killed)
    sender = HeartbeatSender(args.hakeeper, StoreRole.LOG, store_id, slot.address, report, run_command=runner.run)
    return sender.start()
