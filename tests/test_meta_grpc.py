"""The meta-service over gRPC: watch as a server stream, leader in replies, malformed frames,
wrong types and oversize values answered with typed errors while the server keeps serving."""
import json
import os
import subprocess
import sys
import time

import grpc
import pytest

from logtide import connect_meta
from logtide.engine.meta import DELETE, FLUSH_MARKER, MetaService, cond, op
from logtide.engine.meta import grpc_format as G
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


def _raw(server, method, payload: bytes):
    ch = grpc.insecure_channel(server.address)
    try:
        fn = ch.unary_unary(G.path(method))
        return fn(payload, timeout=10)
    finally:
        ch.close()


@pytest.mark.parametrize("method, payload", [
    (G.METHOD_WRITE, b"\xff\xfe\x00garbage"),
    (G.METHOD_WRITE, b"[1,2,3]"),
    (G.METHOD_WRITE, b"{}"),
    (G.METHOD_WRITE, b'{"cmd": {"upsert": {"key": 5, "value": "delete"}}}'),
    (G.METHOD_WRITE, b'{"cmd": {"upsert": {"key": "k", "value": {"update": "not base64!"}}}}'),
    (G.METHOD_WRITE, b'{"cmd": {"upsert": {"key": "k", "value": {"update": "AA=="}, "match_seq": ["exact", -1]}}}'),
    (G.METHOD_WRITE, b'{"cmd": {"upsert": {"key": "k", "value": {"update": "AA=="}, "spec": {"ttl_ms": "soon"}}}}'),
    (G.METHOD_WRITE, b'{"cmd": {"txn": {"conditions": [{"key": "k", "target": "seq", "op": "===", "arg": 1}]}}}'),
    (G.METHOD_WRITE, b'{"cmd": {"txn": {"if_then": [{"explode": {}}]}}}'),
    (G.METHOD_WRITE, b'{"cmd": {"txn": {"if_then": "get"}}}'),
    (G.METHOD_WRITE, b'{"cmd": {"drop_table": {}}}'),
    (G.METHOD_WRITE, b"[" * 50000),
    (G.METHOD_READ, b'{"get": 7}'),
    (G.METHOD_READ, b'{"mget": "abc"}'),
    (G.METHOD_READ, b'{"list": {"prefix": "a", "limit": -3}}'),
    (G.METHOD_READ, b'{"list": "a"}'),
    (G.METHOD_READ, b'{"scan": "a"}'),
    (G.METHOD_READ, b'{"get": "a", "mget": ["b"]}'),
    (G.METHOD_WRITE, json.dumps({"cmd": {"upsert": {"key": "k", "value": {"update": "A" * (1400 * 1024)}}}}).encode()),
    (G.METHOD_WRITE, json.dumps({"cmd": {"upsert": {"key": "k" * 5000, "value": "delete"}}}).encode()),
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


def test_oversize_values_are_refused_on_both_sides(served):
    ms, server, client = served
    with pytest.raises(MetaInvalidArgument):
        client.upsert("big", b"x" * ((1 << 20) + 1))             # refused before sending
    with pytest.raises(grpc.RpcError) as ei:                     # above gRPC's message limit
        _raw(server, G.METHOD_WRITE, b'{"cmd":' + b" " * (G.MAX_MESSAGE_BYTES + 10) + b"}")
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert client.upsert("ok", b"x" * (1 << 20))[1].data == b"x" * (1 << 20)   # the limit itself is fine


def test_bad_watch_requests(served):
    ms, server, client = served
    ch = grpc.insecure_channel(server.address)
    try:
        fn = ch.unary_stream(G.path(G.METHOD_WATCH))
        for payload in [b"nope", b'{"key": 3}', b'{"key": "a", "filter": "maybe"}', b'{"key": "a", "key_end": 9}']:
            with pytest.raises(grpc.RpcError) as ei:
                list(fn(payload, timeout=10))
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        ch.close()
    assert client.upsert("still", b"up")[1].seq == 1


def test_unreachable_server_raises_unavailable():
    with connect_meta("127.0.0.1:1", timeout=2) as c:
        with pytest.raises(MetaUnavailableError):
            c.get("x")


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
