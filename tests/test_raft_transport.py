"""RaftTransport: batches go between replicas over the framed carrier on 127.0.0.1 and in-process; bad
messages (CRC failures, unknown types, foreign groups, non-members) are refused with a typed error."""
import queue
import time

import pytest

from logtide.engine.raft import messages as M
from logtide.engine.raft import raft_pb2 as pb
from logtide.engine.raft.errors import CorruptRaftEntry, MalformedMessage, UnknownPeer
from logtide.engine.raft.messages import ConfState, Entry, Message, Snapshot, SnapshotMeta
from logtide.engine.nodehost.transport import RAFT_SERVICE, RaftTransport
from logtide.engine.raft.wire import decode_message, encode_message
from logtide.engine.rpc.wire_server import WireServer


def _pair(network: bool):
    got = {1: queue.Queue(), 2: queue.Queue()}
    ts = {i: RaftTransport(i, 7, lambda ms, i=i: [got[i].put(m) for m in ms]) for i in (1, 2)}
    servers = []
    if network:
        for i in (1, 2):
            s = WireServer("127.0.0.1:0")
            s.add_service(RAFT_SERVICE, ts[i].servicer)
            s.start()
            servers.append(s)
        ts[1].set_peer(2, servers[1].address)
        ts[2].set_peer(1, servers[0].address)
    else:
        ts[1].set_peer(2, ts[2].servicer)
        ts[2].set_peer(1, ts[1].servicer)
    return ts, got, servers


@pytest.mark.parametrize("network", [True, False], ids=["wire", "inproc"])
def test_messages_go_both_ways_in_order(network):
    ts, got, servers = _pair(network)
    try:
        snap = Snapshot(SnapshotMeta(9, 2, ConfState([1, 2], [3])), b"image")
        for k in range(200):
            ts[1].send([Message(M.APP, to=2, frm=1, term=3, index=k, log_term=2,
                                entries=[Entry(3, k + 1, M.ENTRY_NORMAL, b"e%d" % k)], commit=k)])
        ts[2].send([Message(M.SNAP, to=1, frm=2, term=3, snapshot=snap)])
        recv = [got[2].get(timeout=10) for _ in range(200)]
        assert [m.entries[0].data for m in recv] == [b"e%d" % k for k in range(200)]
        back = got[1].get(timeout=10)
        assert back.type == M.SNAP and back.snapshot.data == b"image" and back.snapshot.meta.conf == snap.meta.conf
    finally:
        for t in ts.values():
            t.close()
        for s in servers:
            s.stop(0)


def test_codec_refuses_corruption_and_unknown_types():
    m = Message(M.APP, to=2, frm=1, term=3, index=4, log_term=2, entries=[Entry(3, 5, 0, b"payload")])
    p = encode_message(m)
    assert decode_message(p).entries[0].data == b"payload"
    p.entries[0].data = b"pAyload"
    with pytest.raises(CorruptRaftEntry):
        decode_message(p)
    p = encode_message(m)
    p.type = 200
    with pytest.raises(MalformedMessage):
        decode_message(p)
    p = encode_message(m)
    p.entries[0].type = 9
    with pytest.raises(MalformedMessage):
        decode_message(p)
    s = encode_message(Message(M.SNAP, to=2, frm=1, term=3, snapshot=Snapshot(SnapshotMeta(5, 3, ConfState([1])), b"x")))
    s.snapshot.data = b"y"
    with pytest.raises(CorruptRaftEntry):
        decode_message(s)


def test_receiver_refuses_foreign_groups_non_members_and_forgeries():
    got = []
    t = RaftTransport(2, 7, got.extend)
    t.set_peer(1, "127.0.0.1:1")  # a known member (never reached in this test)
    try:
        good = encode_message(Message(M.HEARTBEAT, to=2, frm=1, term=3))
        t.receive(pb.RaftBatch(cluster=8, frm=1, messages=[good]))
        t.receive(pb.RaftBatch(cluster=7, frm=5, messages=[good]))
        forged = encode_message(Message(M.HEARTBEAT, to=2, frm=3, term=3))
        t.receive(pb.RaftBatch(cluster=7, frm=1, messages=[forged]))
        local = encode_message(Message(M.HUP, to=2, frm=1, term=3))
        t.receive(pb.RaftBatch(cluster=7, frm=1, messages=[local]))
        assert got == [] and t.rejected == 4
        assert [type(e) for e in t.errors] == [UnknownPeer, UnknownPeer, UnknownPeer, MalformedMessage]
        t.receive(pb.RaftBatch(cluster=7, frm=1, messages=[good]))
        assert len(got) == 1 and got[0].type == M.HEARTBEAT
    finally:
        t.close()


def test_a_dead_peer_is_reported_unreachable_and_sending_resumes():
    reports = []
    got = queue.Queue()
    a = RaftTransport(1, 7, lambda ms: None, on_unreachable=reports.append)
    b = RaftTransport(2, 7, lambda ms: [got.put(m) for m in ms])
    b.set_peer(1, "127.0.0.1:1")
    server = WireServer("127.0.0.1:0")
    server.add_service(RAFT_SERVICE, b.servicer)
    port = server.start()
    a.set_peer(2, server.address)
    try:
        a.send([Message(M.HEARTBEAT, to=2, frm=1, term=1)])
        assert got.get(timeout=10).type == M.HEARTBEAT
        server.stop(0)
        deadline = time.monotonic() + 10
        while not reports and time.monotonic() < deadline:
            a.send([Message(M.HEARTBEAT, to=2, frm=1, term=1)])
            time.sleep(0.05)
        assert reports and reports[0] == 2
        server = WireServer(f"127.0.0.1:{port}")  # the peer comes back on the same address
        server.add_service(RAFT_SERVICE, b.servicer)
        server.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            a.send([Message(M.HEARTBEAT, to=2, frm=1, term=2)])
            try:
                if got.get(timeout=0.2).term == 2:
                    break
            except queue.Empty:
                pass
        else:
            raise AssertionError("sending did not resume after the peer came back")
    finally:
        a.close()
        b.close()
        server.stop(0)
