"""The commands HAKeeper's state machine applies, and their bytes (hakeeper_format.py).

Tick (the leader, 10 a second), RegisterStore (a process, when it starts), the five heartbeats,
ScheduleCommandBatch (the leader's checkers, stamped with its Raft term), InitialCluster
(bootstrap, once) and OperatorSchedule (schedule commands an operator or a test asks for).
"""
from __future__ import annotations

from dataclasses import dataclass

from logtide.engine.hakeeper import hakeeper_format as F
from logtide.engine.hakeeper.cluster_info import ClusterInfo
from logtide.engine.hakeeper.heartbeat import HEARTBEAT_TAG, HEARTBEAT_TYPES, Heartbeat
from logtide.engine.hakeeper.schedule_command import SELF_APPLIED, ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.errors import MalformedCommandError, MalformedHeartbeatError


@dataclass(frozen=True)
class Tick:
    """One tick of logical time."""


@dataclass(frozen=True)
class RegisterStore:
    """A store introduces itself (again, after a restart or after HAKeeper dropped it)."""
    role: StoreRole
    store_id: str
    address: str = ""


@dataclass(frozen=True)
class InitialCluster:
    """Bootstrap: set the cluster info. Applied in Created only; ignored ever after."""
    info: ClusterInfo


@dataclass(frozen=True)
class ScheduleCommandBatch:
    """The leader's checker output. `term` is the leader's Raft term and `seen_index` the applied
    index of the state its checkers read: a batch from an older term, or computed before the
    last accepted batch was applied, is ignored."""
    term: int
    seen_index: int
    commands: tuple[ScheduleCommand, ...] = ()


@dataclass(frozen=True)
class OperatorSchedule:
    """Schedule commands asked for from outside the checkers (an operator, a test): checked like a
    batch's, queued for their targets and in flight for `timeout_ticks` from the tick they are applied."""
    timeout_ticks: int
    commands: tuple[ScheduleCommand, ...] = ()


Command = Tick | RegisterStore | InitialCluster | ScheduleCommandBatch | OperatorSchedule | Heartbeat


def encode_command(cmd: Command) -> bytes:
    """A command's bytes; MalformedCommandError (MalformedHeartbeatError for heartbeats) when a
    field cannot be encoded or is impossible."""
    w = F.Writer()
    if isinstance(cmd, Tick):
        tag = F.TICK
    elif isinstance(cmd, RegisterStore):
        tag = F.REGISTER_STORE
        if not isinstance(cmd.role, StoreRole) or not cmd.store_id:
            raise MalformedCommandError(f"register: a StoreRole and a store id are needed, got {cmd!r}")
        w.u8(int(cmd.role), "role")
        w.string(cmd.store_id, "store_id")
        w.string(cmd.address, "address")
    elif isinstance(cmd, InitialCluster):
        tag = F.INITIAL_CLUSTER
        i = cmd.info
        for name in ("log_shards", "log_replicas", "non_voting_replicas", "tn_shards"):
            w.u8(getattr(i, name), name)
    elif isinstance(cmd, ScheduleCommandBatch):
        tag = F.SCHEDULE_BATCH
        w.u64(cmd.term, "term")
        w.u64(cmd.seen_index, "seen_index")
        w.count(len(cmd.commands), "commands")
        for c in cmd.commands:
            c.validate()
            c.encode_to(w)
    elif isinstance(cmd, OperatorSchedule):
        tag = F.OPERATOR_SCHEDULE
        w.u64(cmd.timeout_ticks, "timeout_ticks")
        w.count(len(cmd.commands), "commands")
        for c in cmd.commands:
            c.validate()
            c.encode_to(w)
    elif type(cmd) in HEARTBEAT_TAG:
        tag = HEARTBEAT_TAG[type(cmd)]
        try:
            cmd.validate()
            cmd.encode_to(w)
        except MalformedHeartbeatError:
            raise
        except MalformedCommandError as exc:
            raise MalformedHeartbeatError(str(exc)) from None
    else:
        raise MalformedCommandError(f"not a HAKeeper command: {type(cmd).__name__}")
    return F.HEADER.pack(F.MAGIC, F.VERSION, tag) + w.getvalue()


def command_tag(data: bytes) -> int:
    """The tag of an encoded command (after checking its magic and version)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedCommandError(f"a HAKeeper command is bytes, got {type(data).__name__}")
    if len(data) < F.HEADER.size:
        raise MalformedCommandError(f"a HAKeeper command has at least {F.HEADER.size} bytes, got {len(data)}")
    magic, version, tag = F.HEADER.unpack_from(data)
    if magic != F.MAGIC:
        raise MalformedCommandError(f"bad magic {bytes(magic)!r}: not a HAKeeper command")
    if version != F.VERSION:
        raise MalformedCommandError(f"HAKeeper command version {version}; this build reads {F.VERSION}")
    return tag


def decode_command(data: bytes) -> Command:
    """Parse and validate a command; MalformedCommandError (or MalformedHeartbeatError) on bad input."""
    tag = command_tag(data)
    body = bytes(data[F.HEADER.size:])
    if tag in F.HEARTBEAT_TAGS:
        r = F.Reader(body, MalformedHeartbeatError)
        hb = HEARTBEAT_TYPES[tag].decode_from(r)
        r.end()
        hb.validate()
        return hb
    r = F.Reader(body)
    if tag == F.TICK:
        cmd: Command = Tick()
    elif tag == F.REGISTER_STORE:
        raw = r.u8("role")
        try:
            role = StoreRole(raw)
        except ValueError:
            raise MalformedCommandError(f"unknown store role {raw}") from None
        cmd = RegisterStore(role, r.string("store_id"), r.string("address"))
        if not cmd.store_id:
            raise MalformedCommandError("register: empty store id")
    elif tag == F.INITIAL_CLUSTER:
        cmd = InitialCluster(ClusterInfo(r.u8("log_shards"), r.u8("log_replicas"), r.u8("non_voting_replicas"),
                                         r.u8("tn_shards")))
    elif tag == F.SCHEDULE_BATCH:
        term, seen = r.u64("term"), r.u64("seen_index")
        commands = tuple(ScheduleCommand.decode_from(r) for _ in range(r.count("commands")))
        cmd = ScheduleCommandBatch(term, seen, commands)
    elif tag == F.OPERATOR_SCHEDULE:
        timeout = r.u64("timeout_ticks")
        cmd = OperatorSchedule(timeout, tuple(ScheduleCommand.decode_from(r) for _ in range(r.count("commands"))))
        if timeout < 1:
            raise MalformedCommandError("operator schedule: timeout_ticks must be >= 1")
        own = [c.kind.name for c in cmd.commands if c.kind in SELF_APPLIED]
        if own:
            raise MalformedCommandError(f"operator schedule: {', '.join(own)} are HAKeeper's own, not an operator's")
    else:
        raise MalformedCommandError(f"unknown HAKeeper command tag {tag}")
    r.end()
    return cmd
