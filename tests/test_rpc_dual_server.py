"""One address, two carriers (engine/rpc/dual_server.py): framed-carrier and gRPC clients of the
same servicer on one port, told apart by their first bytes; bad first bytes on that port; a
service served on the framed carrier only; and the meta-service, whose servers are DualServers,
answering both kinds of client on one address."""
from __future__ import annotations

import socket
import threading

import grpc
import pytest

from logtide._ext import wire_codec as wc
from logtide.engine.meta.client import connect_meta
from logtide.engine.meta.server import MetaServer
from logtide.engine.meta.service import MetaService
from logtide.engine.rpc import connect
from logtide.engine.rpc import diagnostics_pb2 as dpb
from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
from logtide.engine.rpc.dual_server import DualServer
from logtide.errors import BadWireMagic, InvalidRequest, MetaInvalidArgument, RpcError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def dual():
    s = DualServer("127.0.0.1:0")
    s.add_service(DIAGNOSTICS, DiagnosticsServicer("dual"))
    s.start()
    yield s
    s.stop(0)


def _ping_both(address: str, n: int = 20) -> None:
    with connect(DIAGNOSTICS, address, carrier="wire", timeout=10) as w, \
            connect(DIAGNOSTICS, address, carrier="grpc", timeout=10) as g:
        for i in range(n):
            p = f"call {i}".encode()
            assert w.Ping(payload=p).payload == p
            assert g.Ping(payload=p).payload == p


def test_both_carriers_on_one_port(dual):
    _ping_both(dual.address)
    # streams too, on each carrier
    with connect(DIAGNOSTICS, dual.address, carrier="wire", timeout=10) as w, \
            connect(DIAGNOSTICS, dual.address, carrier="grpc", timeout=10) as g:
        assert [r.i for r in w.Count(n=100)] == list(range(100))
        assert [r.i for r in g.Count(n=100)] == list(range(100))


def test_many_threads_of_both_carriers_at_once(dual):
    errors: list = []

    def run(carrier: str, k: int) -> None:
        try:
            with connect(DIAGNOSTICS, dual.address, carrier=carrier, timeout=20) as c:
                for i in range(200):
                    p = f"{carrier} {k} {i}".encode() * 20
                    assert c.Ping(payload=p).payload == p
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=run, args=(c, k)) for c in ("wire", "grpc") for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors


def test_a_service_on_the_framed_carrier_only_is_unknown_to_grpc():
    s = DualServer("127.0.0.1:0")
    s.add_service(DIAGNOSTICS, DiagnosticsServicer("wire-only"), grpc=False)
    s.start()
    try:
        with connect(DIAGNOSTICS, s.address, carrier="wire", timeout=10) as w:
            assert w.Ping(payload=b"x").payload == b"x"
        with connect(DIAGNOSTICS, s.address, carrier="grpc", timeout=10) as g:
            with pytest.raises(InvalidRequest, match="unknown method"):
                g.Ping(payload=b"x")
    finally:
        s.stop(0)


@pytest.mark.parametrize("first", [b"GET / HTTP/1.1\r\n\r\n", b"PRI * but not HTTP/2\r\n\r\n", b"\x00" * 64])
def test_bad_first_bytes_close_that_connection_only(dual, first):
    with socket.create_connection((dual.wire.host, dual.port), timeout=5) as so:
        so.sendall(first)
        so.settimeout(5)
        got = b""
        try:
            while True:
                chunk = so.recv(4096)
                if not chunk:
                    break                      # closed by the server (or by gRPC's server behind it)
                got += chunk
        except socket.timeout:
            pytest.fail(f"the connection that sent {first!r} was left open")
    if not first.startswith(b"P"):            # the framed carrier answers with a GOAWAY naming the error
        r = wc.FrameReader(1 << 20, preface=True)
        frames = r.feed(got)
        assert any(f[0] == wc.KINDS["GOAWAY"] and f[2].endswith(BadWireMagic.__name__) for f in frames), frames
    _ping_both(dual.address, 3)               # the server keeps serving


def test_a_grpc_client_that_goes_silent_does_not_hold_the_port(dual):
    socks = []
    for _ in range(20):                        # half an HTTP/2 preface each, then nothing
        so = socket.create_connection((dual.wire.host, dual.port), timeout=5)
        so.sendall(b"PRI * HTTP/2.0\r\n")
        socks.append(so)
    try:
        _ping_both(dual.address, 3)
    finally:
        for so in socks:
            so.close()
    _ping_both(dual.address, 3)


def test_the_meta_server_answers_both_carriers_on_one_address(tmp_path):
    svc = MetaService.open(tmp_path / "meta")
    server = MetaServer(svc).start()
    try:
        with connect_meta(server.address) as w, connect_meta(server.address, carrier="grpc") as g:
            w.upsert("k1", b"v1")
            assert g.get("k1").data == b"v1"
            g.upsert("k2", b"v2")
            assert w.get("k2").data == b"v2"
            assert w.get("k1").seq < g.get("k2").seq
        with grpc.insecure_channel(server.address) as ch:   # a plain gRPC stub, as another language's client
            from logtide.engine.meta import meta_pb2 as pb
            call = ch.unary_unary("/logtide.meta.MetaService/Get", request_serializer=pb.GetRequest.SerializeToString,
                                  response_deserializer=pb.GetReply.FromString)
            assert call(pb.GetRequest(key="k1"), timeout=10).value.data == b"v1"
        with pytest.raises(MetaInvalidArgument):
            connect_meta(server.address, carrier="smoke-signals")
    finally:
        server.stop(0)
        svc.close()


def test_a_grpc_client_whose_backend_is_gone_gets_a_typed_error(dual):
    dual.grpc.stop(0)                         # the gRPC side only: its connections have nowhere to go
    with pytest.raises(RpcError):
        with connect(DIAGNOSTICS, dual.address, carrier="grpc", timeout=3, connect_timeout=3) as g:
            g.Ping(payload=b"x")
    with connect(DIAGNOSTICS, dual.address, carrier="wire", timeout=10) as w:
        assert w.Ping(payload=b"y").payload == b"y"


def test_the_socket_directory_of_a_killed_server_is_removed_by_the_next_one(tmp_path):
    """A DualServer process killed with SIGKILL cannot remove its gRPC socket's directory; the next
    DualServer removes it (and leaves a live process's directory alone)."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    from logtide.engine.rpc.dual_server import sweep_stale_socket_dirs
    code = ("import sys, time\n"
            "from logtide.engine.rpc.dual_server import DualServer\n"
            "s = DualServer('127.0.0.1:0'); s.start()\n"
            "print(s._dir, flush=True)\n"
            "time.sleep(60)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
             for _ in range(2)]
    try:
        dirs = [p.stdout.readline().strip() for p in procs]
        assert all(os.path.isdir(d) and f"-{p.pid}-" in d for d, p in zip(dirs, procs))
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(30)
        assert os.path.isdir(dirs[0])                 # left behind by the kill
        s = DualServer("127.0.0.1:0")                 # the next server sweeps it
        try:
            assert not os.path.exists(dirs[0])
            assert os.path.isdir(dirs[1])             # a live server's stays
            assert os.path.isdir(s._dir) and sweep_stale_socket_dirs(tempfile.gettempdir()) == []
        finally:
            s.stop(0)
        assert not os.path.exists(s._dir)
    finally:
        for p in procs:
            p.kill()
            p.wait(30)
