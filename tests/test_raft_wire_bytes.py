"""_ext/raft_wire_bytes.pyx (through wire.message_wire) against the reference: protobuf's own
serialization of encode_message's RaftMessage, in a RaftBatch."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logtide._ext.raft_wire_bytes import batch_bytes, entry_field, message_bytes
from logtide.engine.raft import messages as M
from logtide.engine.raft import raft_pb2 as pb
from logtide.engine.raft.messages import ConfState, Entry, Message, Snapshot, SnapshotMeta
from logtide.engine.raft.wire import decode_message, encode_message, entry_wire, message_wire

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
SMALL = st.integers(min_value=0, max_value=300)

entries = st.builds(Entry, U64, U64, st.sampled_from([M.ENTRY_NORMAL, M.ENTRY_CONF]), st.binary(max_size=300))
messages = st.builds(Message, st.integers(min_value=0, max_value=40), U64, U64, U64, U64, U64,
                     st.lists(entries, max_size=6), U64, st.booleans(), U64, st.none(), st.binary(max_size=40))


def reference(cluster: int, frm: int, msgs: list[Message], seq: int) -> bytes:
    return pb.RaftBatch(cluster=cluster, frm=frm, seq=seq, messages=[encode_message(m) for m in msgs]).SerializeToString()


@settings(max_examples=300, deadline=None)
@given(U64, U64, st.lists(messages, max_size=4), U64)
def test_batch_bytes_are_protobufs_serialization(cluster, frm, msgs, seq):
    got = batch_bytes(cluster, frm, [message_wire(m) for m in msgs], seq)
    want = reference(cluster, frm, msgs, seq)
    assert pb.RaftBatch.FromString(got) == pb.RaftBatch.FromString(want)
    assert got == want


@settings(max_examples=200, deadline=None)
@given(messages, st.sampled_from(sorted(M.NETWORK_TYPES)))
def test_message_wire_decodes_to_the_message(m, mtype):
    m.type = mtype
    back = decode_message(pb.RaftMessage.FromString(message_wire(m)))
    assert (back.type, back.to, back.frm, back.term, back.log_term, back.index, back.commit, back.reject,
            back.reject_hint, back.context) == (m.type, m.to, m.frm, m.term, m.log_term, m.index, m.commit,
                                                m.reject, m.reject_hint, m.context)
    assert back.entries == m.entries   # the CRCs were checked on the way


def test_entry_wire_takes_any_bytes_like_data():
    e = Entry(3, 9, M.ENTRY_NORMAL, b"abc")
    assert entry_wire(Entry(3, 9, M.ENTRY_NORMAL, memoryview(b"abc"))) == entry_wire(e)
    assert entry_wire(Entry(3, 9, M.ENTRY_NORMAL, bytearray(b"abc"))) == entry_wire(e)


def test_a_snapshot_message_goes_through_protobuf():
    m = Message(M.SNAP, to=2, frm=1, term=3, snapshot=Snapshot(SnapshotMeta(5, 3, ConfState([1, 2])), b"img"))
    assert message_wire(m) == encode_message(m).SerializeToString()


def test_bad_arguments_are_typed_errors():
    with pytest.raises(OverflowError):
        entry_field(1, 1, 256, b"")
    with pytest.raises(TypeError):
        message_bytes(3, 2, 1, 1, 0, 0, 0, False, 0, b"", ["not bytes"])
    with pytest.raises(TypeError):
        batch_bytes(1, 1, [bytearray(b"x")])
