"""Raft messages <-> their protobuf form (raft.proto), with a CRC-32C per entry and snapshot.

Decoding checks every field a correct peer would never get wrong: unknown message types and
entry types are MalformedMessage, a CRC that fails is CorruptRaftEntry; nothing half-decoded
reaches the core.
"""
from __future__ import annotations

from typing import Callable

from logtide._ext.crc32c import crc32c
from logtide._ext.raft_entry_crc import entry_crc
from logtide.engine.raft import messages as M
from logtide.engine.raft import raft_pb2 as pb
from logtide.engine.raft.errors import CorruptRaftEntry, MalformedMessage
from logtide.engine.raft.messages import ConfState, Entry, Message, Snapshot, SnapshotMeta

__all__ = ["decode_message", "encode_entry", "encode_message", "entry_crc"]


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
