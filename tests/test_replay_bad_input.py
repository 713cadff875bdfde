"""Bad input on the replication path: a WAL record with a bad CRC stops the RO node with a clear
error instead of being applied; truncated or altered stream messages are rejected and the node
goes on; malformed RPC frames get typed errors and the server stays up."""
import pytest

from logtide._ext import xlogwriter as xw
from logtide.engine.logservice import LogService
from logtide.errors import CorruptionError, CorruptWALRecordError, LogtideError, ReplicaError
from logtide.replay.meta_stream import StreamFormatError, encode_batch
from logtide.replay.primary import Primary, rel_tag
from logtide.replay.ro_node import ReadOnlyNode
from logtide.replay.transport_inproc import connect_inprocess

REL = 16384


@pytest.mark.timeout(60)
def test_bad_crc_record_stops_the_node(tmp_path):
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    ro = ReadOnlyNode(tmp_path, log, node_id=1, background=False)
    link = connect_inprocess(primary, ro)
    try:
        tid = primary.insert(REL, b"good")
        assert ro.wait_applied(primary.write_lsn)
        tag = rel_tag(REL, tid[0])
        before, lsn0 = ro.read_page(tag)
        link.close()  # from here on the test is the primary: it writes one damaged record
        good = xw.heap_insert(tag, 2, b"evil", prev=primary.write_lsn)
        bad = bytearray(good)
        bad[-6] ^= 0xFF  # a byte of the tuple: only the CRC can tell
        lsn = log.append(bytes(bad))
        ro.receive(encode_batch([lsn], [xw.wal_meta(good)], lsn, 0))  # its meta is intact
        assert ro.wait_applied(lsn)
        with pytest.raises(CorruptWALRecordError, match="CRC"):
            ro.read_page(tag)
        assert isinstance(ro.error, CorruptWALRecordError)
        with pytest.raises(ReplicaError):  # it stays stopped: no later read applies anything
            ro.read_page(tag)
        f = ro.pool.lookup(tag)
        assert f < 0 or ro.pool.frames[f].tobytes() == before  # nothing of the bad record was applied
    finally:
        ro.close()
        primary.close()
        log.close()


@pytest.mark.timeout(60)
def test_truncated_and_altered_stream_messages_are_rejected(tmp_path):
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    ro = ReadOnlyNode(tmp_path, log, node_id=1)
    ro.attach(1, 0, lambda m: None)
    try:
        tid = primary.insert(REL, b"one")
        rec = log.read(1, 1 << 20)[0][0].payload
        msg = encode_batch([1], [xw.wal_meta(rec)], 1, 0)
        for cut in (0, 10, 39, len(msg) - 1):
            with pytest.raises(StreamFormatError):
                ro.receive(msg[:cut])
        flipped = bytearray(msg)
        flipped[45] ^= 4
        with pytest.raises(CorruptionError):
            ro.receive(bytes(flipped))
        with pytest.raises(StreamFormatError):
            ro.receive(b"not a stream message at all")
        assert ro.counts["rejected_messages"] == 6 and ro.error is None
        ro.receive(msg)  # the node is still fine and applies the intact message
        assert ro.wait_applied(1)
        assert ro.get(REL, tid) == b"one"
        # a meta whose block headers are cut is refused by the startup worker: the node stops
        assert ro.receive(encode_batch([2], [xw.wal_meta(rec)[:30]], 2, 0)) == 1
        with pytest.raises(ReplicaError):
            ro.wait_applied(2, timeout=10)
        assert isinstance(ro.error, CorruptWALRecordError)
    finally:
        ro.close()
        primary.close()
        log.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("carrier", ["wire", "grpc"])
def test_malformed_rpc_frames_get_typed_errors(tmp_path, carrier):
    from logtide.engine.rpc import connect
    from logtide.engine.rpc.dual_server import DualServer
    from logtide.replay.replication_rpc import REPLICATION, ReplicationServicer
    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    server = DualServer("127.0.0.1:0")
    server.add_service(REPLICATION, ReplicationServicer(primary))
    server.start()
    client = connect(REPLICATION, server.address, carrier=carrier)
    try:
        with pytest.raises(CorruptionError):
            client.Feedback(data=b"\x00" * 48)
        with pytest.raises(LogtideError):
            client.Feedback(data=b"")
        with pytest.raises(LogtideError):
            list(client.StreamMeta(node_id=99, from_lsn=1))  # never subscribed
        r = client.Subscribe(node_id=5)  # the server is still up
        assert r.start_lsn == 1
    finally:
        client.close()
        server.stop(0.5)
        primary.close()
        log.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("carrier", ["wire", "grpc"])
