"""HAKeeper: the log service's keeper (the seed's shard 0). A replicated state machine keeps
logical ticks, every store's last heartbeat and each log shard's membership; pure checkers compare
that with the cluster info and queue schedule commands, which heartbeat replies deliver."""
from logtide.engine.hakeeper.checkers import check, leader_batch
from logtide.engine.hakeeper.cluster_info import BootstrapState, ClusterInfo
from logtide.engine.hakeeper.command import (InitialCluster, RegisterStore, ScheduleCommandBatch, Tick, decode_command,
                                             encode_command)
from logtide.engine.hakeeper.config import HAKeeperConfig
from logtide.engine.hakeeper.hakeeper_state import HAKeeperState
from logtide.engine.hakeeper.heartbeat import (CNHeartbeat, LogReplicaInfo, LogStoreHeartbeat, PrimaryHeartbeat,
                                               RoHeartbeat, TNHeartbeat)
from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
from logtide.engine.hakeeper.state_machine import STALE_BATCH, HAKeeperStateMachine
from logtide.engine.hakeeper.store_role import StoreRole

HAKEEPER_SHARD_ID = 0

__all__ = [
    "BootstrapState", "CNHeartbeat", "ClusterInfo", "CommandType", "HAKEEPER_SHARD_ID", "HAKeeperConfig",
    "HAKeeperState", "HAKeeperStateMachine", "InitialCluster", "LogReplicaInfo", "LogStoreHeartbeat",
    "PrimaryHeartbeat", "RegisterStore", "RoHeartbeat", "STALE_BATCH", "ScheduleCommand", "ScheduleCommandBatch",
    "StoreRole", "TNHeartbeat", "Tick", "check", "decode_command", "encode_command", "leader_batch",
]
