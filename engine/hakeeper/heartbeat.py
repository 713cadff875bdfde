"""The heartbeats stores send HAKeeper once a second: what each role reports.

A heartbeat is proposed through Raft; when applied it stamps the store with the current tick and
its reply is the store's queued schedule commands.
"""
from __future__ import annotations

from dataclasses import dataclass

from logtide.engine.hakeeper import hakeeper_format as F
from logtide.engine.hakeeper.hakeeper_format import Reader, Writer
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.errors import MalformedHeartbeatError

Members = tuple[tuple[int, str], ...]   # (replica id, store id), sorted by replica id


def _write_members(w: Writer, members: Members, name: str) -> None:
    w.count(len(members), name)
    for rid, store in members:
        w.u64(rid, f"{name} id")
        w.string(store, f"{name} store")


def _read_members(r: Reader, name: str) -> Members:
    return tuple((r.u64(f"{name} id"), r.string(f"{name} store")) for _ in range(r.count(name)))


@dataclass(frozen=True)
class LogReplicaInfo:
    """One log replica as its store sees it: term, leader, membership (at `epoch`, the index of
    the membership change it last applied), its latest LSN and the LSN its log is truncated to."""
    shard_id: int
    replica_id: int
    term: int = 0
    leader_id: int = 0
    epoch: int = 0
    latest_lsn: int = 0
    voters: Members = ()
    learners: Members = ()
    truncated_lsn: int = 0

    def encode_to(self, w: Writer) -> None:
        for name in ("shard_id", "replica_id", "term", "leader_id", "epoch", "latest_lsn"):
            w.u64(getattr(self, name), name)
        _write_members(w, self.voters, "voters")
        _write_members(w, self.learners, "learners")
        w.u64(self.truncated_lsn, "truncated_lsn")

    @classmethod
    def decode_from(cls, r: Reader) -> "LogReplicaInfo":
        nums = [r.u64(n) for n in ("shard_id", "replica_id", "term", "leader_id", "epoch", "latest_lsn")]
        return cls(*nums, _read_members(r, "voters"), _read_members(r, "learners"), r.u64("truncated_lsn"))

    def validate(self) -> None:
        if self.shard_id < 1 or self.replica_id < 1:
            raise MalformedHeartbeatError(f"log replica ({self.shard_id}, {self.replica_id}): ids start at 1")
        ids = [rid for rid, _ in self.voters] + [rid for rid, _ in self.learners]
        if len(set(ids)) != len(ids) or 0 in ids:
            raise MalformedHeartbeatError(f"shard {self.shard_id}: a replica id is 0 or both voter and learner")
        if any(not store for _, store in self.voters + self.learners):
            raise MalformedHeartbeatError(f"shard {self.shard_id}: a member has no store")
        if self.truncated_lsn > self.latest_lsn:
            raise MalformedHeartbeatError(f"shard {self.shard_id}: truncated LSN above the latest LSN")
        if self.leader_id and self.leader_id not in {rid for rid, _ in self.voters}:
            raise MalformedHeartbeatError(f"shard {self.shard_id}: leader {self.leader_id} is not a voter")


@dataclass(frozen=True)
class LogStoreHeartbeat:
    store_id: str
    replicas: tuple[LogReplicaInfo, ...] = ()
    role = StoreRole.LOG

    def encode_to(self, w: Writer) -> None:
        w.string(self.store_id, "store_id")
        w.count(len(self.replicas), "replicas")
        for rep in self.replicas:
            rep.encode_to(w)

    @classmethod
    def decode_from(cls, r: Reader) -> "LogStoreHeartbeat":
        store = r.string("store_id")
        return cls(store, tuple(LogReplicaInfo.decode_from(r) for _ in range(r.count("replicas"))))

    def validate(self) -> None:
        _store(self.store_id)
        shards = [rep.shard_id for rep in self.replicas]
        if len(set(shards)) != len(shards):
            raise MalformedHeartbeatError(f"store {self.store_id!r} reports a shard twice")
        for rep in self.replicas:
            rep.validate()


