"""Clients' and nodes' options and reader arguments: a bad one is an InvalidArgument at the call,
before anything changes (an audit found each accepted as something else)."""
from __future__ import annotations

import pytest

from logtide import LogService, connect_logservice
from logtide.errors import InvalidArgument
from ports import free_ports

pytestmark = pytest.mark.timeout(120)

BAD_SECONDS = [float("nan"), float("inf"), -1, "5", True]


@pytest.mark.parametrize("bad", BAD_SECONDS)
def test_client_timeouts_are_finite_positive_seconds(bad):
    """NaN or a negative timeout gave unary calls no deadline; inf and "5" failed at every call."""
    with pytest.raises(InvalidArgument, match="timeout"):
        connect_logservice("127.0.0.1:1", timeout=bad, connect_timeout=0)
    with pytest.raises(InvalidArgument, match="deadline"):
        connect_logservice("127.0.0.1:1", replicated=True, deadline=bad)   # NaN retried forever
    with pytest.raises(InvalidArgument, match="call_timeout"):
        connect_logservice("127.0.0.1:1", replicated=True, call_timeout=bad)


@pytest.mark.parametrize("kw", [{"max_message_size": 0}, {"max_message_size": -5}, {"max_message_size": 10},
                                {"chunk_size": -1}, {"chunk_size": 0}, {"chunk_size": 1.5}])
def test_client_sizes_are_checked_at_construction(kw):
    with pytest.raises(InvalidArgument):
        connect_logservice("127.0.0.1:1", connect_timeout=0, **kw)


@pytest.fixture(params=["single", "replicated"])
def log_client(request, tmp_path):
    from logtide.engine.logservice.rpc_service import LogServiceServer
    from logtide.engine.logservice.replicated import ReplicatedLogService
    if request.param == "single":
        server = LogServiceServer.open(tmp_path / "log")
        client = connect_logservice(server.address)
        yield client
        client.close()
        server.stop()
    else:
        port = free_ports(1)[0]
        addr = f"127.0.0.1:{port}"
        svc = ReplicatedLogService.open(tmp_path / "r1", 1, {1: addr}, addr)
        client = connect_logservice(addr, replicated=True, deadline=20)
        yield client
        client.close()
        svc.close()


def test_reader_names_and_lsns_are_checked_on_every_client(log_client):
    """The single-node client turned any name into a str (unregister_reader(5) removed reader "5");
    the replicated one passed b"rb" as "rb", None as "", and an LSN past the log's end, which then
    held nothing back from truncation."""
    c = log_client
    last = c.append_many([b"a", b"b", b"c"]) + 2
    c.register_reader("5", 1)
    for call in (lambda: c.unregister_reader(5), lambda: c.register_reader(b"rb"), lambda: c.register_reader(None),
                 lambda: c.register_reader(""), lambda: c.report_replayed(5, 1),
                 lambda: c.register_reader("r", last + 10**6), lambda: c.report_replayed("5", last + 10**6),
                 lambda: c.register_reader("r", -1), lambda: c.register_reader("r", 1.5)):
        with pytest.raises(InvalidArgument):
            call()
    assert c.readers() == {"5": 1}
    c.report_replayed("5", last)
    c.register_reader("r", last)
    assert c.readers() == {"5": last, "r": last}


def test_a_read_of_max_size_0_is_one_record_on_every_client(log_client):
    """The replicated server read max_size 0 as 1 MiB, where the single-node service and every
    embedded read give one record: a reader that pages one record at a time got them all."""
    c = log_client
    first = c.append_many([b"x" * 100, b"y" * 100, b"z" * 100])
    recs, nxt = c.read(first, 0)
    assert [r.payload for r in recs] == [b"x" * 100] and nxt == first + 1
    recs, nxt = c.read(first, 150)          # a size bound still counts bytes, one record at least
    assert [r.payload for r in recs] in ([b"x" * 100], [b"x" * 100, b"y" * 100])
    recs, _ = c.read(first, 1 << 20)
    assert [r.payload for r in recs] == [b"x" * 100, b"y" * 100, b"z" * 100]


@pytest.mark.parametrize("kw", [{"checkpoint_interval": float("nan")}, {"checkpoint_interval": float("inf")},
                                {"checkpoint_interval": -1}, {"replica_timeout": float("nan")},
                                {"replica_timeout": "10"}, {"replica_timeout": True}, {"replica_timeout": 0},
                                {"logindex_segments": 1.5}])
def test_primary_options_are_checked_before_the_directory_is_touched(tmp_path, kw):
    from logtide.replay import Primary
    with LogService.open(tmp_path / "log") as log:
        with pytest.raises(InvalidArgument):
            Primary(tmp_path / "p", log=log, **kw)
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("kw", [{"node_id": 1.5}, {"node_id": -1}, {"node_id": "1"}, {"node_id": True},
                                {"bg_batch": 1.5}, {"bg_batch": 0}, {"bg_batch": -5}, {"xlog_buffer_bytes": -1},
                                {"feedback_interval": float("nan")}, {"feedback_interval": -1}])
def test_ro_node_options_are_checked_at_construction(tmp_path, kw):
    """A bad node id made every feedback fail (the primary then dropped the node); bg_batch 1.5
    flooded the log with tracebacks, and 0 never advanced the background replay."""
    from logtide.replay import Primary, ReadOnlyNode
    with LogService.open(tmp_path / "log") as log:
        p = Primary(tmp_path / "p", log=log, checkpoint_interval=0)
        try:
            with pytest.raises(InvalidArgument):
                ReadOnlyNode(tmp_path / "p", log, **kw)
        finally:
            p.close()


def test_the_replicated_clients_other_arguments_are_checked(tmp_path):
    """type=None was stored as type 0, truncate(None) was truncate(0), and negative or float sizes
    and LSNs gave protobuf's bare errors, naming no argument."""
    from logtide.engine.logservice.replicated import ReplicatedLogService
    port = free_ports(1)[0]
    addr = f"127.0.0.1:{port}"
    svc = ReplicatedLogService.open(tmp_path / "r1", 1, {1: addr}, addr)
    c = connect_logservice(addr, replicated=True, deadline=20)
    try:
        first = c.append(b"a")
        for call in (lambda: c.append(b"x", type=None), lambda: c.append(b"x", type=-1),
                     lambda: c.append(b"x", type=1.0), lambda: c.append_each([b"x"], type=None),
                     lambda: c.truncate(None), lambda: c.truncate(-1), lambda: c.read(1, -1),
                     lambda: c.read(1, 1.5), lambda: c.read(-1, 10), lambda: c.read(1, 10, stale="yes"),
                     lambda: c.get_tso_timestamp(0), lambda: c.get_tso_timestamp(1.5)):
            with pytest.raises(InvalidArgument):
                call()
        assert [r.payload for r in c.read(first, 1 << 20)[0]] == [b"a"] and c.get_truncated_lsn() == 0
        assert c.append(b"b", type=7) > first
    finally:
        c.close()
        svc.close()
