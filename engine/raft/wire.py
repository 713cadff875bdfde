"""Raft messages <-> their protobuf form (raft.proto), with a CRC-32C per entry and snapshot.

Decoding checks every field a correct peer would never get wrong: unknown message types and
entry types are MalformedMessage, a CRC that fails is CorruptRaftEntry; nothing half-decoded
reaches the core.
"""
from __future__ import annotations

from typing import Callable

from logtide._ext.crc32c import crc32c
from logtide._ext.raft_entry_crc import entry_crc
from logtide._ext.raft_wire_bytes import entry_field, message_bytes
from logtide.engine.raft import messages as M
from logtide.engine.raft import raft_pb2 as pb
from logtide.engine.raft.errors import CorruptRaftEntry, MalformedMessage
from logtide.engine.raft.messages import ConfState, Entry, Message, Snapshot, SnapshotMeta

__all__ = ["decode_message", "encode_entry", "encode_message", "entry_crc", "entry_wire", "message_wire"]


def encode_entry(e: Entry) -> pb.RaftEntry:
    return pb.RaftEntry(term=e.term, index=e.index, type=e.type, data=e.data,
                        crc=entry_crc(e.term, e.index, e.type, e.data))


def encode_message(m: Message, entry_pb: Callable[[Entry], pb.RaftEntry] = encode_entry) -> pb.RaftMessage:
    """`entry_pb` gives each entry's wire form (a cache may hand out one it made before)."""
    out = pb.RaftMessage(type=m.type, to=m.to, frm=m.frm, term=m.term, log_term=m.log_term, index=m.index,
                         commit=m.commit, reject=m.reject, reject_hint=m.reject_hint, context=m.context)
    if m.entries:
        out.entries.extend([entry_pb(e) for e in m.entries])
    if m.snapshot is not None:
        s = m.snapshot
        out.snapshot.CopyFrom(pb.RaftSnapshot(index=s.meta.index, term=s.meta.term,
                                              voters=sorted(s.meta.conf.voters),
                                              learners=sorted(s.meta.conf.learners), data=s.data,
                                              crc=crc32c(s.data)))
    return out


def entry_wire(e: Entry) -> bytes:
    """An entry's serialized form as a RaftMessage `entries` field (what encode_entry serializes to)."""
    d = e.data
    return entry_field(e.term, e.index, e.type, d if d.__class__ is bytes else bytes(d))


def message_wire(m: Message, entry_bytes: Callable[[Entry], bytes] = entry_wire) -> bytes:
    """encode_message(m).SerializeToString(), written without protobuf objects (but for a
    snapshot, which is rare and large); `entry_bytes` gives each entry's entry_wire form."""
    if m.snapshot is not None:
        return encode_message(m).SerializeToString()
    ctx = m.context
    return message_bytes(m.type, m.to, m.frm, m.term, m.log_term, m.index, m.commit, m.reject, m.reject_hint,
                         ctx if ctx.__class__ is bytes else bytes(ctx), [entry_bytes(e) for e in m.entries])


def decode_message(p: pb.RaftMessage) -> Message:
    if p.type not in M.NETWORK_TYPES and p.type != M.TRANSFER_LEADER:
        raise MalformedMessage(f"unknown Raft message type {p.type}")
    ents = []
    for e in p.entries:
        if e.type not in (M.ENTRY_NORMAL, M.ENTRY_CONF):
            raise MalformedMessage(f"entry {e.index}: unknown entry type {e.type}")
        if entry_crc(e.term, e.index, e.type, e.data) != e.crc:
            raise CorruptRaftEntry(f"entry {e.index} (term {e.term}) from node {p.frm} failed its CRC on the wire")
        ents.append(Entry(e.term, e.index, e.type, e.data))
    snap = None
    if p.HasField("snapshot"):
        s = p.snapshot
        if crc32c(s.data) != s.crc:
            raise CorruptRaftEntry(f"snapshot at {s.index} from node {p.frm} failed its CRC on the wire")
        snap = Snapshot(SnapshotMeta(s.index, s.term, ConfState(s.voters, s.learners)), s.data)
    return Message(p.type, p.to, p.frm, p.term, p.log_term, p.index, ents, p.commit, p.reject, p.reject_hint,
                   snap, p.context)
