"""The meta-service over gRPC: watch as a server stream, leader in replies, malformed frames,
wrong types and oversize values answered with typed errors while the server keeps serving."""
import os
import subprocess
import sys
import time

import grpc
import pytest

from logtide import connect_meta
from logtide.engine.meta import DELETE, FLUSH_MARKER, MetaService, cond, op
from logtide.engine.meta import grpc_format as G
from logtide.engine.meta import meta_pb2 as pb
from logtide.engine.meta.server import MetaServer
from logtide.errors import MetaClosedError, MetaInvalidArgument, MetaUnavailableError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def served():
    ms = MetaService.in_memory()
    server = MetaServer(ms, "127.0.0.1:0").start()
    client = connect_meta(server.address)
    yield ms, server, client
    client.close()
    server.stop(0)
    ms.close()


def _collect(w, n, timeout=10.0):
    out, end = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < end:
        ev = w.get(timeout=0.2)
        if ev is not None:
            out.append(ev)
    return out


def test_watch_is_a_server_stream_with_initial_flush(served):
    ms, server, client = served
    client.upsert("a/1", b"x")
    client.upsert("b", b"x")
    w = client.watch("a/", "a/\uffff", initial_flush=True)
    first = _collect(w, 2)
    assert [e.key for e in first] == ["a/1", None] and first[1] == FLUSH_MARKER
    client.upsert("a/2", b"y")
    client.upsert("b", b"y")              # outside the range
    client.upsert("a/1", DELETE)
    client.txn(if_then=[op.put("a/3", b"z")])
    evs = _collect(w, 3)
    assert [(e.key, e.current.data if e.current else None) for e in evs] == [
        ("a/2", b"y"), ("a/1", None), ("a/3", b"z")]
    assert w.get(timeout=0.3) is None     # nothing else arrives
    w.close()
    with pytest.raises(MetaClosedError):
        w.get(timeout=2)


def test_closing_a_watch_releases_the_server_side_watcher(served):
    ms, server, client = served
    ws = [client.watch("k") for _ in range(5)]
    client.upsert("k", b"1")
    for w in ws:
        assert _collect(w, 1)[0].key == "k"
        w.close()
    end = time.monotonic() + 10
    while ms._hub._watchers and time.monotonic() < end:
        client.upsert("k", b"2")          # the server notices a cancelled stream at its next poll
        time.sleep(0.1)
    assert ms._hub._watchers == []


def test_replies_name_the_leader(served):
    ms, server, client = served
    client.get("x")
    assert client.leader == server.address == ms.leader


def _raw(server, method, payload: bytes, stream=False):
    ch = grpc.insecure_channel(server.address)
    try:
        if stream:
            return list(ch.unary_stream(f"/logtide.meta.MetaService/{method}")(payload, timeout=10))
        return ch.unary_unary(f"/logtide.meta.MetaService/{method}")(payload, timeout=10)
    finally:
        ch.close()


def _pb(msg) -> bytes:
    return msg.SerializeToString()


