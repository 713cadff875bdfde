"""The shared RPC layer: service definitions from .proto, the same calls in-process and over gRPC,
typed errors across the wire, and a server that survives bad requests."""
from __future__ import annotations

import threading
import time

import grpc
import pytest

from logtide.engine.rpc import RpcServer, ServiceDef, connect
from logtide.engine.rpc import diagnostics_pb2 as pb
from logtide.engine.rpc.diagnostics import DIAGNOSTICS, DiagnosticsServicer
from logtide.engine.rpc.dual_server import DualServer
from logtide.errors import (CorruptLogError, InvalidRange, InvalidRequest, LogtideError, MessageTooLarge,
                            RemoteError, RpcError)

pytestmark = pytest.mark.timeout(60)


class ParkedError(LogtideError):
    """An error type defined outside logtide.errors: it crosses the wire by its qualified name."""


class Faulty(DiagnosticsServicer):
    """Ping fails as the payload says; Count fails after some items."""

    def __init__(self):
        super().__init__("faulty")
        self.gate = threading.Event()

    def Ping(self, request, context):
        p = request.payload
        if p == b"range":
            raise InvalidRange("read(9): beyond the end of the log (latest LSN 3)")
        if p == b"corrupt":
            raise CorruptLogError("crc mismatch in segment 1.log at offset 40", segment="1.log", offset=40)
        if p == b"parked":
            raise ParkedError("parked here")
        if p == b"bug":
            raise KeyError("a bug in the servicer")
        if p == b"slow":
            time.sleep(0.5)
        return super().Ping(request, context)

    def Count(self, request, context):
        for i in range(request.n):
            if i == 3 and request.n == 99:
                raise InvalidRange("stream stopped at 3")
            yield pb.CountReply(i=i)


@pytest.fixture(params=["inproc", "grpc", "wire"])
def client(request):
    servicer = Faulty()
    if request.param == "inproc":
        with connect(DIAGNOSTICS, servicer, copy=True) as c:
            yield c
        return
    server = DualServer("127.0.0.1:0", max_message_size=1 << 20)
    server.add_service(DIAGNOSTICS, servicer)
    port = server.start()
    assert port > 0
    with connect(DIAGNOSTICS, f"127.0.0.1:{port}", max_message_size=4 << 20, carrier=request.param) as c:
        yield c
    server.stop()


def test_service_def_from_proto():
    assert DIAGNOSTICS.name == "logtide.rpc.Diagnostics"
    shapes = {n: m.shape for n, m in DIAGNOSTICS.methods.items()}
    assert shapes == {"Ping": "unary", "Count": "server_stream", "Echo": "bidi", "Sum": "client_stream"}
    assert DIAGNOSTICS.methods["Ping"].path == "/logtide.rpc.Diagnostics/Ping"
    assert DIAGNOSTICS.methods["Ping"].request_type is pb.PingRequest
    with pytest.raises(InvalidRequest):
        DIAGNOSTICS.method("Nope")


def test_every_call_shape(client):
    r = client.Ping(payload=b"hi")
    assert (r.payload, r.server) == (b"hi", "faulty")
    assert client.Ping(pb.PingRequest(payload=b"x")).payload == b"x"
    assert [m.i for m in client.Count(n=5)] == [0, 1, 2, 3, 4]
    assert [m.payload for m in client.Echo(iter([pb.PingRequest(payload=b"%d" % i) for i in range(4)]))] == \
        [b"0", b"1", b"2", b"3"]
    assert client.Sum(iter([pb.CountReply(i=i) for i in range(10)])).i == 45


def test_typed_errors_cross_the_wire(client):
    with pytest.raises(InvalidRange, match="beyond the end of the log"):
        client.Ping(payload=b"range")
    with pytest.raises(CorruptLogError, match="offset 40"):
        client.Ping(payload=b"corrupt")
    with pytest.raises(ParkedError, match="parked here"):
        client.Ping(payload=b"parked")
    with pytest.raises(RemoteError, match="KeyError"):
        client.Ping(payload=b"bug")
    assert client.Ping(payload=b"still up").payload == b"still up"


def test_typed_error_in_a_stream(client):
    it = client.Count(n=99)
    got = []
    with pytest.raises(InvalidRange, match="stopped at 3"):
        for m in it:
            got.append(m.i)
    assert got == [0, 1, 2]


