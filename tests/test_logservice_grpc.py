"""The log service's server under bad requests: malformed frames, oversize messages and payloads,
unknown LSNs, abrupt clients, on both carriers (the framed one and gRPC; the raw-bytes cases are
gRPC's, tests/test_rpc_wire.py has the framed carrier's). It answers each with a clear status and
keeps serving."""
from __future__ import annotations

import threading

import grpc
import pytest

from logtide import InvalidRange, LogService, connect_logservice
from logtide.engine.logservice import logservice_pb2 as pb
from logtide.engine.logservice.rpc_service import LogServiceServer
from logtide.errors import InvalidArgument, MessageTooLarge, RecordTooLarge, RpcError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path):
    s = LogServiceServer.open(tmp_path / "log", max_record_size=64 << 10, max_message_size=1 << 20,
                              grpc_listen="127.0.0.1:0")
    yield s
    s.stop()


@pytest.fixture(params=["wire", "grpc"])
def carrier(request):
    return request.param


def connect(server, carrier, **options):
    """A client of the server over `carrier`."""
    if carrier == "grpc":
        return connect_logservice(server.grpc_address, carrier="grpc", **options)
    return connect_logservice(server.address, **options)


def raw(server, method, payload: bytes, stream=False):
    with grpc.insecure_channel(server.grpc_address) as ch:
        path = f"/logtide.logservice.LogService/{method}"
        if stream:
            return list(ch.unary_stream(path)(payload, timeout=10))
        return ch.unary_unary(path)(payload, timeout=10)


def test_malformed_requests(server):
    for method, stream in (("Append", False), ("Read", True), ("Truncate", False), ("GetTsoTimestamp", False)):
        with pytest.raises(grpc.RpcError) as e:
            raw(server, method, b"\x0a\xff\xff\xff\xff\x0f\x01", stream)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
    with pytest.raises(grpc.RpcError) as e:
        raw(server, "DropEverything", b"")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with connect(server, "wire") as c, connect(server, "grpc") as g:
        assert c.append(b"still serving") == 1 and g.append(b"on both carriers") == 2


def test_wire_level_bad_values_are_typed(server):
    # a raw append must carry exactly one payload; a zero TSO count is refused
    with pytest.raises(grpc.RpcError) as e:
        raw(server, "Append", pb.AppendRequest(raw=True).SerializeToString())
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        raw(server, "GetTsoTimestamp", pb.TsoRequest(count=0).SerializeToString())
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(e.value.trailing_metadata())["logtide-error-type"] == "logtide.errors.InvalidArgument"


def test_oversize_payload_and_message(server, carrier):
    with connect(server, carrier, max_message_size=8 << 20) as c:
        with pytest.raises(RecordTooLarge, match="max_record_size"):
            c.append(b"x" * (64 << 10))  # over the log's record limit: refused by the service
        with pytest.raises(MessageTooLarge):
            c.append_many([b"y" * (60 << 10)] * 20)  # 1.2 MB: over the server's message limit
        assert c.get_latest_lsn() == 0
        assert c.append(b"fine") == 1


def test_unknown_lsns(server, carrier):
    with connect(server, carrier) as c:
        c.append_many([b"a", b"b"])
        for lsn in (0, 4, 1 << 40, (1 << 64) - 1):
            with pytest.raises(InvalidRange):
                c.read(lsn, 100)
        assert c.read(3, 100) == ([], 3)
        assert [r.payload for r in c.read(1, 100)[0]] == [b"a", b"b"]


def test_reads_stream_in_chunks(tmp_path, carrier):
    svc = LogService.open(tmp_path / "log")
    svc.append_many([bytes([i]) * 1000 for i in range(100)])
    with LogServiceServer(svc, own_service=True, grpc_listen="127.0.0.1:0") as s, \
            connect(s, carrier, chunk_size=4096) as c:
        chunks = c._chunks(1, 1 << 20)
        assert len(chunks) > 20 and all(len(ch.frames) <= 4096 for ch in chunks)
        assert sum(ch.count for ch in chunks) == 100 and chunks[-1].last and chunks[-1].next_lsn == 101
        recs, nxt = c.read(1, 1 << 20)
        assert nxt == 101 and [r.payload for r in recs] == [bytes([i]) * 1000 for i in range(100)]
        assert recs == svc.read(1, 1 << 20)[0]


def test_abandoned_stream_and_many_clients(server, carrier):
    with connect(server, carrier) as c:
        c.append_many([b"z" * 1000] * 500)
        it = c._rpc.invoke("Read", pb.ReadRequest(first_lsn=1, max_size=1 << 20, chunk_size=2000))
        next(it)
        it.cancel()  # the client walks away mid-stream
    errors = []

    def client(t):
        try:
            with connect(server, carrier) as c:
                for i in range(20):
                    c.append(b"%d-%d" % (t, i), replica_id=t)
                    c.read(1, 5000)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    ths = [threading.Thread(target=client, args=(t,)) for t in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errors
    with connect(server, carrier) as c:
        assert c.get_latest_lsn() == 500 + 160


def test_connect_errors(tmp_path, carrier):
    with pytest.raises(RpcError, match="could not connect"):
        connect_logservice("127.0.0.1:1", connect_timeout=0.5, carrier=carrier)
    with pytest.raises(InvalidArgument, match="host:port"):
        connect_logservice("no-port-here")


def test_bit_rot_reaches_the_client_as_corrupt_log_error(tmp_path, carrier):
    import os
    from logtide import CorruptLogError
    svc = LogService.open(tmp_path / "log")
    svc.append_many([b"q" * 100] * 20)
    seg = sorted(p for p in os.listdir(tmp_path / "log") if p.endswith(".log"))[0]
    with open(tmp_path / "log" / seg, "r+b") as f:
        f.seek(5 * 132 + 60)
        f.write(b"!")
    with LogServiceServer(svc, own_service=True, grpc_listen="127.0.0.1:0") as s, connect(s, carrier) as c:
        with pytest.raises(CorruptLogError, match=seg):
            c.read(1, 1 << 20)
        assert [r.lsn for r in c.read(7, 1 << 20)[0]][:1] == [7]  # the server keeps serving


def test_append_fast_path_matches_the_protobuf_path(server, carrier):
    """The client's C-encoded append (plain bytes payloads) and its protobuf path give the same
    LSNs, records and typed errors."""
    from logtide.errors import LogServiceClosed
    with connect(server, carrier) as c:
        assert (c._pipe is not None) == (carrier == "wire")   # the C fast path rides the framed carrier
        lsns = [c.append(b"fast", 5, 7), c.append(bytearray(b"slow"), 5, 7), c.append(b"", 0, 0),
                c.append(b"big" * 100, (1 << 64) - 1, (1 << 32) - 1)]
        assert lsns == [1, 2, 3, 4]
        recs, _ = c.read(1, 1 << 20)
        assert [(r.type, bytes(r.data)[-4:]) for r in recs[:2]] == [(7, b"fast"), (7, b"slow")]
        for bad in ((b"x", -1, 0), (b"x", 1 << 64, 0), (b"x", True, 0), (b"x", 0, 1 << 32), (b"x", 0, -1),
                    (b"x", 0, True), (b"x", 0, "7")):
            with pytest.raises(InvalidArgument):
                c.append(*bad)
        with pytest.raises(RecordTooLarge):        # over the log's record limit: the server's error
            c.append(b"x" * (64 << 10))
        assert c.get_latest_lsn() == 4
    with pytest.raises(LogServiceClosed):
        c.append(b"after close")
