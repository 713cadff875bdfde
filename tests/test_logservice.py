"""The log service client API, with the seed's semantics. The same suite runs on every transport."""
from __future__ import annotations

import threading

import pytest
from hypothesis import given, strategies as st
from hypothesis_profiles import scaled

from logtide import InvalidRange, InvalidTruncateLsn, LogRecord, LogService
from logtide.engine.logservice import USER_ENTRY_UPDATE, USER_RECORD
from logtide.errors import InvalidArgument, LogServiceClosed, LogtideError, RecordTooLarge

pytestmark = pytest.mark.timeout(120)

TRANSPORTS = ["inproc", "wire", "grpc", "rpc-inproc"]


@pytest.fixture(params=TRANSPORTS)
def client(request, tmp_path):
    """The embedded service; a client of it through a real server on 127.0.0.1:0, over the framed
    carrier or gRPC; or that client over the RPC layer's in-process transport."""
    svc = LogService.open(tmp_path / "log", max_record_size=1 << 20)
    if request.param == "inproc":
        try:
            yield svc
        finally:
            svc.close()
        return
    from logtide import connect_logservice
    from logtide.engine.logservice.rpc_service import LogServiceServer
    if request.param == "rpc-inproc":
        # the remote client over the RPC layer's in-process transport: every message is serialized
        from logtide.engine.logservice.remote_client import RemoteLogServiceClient
        from logtide.engine.logservice.rpc_service import LogServiceServicer
        from logtide.engine.rpc import InProcessTransport
        c = RemoteLogServiceClient(transport=InProcessTransport(LogServiceServicer(svc, 64 << 20), copy=True))
        try:
            yield c
        finally:
            c.close()
            svc.close()
        return
    if request.param == "grpc":
        server = LogServiceServer(svc, "127.0.0.1:0", own_service=True, grpc_listen="127.0.0.1:0")
        c = connect_logservice(server.grpc_address, carrier="grpc")
    else:
        server = LogServiceServer(svc, "127.0.0.1:0", own_service=True)
        c = connect_logservice(f"127.0.0.1:{server.port}")
    try:
        yield c
    finally:
        c.close()
        server.stop()


def test_append_assigns_dense_lsns_from_one(client):
    assert client.get_latest_lsn() == 0
    assert [client.append(b"r%d" % i) for i in range(5)] == [1, 2, 3, 4, 5]
    assert client.get_latest_lsn() == 5


def test_record_data_layout_is_the_seeds(client):
    lsn = client.append(b"hello", replica_id=0x0102030405060708)
    (rec,), nxt = client.read(lsn, 1 << 20)
    assert nxt == lsn + 1
    assert isinstance(rec, LogRecord)
    assert (rec.lsn, rec.type) == (lsn, USER_RECORD)
    assert rec.data == (USER_ENTRY_UPDATE).to_bytes(4, "big") + bytes.fromhex("0102030405060708") + b"hello"
    assert rec.payload == b"hello" and rec.replica_id == 0x0102030405060708 and rec.update_type == 2


def test_append_with_type_and_a_logrecord(client):
    a = client.append(b"x", replica_id=3, type=1)
    rec = LogRecord.user(b"y", replica_id=9, type=2)
    b = client.append(rec)
    recs, _ = client.read(a, 1 << 20)
    assert [(r.type, r.replica_id, r.payload) for r in recs] == [(1, 3, b"x"), (2, 9, b"y")]
    assert recs[1].lsn == b


def test_append_many_returns_first_lsn(client):
    client.append(b"first")
    first = client.append_many([b"a", b"bb", bytearray(b"ccc"), memoryview(b"dddd")], replica_id=7)
    assert first == 2 and client.get_latest_lsn() == 5
    recs, nxt = client.read(2, 1 << 20)
    assert [r.payload for r in recs] == [b"a", b"bb", b"ccc", b"dddd"] and nxt == 6
    assert {r.replica_id for r in recs} == {7}


def test_read_respects_max_size_but_returns_at_least_one(client):
    client.append_many([bytes([i]) * 100 for i in range(10)])  # data = 112 bytes each
    recs, nxt = client.read(1, 10)
    assert len(recs) == 1 and recs[0].lsn == 1 and nxt == 2
    recs, nxt = client.read(1, 0)
    assert len(recs) == 1 and nxt == 2
    recs, nxt = client.read(2, 3 * 112)
    assert [r.lsn for r in recs] == [2, 3, 4] and nxt == 5
    recs, nxt = client.read(2, 3 * 112 - 1)
    assert [r.lsn for r in recs] == [2, 3] and nxt == 4
    # following next_lsn walks the whole log exactly once
    got, lsn = [], 1
    while lsn <= client.get_latest_lsn():
        recs, lsn = client.read(lsn, 250)
        got += recs
    assert [r.payload for r in got] == [bytes([i]) * 100 for i in range(10)]