def test_bad_request_types_and_fields(client):
    with pytest.raises(InvalidRequest):
        client.Ping(pb.CountRequest(n=1))
    with pytest.raises(InvalidRequest):
        client.Ping(payload="not bytes")
    with pytest.raises(InvalidRequest):
        client.Ping(no_such_field=1)
    assert client.Ping(payload=b"ok").payload == b"ok"


@pytest.fixture
def server():
    s = RpcServer("127.0.0.1:0", max_message_size=1 << 20)
    s.add_service(DIAGNOSTICS, Faulty())
    s.start()
    yield s
    s.stop()


def raw_call(port, path, payload: bytes):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return ch.unary_unary(path)(payload, timeout=10)


def test_malformed_and_unknown_requests_get_invalid_argument(server):
    with pytest.raises(grpc.RpcError) as e:
        raw_call(server.port, "/logtide.rpc.Diagnostics/Ping", b"\x0a\xff\xff\xff\xff\x0f")  # a bad varint length
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        raw_call(server.port, "/logtide.rpc.Diagnostics/NoSuchMethod", b"")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unknown method" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        raw_call(server.port, "/nobody.Nothing/X", b"garbage")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with connect(DIAGNOSTICS, server.address) as c:  # and the server keeps serving
        assert c.Ping(payload=b"alive").payload == b"alive"


def test_oversize_message_is_a_clear_error_and_server_survives(server):
    with connect(DIAGNOSTICS, server.address, max_message_size=8 << 20) as c:
        with pytest.raises(MessageTooLarge):
            c.Ping(payload=b"x" * (2 << 20))
        assert c.Ping(payload=b"y" * 1000).payload == b"y" * 1000


def test_graceful_stop_finishes_running_calls():
    s = RpcServer("127.0.0.1:0")
    s.add_service(DIAGNOSTICS, Faulty())
    s.start()
    c = connect(DIAGNOSTICS, s.address)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", c.Ping(payload=b"slow")))
    t.start()
    time.sleep(0.1)
    s.stop(grace=3)
    t.join()
    assert out["r"].payload == b"slow"
    with pytest.raises(RpcError):
        c.Ping(payload=b"after stop")
    c.close()
    with pytest.raises(RpcError, match="could not connect"):
        connect(DIAGNOSTICS, s.address, connect_timeout=0.5)


def test_servicer_missing_a_method_is_refused():
    class Half:
        def Ping(self, request, context):
            return pb.PingReply()
    with pytest.raises(TypeError, match="Count"):
        RpcServer().add_service(DIAGNOSTICS, Half())


def test_service_def_of_the_log_service():
    from logtide.engine.logservice import logservice_pb2
    svc = ServiceDef.from_proto(logservice_pb2, "LogService")
    assert svc.methods["Read"].shape == "server_stream" and svc.methods["Append"].shape == "unary"


def test_unbindable_address_is_an_rpc_error():
    with pytest.raises(RpcError, match="could not listen"):
        RpcServer("256.0.0.1:1").start()


class Ticker(DiagnosticsServicer):
    """Count that runs until the caller goes away, and notes that it noticed."""

    def __init__(self):
        super().__init__("ticker")
        self.stopped = threading.Event()

    def Count(self, request, context):
        try:
            i = 0
            while context.is_active():
                yield pb.CountReply(i=i)
                i += 1
                time.sleep(0.001)
        finally:
            self.stopped.set()

    def Echo(self, requests, context):
        yield pb.PingReply(payload=b"hello", server=self.server_name)  # speaks first
        for r in requests:
            yield pb.PingReply(payload=r.payload.upper(), server=self.server_name)


@pytest.mark.parametrize("transport", ["inproc", "grpc"])
def test_cancel_reaches_the_servicer_and_bidi_interleaves(transport):
    import queue
    servicer = Ticker()
    server = None
    if transport == "grpc":
        server = RpcServer()
        server.add_service(DIAGNOSTICS, servicer)
        server.start()
        c = connect(DIAGNOSTICS, server.address)
    else:
        c = connect(DIAGNOSTICS, servicer)
    try:
        it = c.Count(n=0)
        assert [next(it).i for _ in range(3)] == [0, 1, 2]
        it.cancel()
        assert servicer.stopped.wait(10)
        # bidi: the servicer answers before any request, then one reply per request, in lockstep
        q: queue.Queue = queue.Queue()
        replies = c.Echo(iter(q.get, None))
        assert next(replies).payload == b"hello"
        for word in (b"a", b"bc", b"def"):
            q.put(pb.PingRequest(payload=word))
            assert next(replies).payload == word.upper()
        q.put(None)
        assert list(replies) == []
    finally:
        c.close()
        if server:
            server.stop()