@dataclass(frozen=True)
class TNHeartbeat:
    store_id: str
    shards: tuple[tuple[int, int], ...] = ()   # (TN shard id, replica id) it runs
    lsn: int = 0                               # the LSN its state is replayed to
    role = StoreRole.TN

    def encode_to(self, w: Writer) -> None:
        w.string(self.store_id, "store_id")
        w.count(len(self.shards), "shards")
        for sid, rid in self.shards:
            w.u64(sid, "shard id")
            w.u64(rid, "replica id")
        w.u64(self.lsn, "lsn")

    @classmethod
    def decode_from(cls, r: Reader) -> "TNHeartbeat":
        store = r.string("store_id")
        shards = tuple((r.u64("shard id"), r.u64("replica id")) for _ in range(r.count("shards")))
        return cls(store, shards, r.u64("lsn"))

    def validate(self) -> None:
        _store(self.store_id)
        ids = [s for s, _ in self.shards]
        if len(set(ids)) != len(ids) or any(s < 1 or rid < 1 for s, rid in self.shards):
            raise MalformedHeartbeatError(f"TN store {self.store_id!r}: a shard twice, or an id of 0")


@dataclass(frozen=True)
class CNHeartbeat:
    store_id: str
    watermark: int = 0        # the logtail timestamp it has applied
    role = StoreRole.CN

    def encode_to(self, w: Writer) -> None:
        w.string(self.store_id, "store_id")
        w.u64(self.watermark, "watermark")

    @classmethod
    def decode_from(cls, r: Reader) -> "CNHeartbeat":
        return cls(r.string("store_id"), r.u64("watermark"))

    def validate(self) -> None:
        _store(self.store_id)


@dataclass(frozen=True)
class PrimaryHeartbeat:
    store_id: str
    write_lsn: int = 0
    consistent_lsn: int = 0
    truncate_request: int = 0   # the LSN the primary would truncate below, before RO nodes hold it back
    role = StoreRole.PRIMARY

    def encode_to(self, w: Writer) -> None:
        w.string(self.store_id, "store_id")
        for name in ("write_lsn", "consistent_lsn", "truncate_request"):
            w.u64(getattr(self, name), name)

    @classmethod
    def decode_from(cls, r: Reader) -> "PrimaryHeartbeat":
        return cls(r.string("store_id"), r.u64("write_lsn"), r.u64("consistent_lsn"), r.u64("truncate_request"))

    def validate(self) -> None:
        _store(self.store_id)
        if self.consistent_lsn > self.write_lsn or self.truncate_request > self.write_lsn:
            raise MalformedHeartbeatError(f"primary {self.store_id!r}: consistent or truncate LSN above its write LSN")


@dataclass(frozen=True)
class RoHeartbeat:
    store_id: str
    consistent_lsn: int = 0
    applied_lsn: int = 0
    min_used_lsn: int = 0      # the oldest LSN it may still read: the log below it is free to truncate
    role = StoreRole.RO

    def encode_to(self, w: Writer) -> None:
        w.string(self.store_id, "store_id")
        for name in ("consistent_lsn", "applied_lsn", "min_used_lsn"):
            w.u64(getattr(self, name), name)

    @classmethod
    def decode_from(cls, r: Reader) -> "RoHeartbeat":
        return cls(r.string("store_id"), r.u64("consistent_lsn"), r.u64("applied_lsn"), r.u64("min_used_lsn"))

    def validate(self) -> None:
        _store(self.store_id)
        if self.min_used_lsn > self.applied_lsn + 1:
            raise MalformedHeartbeatError(f"RO node {self.store_id!r}: min used LSN above its applied LSN + 1")


Heartbeat = LogStoreHeartbeat | TNHeartbeat | CNHeartbeat | PrimaryHeartbeat | RoHeartbeat


def _store(store_id: str) -> None:
    if not store_id:
        raise MalformedHeartbeatError("a heartbeat needs a store id")


# the command tag of each heartbeat type (hakeeper_format.py)
HEARTBEAT_TYPES: dict[int, type] = {F.LOG_HEARTBEAT: LogStoreHeartbeat, F.TN_HEARTBEAT: TNHeartbeat,
                                    F.CN_HEARTBEAT: CNHeartbeat, F.PRIMARY_HEARTBEAT: PrimaryHeartbeat,
                                    F.RO_HEARTBEAT: RoHeartbeat}
HEARTBEAT_TAG: dict[type, int] = {cls: tag for tag, cls in HEARTBEAT_TYPES.items()}
