"""The Raft replication stream over the framed carrier on 127.0.0.1: one stream per peer carries batches in
order and without loss under load, comes back after the peer restarts, finds a stopped peer
(SIGSTOP) within its acknowledgement deadline, and survives bad frames (typed errors, logged)."""
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from logtide._ext import wire_codec as wc
from logtide.engine.raft import messages as M
from logtide.engine.raft import raft_pb2 as pb
from logtide.engine.nodehost import transport as T
from logtide.engine.raft.errors import CorruptRaftEntry, MalformedMessage
from logtide.engine.raft.messages import Entry, Message
from logtide.engine.nodehost.transport import RAFT_SERVICE, RaftTransport
from logtide.engine.nodehost.channel import connect_replica
from logtide.engine.raft.wire import encode_message
from logtide.engine.rpc.wire_client import WireTransport
from logtide.engine.rpc.wire_server import WireServer
from logtide.errors import InvalidRequest
from frozen import freeze


def _serve(t: RaftTransport, address: str = "127.0.0.1:0", threaded: bool = False) -> WireServer:
    """Serve t; threaded=True serves its streams on a thread each (the generator Stream) instead of
    on the server's loop, so a test may block inside `deliver` without stopping the loop."""
    s = WireServer(address)
    s.add_service(RAFT_SERVICE, _Threaded(t.servicer) if threaded else t.servicer)
    s.start()
    return s


class _Threaded:
    """The transport's servicer without its loop-side stream (open_Stream)."""

    def __init__(self, servicer) -> None:
        self.Send, self.Stream = servicer.Send, servicer.Stream


def _wait(cond, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.01)
    return time.monotonic() - start


def _app(k: int, frm: int = 1, to: int = 2) -> Message:
    return Message(M.APP, to=to, frm=frm, term=3, index=k, log_term=3,
                   entries=[Entry(3, k + 1, M.ENTRY_NORMAL, b"e%d" % k)], commit=k)