def test_bad_tuple_requests_get_typed_errors_over_the_network(tmp_path, carrier):
    """Oversized tuples, wrong tids and missing tuples: typed errors across the wire, nothing written."""
    from logtide.engine.rpc import connect
    from logtide.engine.rpc.dual_server import DualServer
    from logtide.errors import InvalidArgument, InvalidRequest
    from logtide.replay.primary import TupleNotFoundError
    from logtide.replay.replication_rpc import REPLAY_NODE, NodeServicer

    class Holder:
        def __init__(self, node):
            self.node = node

        def status(self):
            return self.node.stats()

    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    server = DualServer("127.0.0.1:0")
    server.add_service(REPLAY_NODE, NodeServicer(Holder(primary)))
    server.start()
    client = connect(REPLAY_NODE, server.address, carrier=carrier)
    try:
        with pytest.raises(InvalidArgument):
            client.Insert(rel=REL, data=b"x" * 9000)
        with pytest.raises(InvalidArgument):
            client.Insert(rel=REL, data=b"")
        with pytest.raises(InvalidArgument):
            client.Update(rel=REL, block=0, slot=0, data=b"y")
        with pytest.raises(TupleNotFoundError):
            client.Delete(rel=REL, block=5, slot=1)
        with pytest.raises(InvalidRequest):
            client.ReadPage(tag=[1, 2, 3])
        assert primary.write_lsn == 0  # nothing reached the log
        r = client.Insert(rel=REL, data=b"fine")  # and the server still serves
        assert client.Get(rel=REL, block=r.block, slot=r.slot).data == b"fine"
        assert not client.Get(rel=REL, block=r.block, slot=r.slot + 1).found
        with pytest.raises(InvalidArgument):
            primary.insert("16384", b"x")
        with pytest.raises(InvalidArgument):
            primary.get(REL, ("a", 1))
    finally:
        client.close()
        server.stop(0.5)
        primary.close()
        log.close()


@pytest.mark.timeout(60)
def test_refused_primary_writes_change_nothing(tmp_path):
    """Every primary write that raises leaves no effect: no WAL, no page change, no new block."""
    from logtide.errors import InvalidArgument
    from logtide.replay.primary import TupleNotFoundError

    log = LogService.open(tmp_path / "log")
    primary = Primary(tmp_path, log=log, checkpoint_interval=0)
    try:
        tids = primary.insert_many(REL, [b"row-%d" % i * 30 for i in range(300)])
        primary.delete(REL, tids[3])

        def state():
            return (primary.write_lsn, primary.nblocks(REL), list(primary.scan(REL)),
                    [primary.read_page(rel_tag(REL, b))[0] for b in range(primary.nblocks(REL))])

        before = state()
        last = primary.nblocks(REL)
        refused = [
            (InvalidArgument, lambda: primary.insert_many(REL, [b"fine", b""])),          # a bad tuple after a good one
            (InvalidArgument, lambda: primary.insert_many(REL, [b"fine", b"x" * 9000])),
            (InvalidArgument, lambda: primary.insert_many(REL, [b"fine", "text"])),
            (InvalidArgument, lambda: primary.update(REL, tids[0], b"")),
            (InvalidArgument, lambda: primary.update(REL, tids[0], b"x" * 9000)),
            (TupleNotFoundError, lambda: primary.update(REL, tids[3], b"new")),          # deleted
            (TupleNotFoundError, lambda: primary.update(REL, (last, 1), b"new")),        # past the last block
            (TupleNotFoundError, lambda: primary.update(REL, (0, 999), b"new")),
            (TupleNotFoundError, lambda: primary.delete(REL, tids[3])),                  # deleted twice
            (TupleNotFoundError, lambda: primary.delete(REL, (last + 5, 1))),
            (InvalidArgument, lambda: primary.delete(REL, ("a", 1))),
            (InvalidArgument, lambda: primary.insert(-1, b"x")),
        ]
        for err, call in refused:
            with pytest.raises(err):
                call()
            assert state() == before, err
        assert primary.update(REL, tids[0], b"after") and primary.write_lsn == before[0] + 1
    finally:
        primary.close()
        log.close()
