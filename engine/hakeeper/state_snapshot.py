"""A HAKeeperState as snapshot bytes and back (format in docs/hakeeper.md).

Maps are written in key order, so two replicas with equal states write equal bytes: the bytes'
CRC is the state's digest.
"""
from __future__ import annotations

from logtide.engine.hakeeper import hakeeper_format as F
from logtide.engine.hakeeper.cluster_info import BootstrapState, ClusterInfo
from logtide.engine.hakeeper.hakeeper_state import HAKeeperState
from logtide.engine.hakeeper.heartbeat import HEARTBEAT_TAG, HEARTBEAT_TYPES
from logtide.engine.hakeeper.log_shard_state import LogShardState
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.engine.hakeeper.store_state import StoreState
from logtide.errors import CorruptHAKeeperSnapshot, MalformedCommandError


def encode_state(st: HAKeeperState) -> bytes:
    w = F.Writer()
    for name in ("index", "tick", "term", "last_batch_index"):
        w.u64(getattr(st, name), name)
    w.u8(int(st.bootstrap), "bootstrap")
    w.boolean(st.cluster is not None, "has cluster")
    if st.cluster is not None:
        for name in ("log_shards", "log_replicas", "non_voting_replicas", "tn_shards"):
            w.u8(getattr(st.cluster, name), name)
    w.u64(st.next_replica_id, "next_replica_id")
    w.u64(st.truncation_lsn, "truncation_lsn")
    w.count(len(st.stores), "stores")
    for sid in sorted(st.stores):
        s = st.stores[sid]
        w.u8(int(s.role), "role")
        w.string(s.store_id, "store_id")
        w.string(s.address, "address")
        w.u64(s.tick, "tick")
        w.u8(HEARTBEAT_TAG[type(s.report)] if s.report is not None else 0, "report")
        if s.report is not None:
            s.report.encode_to(w)
    w.count(len(st.shards), "shards")
    for shard_id in sorted(st.shards):
        sh = st.shards[shard_id]
        for name in ("shard_id", "epoch", "term", "leader_id"):
            w.u64(getattr(sh, name), name)
        for members in (sh.voters, sh.learners):
            w.count(len(members), "members")
            for rid in sorted(members):
                w.u64(rid, "replica id")
                w.string(members[rid], "store")
        w.count(len(sh.non_voting), "non_voting")
        for rid in sorted(sh.non_voting):
            w.u64(rid, "replica id")
    w.count(len(st.queued), "queued")
    for sid in sorted(st.queued):
        w.string(sid, "store")
        w.count(len(st.queued[sid]), "batch")
        for c in st.queued[sid]:
            c.encode_to(w)
    w.count(len(st.in_flight), "in_flight")
    for key in sorted(st.in_flight):
        st.in_flight[key].encode_to(w)
    body = w.getvalue()
    return F.SNAPSHOT_HEADER.pack(F.SNAPSHOT_MAGIC, F.SNAPSHOT_VERSION, len(body), F.crc(body)) + body


def decode_state(data: bytes) -> HAKeeperState:
    """The state in a snapshot; CorruptHAKeeperSnapshot when any check fails."""
    h = F.SNAPSHOT_HEADER
    if len(data) < h.size:
        raise CorruptHAKeeperSnapshot(f"a HAKeeper snapshot has at least {h.size} bytes, got {len(data)}")
    magic, version, length, want = h.unpack_from(data)
    if magic != F.SNAPSHOT_MAGIC or version != F.SNAPSHOT_VERSION:
        raise CorruptHAKeeperSnapshot(f"not a HAKeeper snapshot of version {F.SNAPSHOT_VERSION} "
                                      f"(magic {bytes(magic)!r}, version {version})")
    body = bytes(data[h.size:])
    if len(body) != length or F.crc(body) != want:
        raise CorruptHAKeeperSnapshot(f"HAKeeper snapshot body: {len(body)} bytes (header says {length}) "
                                      f"or its CRC does not match")
    try:
        return _read(F.Reader(body))
    except (MalformedCommandError, ValueError, KeyError) as exc:
        raise CorruptHAKeeperSnapshot(f"HAKeeper snapshot: {exc}") from None


def _read(r: F.Reader) -> HAKeeperState:
    st = HAKeeperState(r.u64("index"), r.u64("tick"), r.u64("term"), r.u64("last_batch_index"))
    st.bootstrap = BootstrapState(r.u8("bootstrap"))
    if r.boolean("has cluster"):
        st.cluster = ClusterInfo(r.u8(), r.u8(), r.u8(), r.u8())
    st.next_replica_id, st.truncation_lsn = r.u64("next_replica_id"), r.u64("truncation_lsn")
    for _ in range(r.count("stores")):
        s = StoreState(StoreRole(r.u8("role")), r.string("store_id"), r.string("address"), r.u64("tick"))
        tag = r.u8("report")
        if tag:
            s.report = HEARTBEAT_TYPES[tag].decode_from(r)
        st.stores[s.store_id] = s
    for _ in range(r.count("shards")):
        sh = LogShardState(r.u64(), r.u64(), r.u64(), r.u64())
        sh.voters = {r.u64(): r.string() for _ in range(r.count())}
        sh.learners = {r.u64(): r.string() for _ in range(r.count())}
        sh.non_voting = {r.u64() for _ in range(r.count())}
        st.shards[sh.shard_id] = sh
    for _ in range(r.count("queued")):
        sid = r.string("store")
        st.queued[sid] = [ScheduleCommand.decode_from(r) for _ in range(r.count("batch"))]
    for _ in range(r.count("in_flight")):
        c = ScheduleCommand.decode_from(r)
        st.in_flight[c.key()] = c
    r.end()
    return st