def test_read_range_errors(client):
    client.append_many([b"a", b"b", b"c"])
    assert client.read(4, 100) == ([], 4)  # the end of the log: nothing yet, not an error
    with pytest.raises(InvalidRange):
        client.read(5, 100)
    with pytest.raises(InvalidRange):
        client.read(0, 100)
    client.truncate(2)
    with pytest.raises(InvalidRange):
        client.read(1, 100)
    with pytest.raises(InvalidRange):
        client.read(2, 100)
    recs, _ = client.read(3, 100)
    assert [r.payload for r in recs] == [b"c"]


def test_truncate_only_moves_up(client):
    client.append_many([b"x"] * 10)
    assert client.get_truncated_lsn() == 0
    client.truncate(4)
    assert client.get_truncated_lsn() == 4
    for bad in (4, 3, 1):
        with pytest.raises(InvalidTruncateLsn):
            client.truncate(bad)
    with pytest.raises(InvalidTruncateLsn):
        client.truncate(11)  # beyond the end of the log
    assert client.get_truncated_lsn() == 4
    client.truncate(10)
    assert client.get_truncated_lsn() == 10


def test_tso_ranges_are_disjoint_and_increasing(client):
    seen = []
    for count in (1, 5, 100, 1, 70000, 3):
        first = client.get_tso_timestamp(count)
        seen.append((first, first + count))
    for (a0, a1), (b0, b1) in zip(seen, seen[1:]):
        assert a1 <= b0
    for bad in (0, -1, "3", 1.5):
        with pytest.raises(InvalidArgument):
            client.get_tso_timestamp(bad)


def test_bad_arguments_are_typed_errors(client):
    with pytest.raises(InvalidArgument):
        client.append("text is not bytes")
    with pytest.raises(InvalidArgument):
        client.append(b"x", replica_id=-1)
    with pytest.raises(InvalidArgument):
        client.append(b"x", replica_id=True)
    with pytest.raises(InvalidArgument):
        client.append(b"x", replica_id=1.0)
    with pytest.raises(InvalidArgument):
        client.append(b"x", type=-5)
    with pytest.raises(InvalidArgument):
        client.append_many([])
    with pytest.raises(InvalidArgument):
        client.append_many([b"ok", 17])
    with pytest.raises(InvalidArgument):
        client.read("1", 10)
    with pytest.raises(InvalidArgument):
        client.read(1, -1)
    with pytest.raises(InvalidArgument):
        client.truncate(-3)
    assert client.get_latest_lsn() == 0  # nothing half-appended
    assert client.append(b"still fine") == 1


def test_oversize_payload_is_refused_clearly(client):
    with pytest.raises(RecordTooLarge, match="max_record_size"):
        client.append(b"x" * (1 << 20))
    with pytest.raises(RecordTooLarge):
        client.append_many([b"small", b"y" * (1 << 20)])
    assert client.get_latest_lsn() == 0
    assert client.append(b"x" * ((1 << 20) - 12)) == 1


def test_config(client):
    cfg = client.config()
    assert cfg.fsync == "always" and cfg.segment_size == 64 << 20 and cfg.max_record_size == 1 << 20


def test_concurrent_appenders_get_unique_dense_lsns(client):
    got: dict[int, bytes] = {}
    lock = threading.Lock()

    def work(t):
        for i in range(40):
            p = b"t%02d-%03d" % (t, i)
            lsn = client.append(p, replica_id=t)
            with lock:
                got[lsn] = p

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(got) == list(range(1, 321))
    recs, lsn = [], 1
    while lsn <= 320:
        batch, lsn = client.read(lsn, 4096)
        recs += batch
    assert {r.lsn: r.payload for r in recs} == got


def test_reader_registration(client):
    client.append_many([b"z"] * 5)
    client.register_reader("ro-1")
    client.report_replayed("ro-1", 3)
    client.report_replayed("ro-1", 2)  # replayed LSNs never go back
    assert client.readers() == {"ro-1": 3}
    with pytest.raises(LogtideError):
        client.report_replayed("nobody", 1)
    client.unregister_reader("ro-1")
    assert client.readers() == {}