def test_one_stream_carries_everything_in_order_under_load():
    got = queue.SimpleQueue()
    a = RaftTransport(1, 7, lambda ms: None)
    b = RaftTransport(2, 7, lambda ms: [got.put(m) for m in ms])
    sb = _serve(b)
    b.set_peer(1, "127.0.0.1:1")  # a member; b never needs to reach it here
    a.set_peer(2, sb.address)
    n, writers = T.QUEUE_MESSAGES - 192, 4  # all of it fits in the queue: nothing may be dropped
    try:
        # several threads feed the queue at once (as the driver and the send_now path do); each
        # thread's own messages must arrive in its order, and none may be lost
        def feed(w):
            for k in range(w, n, writers):
                a.send([_app(k)])
                if k % 256 == w:
                    time.sleep(0.002)  # let batches form and drain
        ths = [threading.Thread(target=feed, args=(w,)) for w in range(writers)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        recv = [got.get(timeout=20).index for _ in range(n)]
        assert sorted(recv) == list(range(n))
        for w in range(writers):
            mine = [k for k in recv if k % writers == w]
            assert mine == sorted(mine), f"writer {w}'s messages were reordered"
        st = a.peer_stats(2)
        assert st["streams"] == 1 and st["stalls"] == 0 and a.dropped == 0
        # one batch per message without batching; 15 runs on this 2-core machine gave 1,168-3,263
        # batches for 8,000 (the idle sender's direct writes carry one message), so n // 4 failed often
        assert st["batches"] < n // 2, f"{st['batches']} batches for {n} messages: not batched"
    finally:
        a.close()
        b.close()
        sb.stop(0)


def test_stream_reconnects_after_the_peer_restarts():
    reports = []
    got = queue.SimpleQueue()
    a = RaftTransport(1, 7, lambda ms: None, on_unreachable=reports.append)
    b = RaftTransport(2, 7, lambda ms: [got.put(m) for m in ms])
    b.set_peer(1, "127.0.0.1:1")
    sb = _serve(b)
    port = sb.port
    a.set_peer(2, sb.address)
    try:
        a.send([Message(M.HEARTBEAT, to=2, frm=1, term=1)])
        assert got.get(timeout=10).term == 1
        sb.stop(0)
        _wait(lambda: reports, 5, "the stream failure being reported")
        assert not a.peer_stats(2)["connected"]
        sb = _serve(b, f"127.0.0.1:{port}")  # the peer comes back on its address
        start = time.monotonic()
        while True:
            a.send([Message(M.HEARTBEAT, to=2, frm=1, term=2)])
            try:
                if got.get(timeout=0.1).term == 2:
                    break
            except queue.Empty:
                pass
            assert time.monotonic() - start < 5, "the stream did not come back"
        assert a.peer_stats(2)["streams"] >= 2
    finally:
        a.close()
        b.close()
        sb.stop(0)


def test_a_replaced_stream_takes_no_message_with_it():
    """A killed stream's request side ends without taking from the queue: the next message goes on
    the new stream at once (grpc-python's sender thread pulls one more request from an ended call's
    iterator and discards it: the first stream transport lost messages that way)."""
    got = queue.SimpleQueue()
    a = RaftTransport(1, 7, lambda ms: None)
    b = RaftTransport(2, 7, lambda ms: [got.put(m) for m in ms])
    b.set_peer(1, "127.0.0.1:1")
    sb = _serve(b)
    try:
        a.set_peer(2, sb.address)
        _wait(lambda: a.peer_stats(2)["connected"], 5, "the stream coming up")
        for k in range(20):
            old = a._peers[2].feed
            old.kill("replaced by the test")  # what the watchdog does to a stuck stream
            _wait(lambda: a._peers[2].feed not in (None, old), 5, "a new stream")
            a.send([_app(k)])
            assert got.get(timeout=2).index == k
        assert a.peer_stats(2)["streams"] >= 21
    finally:
        a.close()
        b.close()
        sb.stop(0)


_PEER = """
import sys, time
from logtide.engine.nodehost.transport import RAFT_SERVICE, RaftTransport
from logtide.engine.rpc.wire_server import WireServer
t = RaftTransport(2, 7, lambda ms: None)
t.set_peer(1, "127.0.0.1:1")
s = WireServer("127.0.0.1:0"); s.add_service(RAFT_SERVICE, t.servicer); s.start()
print(s.port, flush=True)
time.sleep(600)
"""


def test_a_stopped_peer_is_found_within_the_ack_deadline(tmp_path):
    """SIGSTOP keeps the peer's sockets open and silent: only the missing acknowledgements tell."""
    proc = subprocess.Popen([sys.executable, "-c", _PEER], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    reports = []
    a = RaftTransport(1, 7, lambda ms: None, on_unreachable=reports.append)
    try:
        port = int(proc.stdout.readline())
        a.set_peer(2, f"127.0.0.1:{port}")
        _wait(lambda: a.peer_stats(2)["connected"], 10, "the stream coming up")
        freeze(proc.pid)
        stopped = time.monotonic()
        reports.clear()
        stop_sending = threading.Event()

        def heartbeats():  # a leader keeps writing to the stopped peer
            while not stop_sending.wait(0.05):
                a.send([Message(M.HEARTBEAT, to=2, frm=1, term=1)])
        th = threading.Thread(target=heartbeats)
        th.start()
        try:
            _wait(lambda: a.peer_stats(2)["stalls"] >= 1, 5, "the stuck stream being found")
            found = time.monotonic() - stopped
            # the last batch before the stop may have been acknowledged late; a write after it is
            # overdue ACK_TIMEOUT later, and the watchdog looks every WATCH_INTERVAL
            assert found < T.ACK_TIMEOUT + T.KEEPALIVE + 0.5, f"found after {found:.2f} s"
            _wait(lambda: reports, 2, "the stopped peer being reported unreachable")
            assert not a.peer_stats(2)["connected"]
            os.kill(proc.pid, signal.SIGCONT)
            _wait(lambda: a.peer_stats(2)["connected"], 5, "a new stream after SIGCONT")
        finally:
            stop_sending.set()
            th.join()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()
        a.close()


def test_bad_frames_on_the_stream_are_refused_and_the_server_stays_up():
    got = queue.SimpleQueue()
    b = RaftTransport(2, 7, lambda ms: [got.put(m) for m in ms])
    b.set_peer(1, "127.0.0.1:1")
    sb = _serve(b)
    raw = WireTransport(sb.address, timeout=10)
    client = connect_replica(RAFT_SERVICE, sb.address, timeout=10)
    try:
        # garbage instead of a RaftBatch (a MSG frame of bytes that do not parse): the stream ends
        # with InvalidRequest, the receiver logs it
        conn = raw.connection
        s = conn.open_stream(RAFT_SERVICE.method("Stream"), time.monotonic() + 10)
        conn.send(wc.encode_msg(s.sid, b"\xff\xff\xff not a batch"))
        conn.send(wc.encode_end(s.sid))
        with pytest.raises(InvalidRequest):
            list(s)
        assert isinstance(b.errors[-1], MalformedMessage) and b.rejected == 1
        # on a new stream: a batch whose entry fails its CRC is refused (and acknowledged: the stream
        # goes on), the next batch is delivered
        broken = encode_message(_app(5))
        broken.entries[0].data = b"tampered"
        batches = [pb.RaftBatch(cluster=7, frm=1, seq=1, messages=[broken]),
                   pb.RaftBatch(cluster=7, frm=1, seq=2, messages=[encode_message(_app(6))]),
                   pb.RaftBatch(cluster=7, frm=1, seq=3)]
        acks = [r.seq for r in client.Stream(iter(batches))]
        assert acks[-1] == 3
        assert got.get(timeout=5).index == 6 and got.empty()
        assert isinstance(b.errors[-1], CorruptRaftEntry) and b.rejected == 2
        # and a regular sender still gets through
        a = RaftTransport(1, 7, lambda ms: None)
        a.set_peer(2, sb.address)
        try:
            a.send([_app(7)])
            assert got.get(timeout=10).index == 7
        finally:
            a.close()
    finally:
        raw.close()
        client.close()
        b.close()
        sb.stop(0)


def test_election_messages_bypass_a_stuck_stream():
    """Votes go as their own calls: a stream wedged at the receiver does not hold them up. (The
    receiver's handler is wedged on a thread of its own: on the loop, `deliver` must never block.)"""
    got = queue.SimpleQueue()
    release = threading.Event()

    def deliver(ms):  # the replication stream's handler blocks in here, like a wedged receiver
        if any(m.type == M.APP for m in ms):
            release.wait(10)
        for m in ms:
            got.put(m)
    a = RaftTransport(1, 7, lambda ms: None)
    b = RaftTransport(2, 7, deliver)
    b.set_peer(1, "127.0.0.1:1")
    sb = _serve(b, threaded=True)
    try:
        a.set_peer(2, sb.address)
        a.send([_app(1)])
        time.sleep(0.2)  # the APP is in the receiver's handler now
        a.send([_app(2), Message(M.VOTE, to=2, frm=1, term=9, index=3, log_term=2)])
        m = got.get(timeout=T.ACK_TIMEOUT)  # before the watchdog even replaces the stuck stream
        assert m.type == M.VOTE and m.term == 9
    finally:
        release.set()
        a.close()
        b.close()
        sb.stop(0)


def test_peer_ids_bind_a_node_to_one_group_or_to_every_group():
    """With peer ids on, a batch claiming node 1 of group 7 is taken when the sender's certificate
    names logtide:raft:7:1 (this group) or logtide:raft:1 (any group), and refused, with a logged
    reason, when it names node 1 of another group, another node, or nothing."""
    got = []
    b = RaftTransport(2, 7, got.extend)
    b.set_peer(1, "127.0.0.1:1")  # a member; b never needs to reach it here
    batch = pb.RaftBatch(cluster=7, frm=1, messages=[encode_message(_app(5))])
    try:
        assert b.receive(batch, frozenset({"logtide:raft:7:1"})) == 1
        assert b.receive(batch, frozenset({"logtide:raft:1", "logtide:raft:9:4"})) == 1
        assert b.receive(batch, None) == 1                     # a server without peer ids
        assert len(got) == 3
        for names in ({"logtide:raft:8:1"}, {"logtide:raft:7:2", "logtide:raft:2"}, set()):
            assert b.receive(batch, frozenset(names)) == 0, names
        assert len(got) == 3
        last = str(b.errors[-1])
        assert "names no URI, not logtide:raft:1 (nor logtide:raft:7:1)" in last, last
        assert "logtide:raft:8:1, not logtide:raft:1" in str(b.errors[-3])
    finally:
        b.close()