@pytest.mark.parametrize("method, payload", [
    ("Upsert", b"\xff\xfe\x00garbage"),                                       # not a protobuf message
    ("Upsert", b"\x0a\xff\xff\xff\xff\x0f"),                                # a length past the end
    ("Upsert", b"\x0a\x02\xc3\x28"),                                          # key is not UTF-8
    ("Upsert", _pb(pb.UpsertRequest(key="k"))),                                # no value
    ("Upsert", _pb(pb.UpsertRequest(key="k", delete=False))),                  # delete must be true
    ("Upsert", _pb(pb.UpsertRequest(key="k" * 5000, update=b"v"))),            # oversize key
    ("Upsert", _pb(pb.UpsertRequest(key="k", update=b"v" * ((1 << 20) + 1)))), # oversize value
    ("Upsert", _pb(pb.UpsertRequest(key="k", update=b"v", ttl_ms=1, expire_at=2))),
    ("Txn", _pb(pb.TxnRequest(conditions=[pb.Condition(key="k", target="seq", op="===", number=1)]))),
    ("Txn", _pb(pb.TxnRequest(conditions=[pb.Condition(key="k", target="color", op="==", number=1)]))),
    ("Txn", _pb(pb.TxnRequest(conditions=[pb.Condition(key="k", target="value", op="==", number=1)]))),
    ("Txn", _pb(pb.TxnRequest(if_then=[pb.TxnOp()]))),                          # an op with nothing set
    ("Txn", _pb(pb.TxnRequest(branches=[pb.Branch(predicate=pb.Expr())]))),     # an empty expression
    ("Txn", _pb(pb.TxnRequest(if_then=[pb.TxnOp(get=pb.GetOp(key="k"))] * 1100))),
    ("List", b"\x10\x01\x10"),                                                # truncated varint
    ("Status", b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"),            # varint too long
    ("Drop", b""),                                                              # unknown method
])
def test_malformed_requests_get_invalid_argument_and_the_server_keeps_serving(served, method, payload):
    ms, server, client = served
    client.upsert("keep", b"1")
    with pytest.raises(grpc.RpcError) as ei:
        _raw(server, method, payload)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details()
    assert client.get("keep").data == b"1" and client.seq == 1
    assert client.upsert("after", b"ok")[1].seq == 2


def test_typed_errors_cross_the_wire(served):
    ms, server, client = served
    from logtide.engine.meta import Branch, cond
    # built by hand so the client-side checks do not catch it first
    with pytest.raises(MetaInvalidArgument):
        client._invoke("Upsert", pb.UpsertRequest(key="k", update=b"v" * ((1 << 20) + 1)))
    with pytest.raises(MetaInvalidArgument):
        client._invoke("Txn", pb.TxnRequest(conditions=[pb.Condition(key="k", target="seq", op="<>", number=1)]))
    assert client.txn(branches=[Branch(cond.seq("k", "==", 0), [])]).execution_path == "operation:0"


def test_oversize_messages_are_refused_on_both_sides(served):
    ms, server, client = served
    with pytest.raises(MetaInvalidArgument):
        client.upsert("big", b"x" * ((1 << 20) + 1))             # refused before sending
    with pytest.raises(grpc.RpcError) as ei:                     # above the transport's message limit
        _raw(server, "Upsert", _pb(pb.UpsertRequest(key="k", update=b"x" * (G.MAX_MESSAGE_BYTES + 10))))
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert client.upsert("ok", b"x" * (1 << 20))[1].data == b"x" * (1 << 20)   # the limit itself is fine


def test_bad_watch_requests(served):
    ms, server, client = served
    for req in [b"nope\xff", _pb(pb.WatchRequest(key="a", filter="maybe")), _pb(pb.WatchRequest(key="k" * 5000))]:
        with pytest.raises(grpc.RpcError) as ei:
            _raw(server, "Watch", req, stream=True)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert client.upsert("still", b"up")[1].seq == 1


def test_unreachable_server_raises_unavailable():
    with pytest.raises(MetaUnavailableError):
        connect_meta("127.0.0.1:1", timeout=2)
    ms = MetaService.in_memory()
    server = MetaServer(ms, "127.0.0.1:0").start()
    c = connect_meta(server.address, timeout=2)
    c.upsert("a", b"1")
    server.stop(0)
    with pytest.raises(MetaUnavailableError):
        c.get("a")
    c.close()
    ms.close()


@pytest.mark.parametrize("how", ["refused", "frozen"])
def test_a_replica_list_whose_first_replica_is_down_connects_to_the_next(how):
    """Any one replica's address works. A refused one (a replica still starting after a restart)
    is passed over; so is a frozen one, which accepts and never speaks (SIGSTOPped: the kernel
    still accepts): each replica gets a share of the timeout, not all of it. A list of none that
    answers fails typed, naming each."""
    import socket
    import time
    frozen = []
    if how == "refused":
        d1, d2 = "127.0.0.1:1", "127.0.0.1:2"
    else:
        for _ in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(16)
            frozen.append(s)
        d1, d2 = (f"127.0.0.1:{s.getsockname()[1]}" for s in frozen)
    ms = MetaService.in_memory()
    server = MetaServer(ms, "127.0.0.1:0").start()
    try:
        with connect_meta(f"{d1},{server.address}", timeout=8) as c:
            assert c.upsert("a", b"1")[1].seq == 1
            assert c.leader == server.address
        t = time.monotonic()
        with pytest.raises(MetaUnavailableError, match=f"{d1}.*{d2}"):
            connect_meta(f"{d1},{d2}", timeout=2)
        assert time.monotonic() - t < 60      # bounded (the figure is ~2 s; 60 is for a loaded host)
    finally:
        server.stop(0)
        ms.close()
        for s in frozen:
            s.close()


def test_concurrent_clients_get_distinct_seqs(served):
    import threading
    ms, server, client = served
    results, errors = [], []

    def worker(i):
        try:
            with connect_meta(server.address) as c:
                for j in range(25):
                    results.append(c.upsert(f"k{i}/{j}", b"v")[1].seq)
                    c.txn(conditions=[cond.seq(f"k{i}/{j}", ">", 0)], if_then=[op.fetch_add_u64("cnt", 1)])
        except Exception as exc:  # surfaced below
            errors.append(exc)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert len(set(results)) == 200
    assert client.get("cnt").data == b"200" and client.seq == 400


def test_cli_serve_memory_subprocess():
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-m", "logtide", "meta", "serve", "--memory", "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, text=True, env=env, cwd="/")
    try:
        line = p.stdout.readline()
        assert line.startswith("meta-service listening on "), line
        addr = line.split()[-1]
        with connect_meta(addr) as c:
            assert c.upsert("k", b"v")[1].seq == 1
            assert c.get("k").data == b"v"
            assert c.leader == addr
        p.terminate()
        assert p.wait(10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
