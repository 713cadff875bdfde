"""HAKeeperService on one replica (hakeeper.proto): stores propose their registration, heartbeats
and the initial cluster info, an operator its schedule commands (OperatorSchedule); anyone reads
the status.

A follower refuses a proposal with HAKeeperNotLeader naming the leader's address (it does not
forward: a heartbeat is small and the client follows the leader, so one hop is saved and no
forwarding deadline has to be carried). Commands are decoded before anything is proposed, so a
malformed one never reaches the log; Tick and ScheduleCommandBatch are the leader's own and are
refused from stores.
"""
from __future__ import annotations

import json
from typing import Any

from logtide.engine.hakeeper import hakeeper_pb2 as pb
from logtide.engine.hakeeper.command import ScheduleCommandBatch, Tick, decode_command
from logtide.engine.hakeeper.propose_result import encode_result
from logtide.engine.rpc import ServiceDef
from logtide.errors import MalformedCommandError

HAKEEPER_SERVICE = ServiceDef.from_proto(pb, "HAKeeperService")


class HAKeeperServicer:
    """Propose and Status on one HAKeeperHost."""

    def __init__(self, host: Any) -> None:
        self.host = host

    def Propose(self, request: pb.ProposeRequest, context) -> pb.ProposeReply:
        cmd = decode_command(request.command)   # MalformedCommandError / MalformedHeartbeatError
        if isinstance(cmd, (Tick, ScheduleCommandBatch)):
            raise MalformedCommandError(f"{type(cmd).__name__} is proposed by HAKeeper's leader, not by a store")
        value = self.host.propose(request.command)
        return pb.ProposeReply(result=encode_result(value), leader=self.host.leader_address())

    def Status(self, request: pb.StatusRequest, context) -> pb.StatusReply:
        # the leader's answer is linearizable: the client takes a status only from the leader
        return pb.StatusReply(json=json.dumps(self.host.status(linearizable=True), sort_keys=True),
                              leader=self.host.leader_address())