def test_reader_arguments_are_checked_before_anything_changes(tmp_path):
    """A reader name is a str (123 once unregistered reader "123"), a registered LSN is no later
    than the log's end (as report_replayed requires), and truncation_interval is a finite number."""
    with LogService.open(tmp_path / "log") as svc:
        svc.append_many([b"z"] * 5)
        svc.register_reader("123", 2)
        for call in (lambda: svc.unregister_reader(123), lambda: svc.report_replayed(123, 3),
                     lambda: svc.register_reader(123, 1), lambda: svc.register_reader("", 1),
                     lambda: svc.register_reader("ro-2", 10**18), lambda: svc.register_reader("ro-2", 6)):
            with pytest.raises(InvalidArgument):
                call()
        assert svc.readers() == {"123": 2}
        svc.register_reader("ro-2", 5)
        svc.report_replayed("123", 4)
        assert svc.readers() == {"123": 4, "ro-2": 5}
    for bad in (float("nan"), float("inf"), -1, "1", True, None):
        with pytest.raises(InvalidArgument, match="truncation_interval"):
            LogService.open(tmp_path / "log", truncation_interval=bad)
    with LogService.open(tmp_path / "log", truncation_interval=0) as svc:
        assert svc.readers() == {"123": 4, "ro-2": 5} and svc.get_latest_lsn() == 5


def test_read_batch_matches_read(client):
    client.append_many([bytes([i % 251]) * (i * 7) for i in range(50)], replica_id=5)
    batch = client.read_batch(1, 2000)
    recs, nxt = client.read(1, 2000)
    assert batch.next_lsn == nxt and len(batch) == len(recs)
    assert batch.records() == recs
    assert batch.lsns.tolist() == [r.lsn for r in recs]


def test_closed_client_refuses_calls(tmp_path):
    svc = LogService.open(tmp_path / "log")
    svc.append(b"x")
    svc.close()
    svc.close()  # idempotent
    with pytest.raises(LogServiceClosed):
        svc.append(b"y")
    with pytest.raises(LogServiceClosed):
        svc.read(1, 10)


def test_append_many_of_numpy_rows(client):
    import numpy as np
    rows = np.arange(40 * 24, dtype=np.uint8).reshape(40, 24)
    first = client.append_many(rows, replica_id=11)
    recs, nxt = client.read(first, 1 << 20)
    assert nxt == first + 40 and [r.payload for r in recs] == [r.tobytes() for r in rows]
    assert {r.replica_id for r in recs} == {11}
    with pytest.raises(InvalidArgument):
        client.append_many(np.zeros((3, 4), dtype=np.int32))
    with pytest.raises(InvalidArgument):
        client.append_many(np.zeros(5, dtype=np.uint8))
    with pytest.raises(InvalidArgument):
        client.append_many(np.zeros((0, 5), dtype=np.uint8))
    with pytest.raises(RecordTooLarge):
        client.append_many(np.zeros((2, 1 << 20), dtype=np.uint8))
    assert client.get_latest_lsn() == first + 39


@scaled(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=60), first=st.integers(1, 60),
       max_size=st.integers(0, 20000), segment_size=st.sampled_from([1024, 8192, 1 << 20]))
def test_read_batch_mapped_matches_read_batch(tmp_path_factory, sizes, first, max_size, segment_size):
    """The mapped read gives the same records as the copying one, across segment ends, and
    stays readable after the service moves on (its mapping is its own)."""
    svc = LogService.open(tmp_path_factory.mktemp("mapped") / "log", segment_size=segment_size,
                          truncation_interval=0)
    try:
        svc.append_many([bytes([i % 251]) * n for i, n in enumerate(sizes)], replica_id=3)
        first = min(first, len(sizes) + 1)
        lsn, held = first, []
        while True:
            want, got = svc.read_batch(lsn, max_size), svc.read_batch_mapped(lsn, max_size)
            assert (got.first_lsn, got.next_lsn) == (want.first_lsn, want.next_lsn)
            assert got.types.tolist() == want.types.tolist() and got.lengths.tolist() == want.lengths.tolist()
            assert [bytes(got.buf[o:o + n]) for o, n in zip(got.offsets.tolist(), got.lengths.tolist())] == \
                [want.buf[o:o + n] for o, n in zip(want.offsets.tolist(), want.lengths.tolist())]
            held.append((got, want))
            if not len(got):
                break
            lsn = got.next_lsn
        svc.append(b"more")
        for got, want in held:
            assert bytes(got.buf) == bytes(want.buf)
    finally:
        svc.close()
